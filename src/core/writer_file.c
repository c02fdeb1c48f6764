/* core/writer_file.c: the writer's file half: formatting a chunk's records
 * into pieces of JSON lines, deflating each into one whole gzip member and
 * appending it with one write() under the file lock; opening the file,
 * the lines kept for it (core/kept_lines.c), the synchronous writes of the
 * lifecycle and the best-effort writes of a signal handler.  The queue and
 * the threads that call it are core/writer.c; see there for the layout of
 * a file's members. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/kept_lines.h"
#include "core/state.h"
#include "core/trace_file.h"
#include "core/writer_state.h"

/* The writer's one state (core/writer_state.h), defined here, in the half
 * that only reads it: the queue's threads (core/writer.c) call down into this
 * file, and nothing here calls back up into theirs. */
dft_writer_state dft_writer = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .nonempty = PTHREAD_COND_INITIALIZER,
    .space = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
    .file_lock = PTHREAD_MUTEX_INITIALIZER,
    .file = DFT_OWNED_FD_NONE,
};

/* ---- writing ----------------------------------------------------------- */

#ifdef DFT_TESTING
_Atomic int dft_test_reclaim_delay_us;
#endif

/* The trace file's descriptor was closed by the program, or its number now
 * names a file of the program's (os.closerange, then an open()): opens the
 * trace file again by name, for appending, when it is still the same file;
 * else writing stops, with one line.  Nothing is ever written through the
 * old number.  Caller holds file_lock (or is in a signal handler: open,
 * fstat and fcntl are async-signal-safe). */
static int reclaim_file(void)
{
#ifdef DFT_TESTING
    int delay = atomic_load_explicit(&dft_test_reclaim_delay_us, memory_order_relaxed);
    if (delay > 0)
        usleep((useconds_t)delay);
#endif
    const char *path = dft_writer.actual ? dft_writer.actual : dft_writer.path;
    int fd = path ? open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd >= 0 && dft_owned_fd_same_file(&dft_writer.file, fd)) {
        if (dft_owned_fd_adopt(&dft_writer.file, fd) == 0) { /* has_file stays 1 */
            struct stat st;
            if (fstat(dft_writer.file.fd, &st) == 0)
                dft_writer.good_end = st.st_size;
            return 0;
        }
        fd = -1; /* closed by adopt */
        atomic_store(&dft_writer.has_file, 0);
    }
    int e = fd >= 0 ? ESTALE : errno;
    if (fd >= 0)
        close(fd);
    dft_writer.dead = 1;
    dft_log(DFT_LOG_ERROR, "the program closed the trace file's descriptor and %s cannot be "
            "opened again (%s); no more events are written to it",
            path ? path : "the trace file", strerror(e));
    return -1;
}

/* Appends one whole member (buf) with write() calls, retrying short writes and
 * EINTR.  On a failure (disk full, file too large) the file is cut back to the
 * end of the last whole member, so a torn member never sits between two good
 * ones; if it cannot be cut back, writing stops for good.  The first failure
 * is reported once.  Caller holds file_lock (or is in a signal handler:
 * write, ftruncate and the log's one write() are async-signal-safe). */
static int write_all(const char *buf, size_t n)
{
    if (dft_writer.file.fd < 0 || dft_writer.dead)
        return -1;
    /* Checked on a copy: the file keeps its old number until reclaim_file
     * has the new one (has_file stays set: a hand-off meanwhile is queued). */
    dft_owned_fd now = dft_writer.file;
    if (!dft_owned_fd_check(&now) && reclaim_file() != 0)
        return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(dft_writer.file.fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            if (!dft_writer.write_error_reported) {
                dft_writer.write_error_reported = 1;
                dft_log(DFT_LOG_ERROR, "cannot write to %s: %s; events are being dropped",
                        dft_writer.actual ? dft_writer.actual : "trace", strerror(e));
            }
            if (done > 0 && ftruncate(dft_writer.file.fd, dft_writer.good_end) != 0) {
                dft_writer.dead = 1;
                dft_log(DFT_LOG_ERROR, "cannot cut %s back to its last whole member: %s; "
                        "no more events are written to it",
                        dft_writer.actual ? dft_writer.actual : "trace",
                        strerror(errno));
            }
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    dft_writer.good_end += (off_t)n;
    return 0;
}

static int worker_zinit(worker *wk)
{
    if (!wk->cz)
        wk->cz = dft_compressor_new();
    return wk->cz ? 0 : -1;
}

/* The bytes to append for text: one gzip member (or the text itself), with
 * "[\n" in front when bracket is set (joined in wk->first: the compressor
 * takes one contiguous input).  Sets *buf and *len.  Allocates only when a
 * buffer is too small (never in the emergency worker, whose buffers are
 * reserved).  Writer threads, no GIL. */
static int encode_piece(worker *wk, int bracket, const char *text, size_t n, const char **buf,
                        size_t *len)
{
    if (bracket) {
        wk->first.len = 0;
        if (dft_sbuf_reserve(&wk->first, n + 2) != 0)
            return -1;
        memcpy(wk->first.data, "[\n", 2);
        memcpy(wk->first.data + 2, text, n);
        text = wk->first.data;
        n += 2;
    }
    if (!dft_writer.compression) {
        *buf = text;
        *len = n;
        return 0;
    }
    if (worker_zinit(wk) != 0)
        return -1;
    wk->out.len = 0;
    if (dft_sbuf_reserve(&wk->out, dft_compress_bound(n)) != 0)
        return -1;
    wk->out.len = dft_compress_member_with(wk->cz, text, n, wk->out.data, wk->out.cap,
                                           wk->hurry ? DFT_ENCODER_FASTEST : DFT_ENCODER_AUTO);
    *buf = wk->out.data;
    *len = wk->out.len;
    return wk->out.len ? 0 : -1;
}

/* A piece of `lines` lines, the records data[from, to), was not written:
 * keeps the lines the file needs for the next member.  Caller holds
 * file_lock. */
static void keep_needed(const piece_recs *recs, size_t lines, const char *why)
{
    if (dft_kept_add_needed(recs->data, recs->from, recs->to, &dft_writer.fmt) != 0)
        dft_log(DFT_LOG_ERROR, "out of memory keeping the header of %s; it may not validate",
                dft_writer.actual ? dft_writer.actual : "trace");
    if (why)
        dft_log(DFT_LOG_ERROR, "%s; %zu events dropped", why, lines);
}

/* Writes the kept lines (the header, hash definitions: dft_writer_keep) as
 * a member of their own, after "[" when the file has nothing yet: before any
 * member that may use them.  0, or -1 when they could not be written (they
 * stay kept).  Caller holds file_lock; wk's compressor is used, not its
 * buffers. */
static int write_kept_locked(worker *wk)
{
    if (!dft_kept_pending())
        return 0;
    const char *buf;
    size_t len;
    if (dft_writer.file.fd < 0 || dft_writer.dead || (dft_writer.compression && worker_zinit(wk) != 0) ||
        dft_kept_member(atomic_load(&dft_writer.need_bracket),
                        dft_writer.compression ? wk->cz : NULL,
                        &buf, &len) != 0 ||
        write_all(buf, len) != 0)
        return -1;
    atomic_fetch_add(&dft_writer.lines, dft_kept_written());
    atomic_store(&dft_writer.need_bracket, 0);
    return 0;
}

/* Writes whole lines as one member (or as-is when uncompressed), deflated
 * outside the file lock, in parallel with the other writers.  Under the
 * lock, the kept lines go first; when they cannot be written, neither is
 * the piece (its events may use their hashes): it is dropped, and what the
 * file needs of it kept.  The first piece of a file without kept lines is
 * encoded again under the lock, with "[", so that nothing is written before
 * it.  Writer threads (or the sync worker under dft_writer.lock), no GIL. */
static void write_piece(worker *wk, const char *text, size_t n, size_t lines,
                        const piece_recs *recs)
{
    const char *buf;
    size_t len;
    int encoded = encode_piece(wk, 0, text, n, &buf, &len) == 0;
    pthread_mutex_lock(&dft_writer.file_lock);
    int ok = dft_writer.file.fd >= 0 && !dft_writer.dead && write_kept_locked(wk) == 0;
    int bracket = atomic_load(&dft_writer.need_bracket);
    if (ok && (bracket || !encoded) && encode_piece(wk, bracket, text, n, &buf, &len) != 0) {
        keep_needed(recs, lines, "compression failed");
    } else if (ok && write_all(buf, len) == 0) {
        atomic_store(&dft_writer.need_bracket, 0);
        atomic_fetch_add(&dft_writer.lines, lines);
    } else {
        keep_needed(recs, lines, NULL); /* write_all reported a failed write */
    }
    pthread_mutex_unlock(&dft_writer.file_lock);
}

/* Formats and writes the records of one chunk.  Writer threads, no GIL. */
void dft_writer_process_chunk(worker *wk, dft_chunk *c)
{
    if (c->gen != atomic_load(&dft_trace.gen))
        return; /* records of an earlier file (inherited across fork) */
    size_t pos = c->start;
    while (pos < c->end) {
        wk->json.len = 0;
        wk->json.failed = 0;
        piece_recs recs = {c->data, pos, 0};
        size_t lines = dft_format_records(&wk->json, c->data, &pos, c->end, &dft_writer.fmt, PIECE);
        recs.to = pos;
        if (wk->json.failed) {
            dft_log(DFT_LOG_ERROR, "out of memory while formatting; %zu events dropped", lines);
            dft_sbuf_free(&wk->json);
            continue;
        }
        if (lines)
            write_piece(wk, wk->json.data, wk->json.len, lines, &recs);
    }
}

/* ---- the file ---------------------------------------------------------- */

/* Opens the configured file (or its fallback name, core/trace_file.c); when
 * the file is new, the first piece written will start with the "[" line.
 * Caller holds dft_writer.lock (not file_lock, taken here) or runs before
 * any writer thread exists. */
static int open_file_locked(void)
{
    char *used;
    off_t size;
    int fd = dft_trace_file_open(dft_writer.path, &used, &size);
    if (fd < 0)
        return -1;
    /* file_lock too: a writer thread may be writing the lines kept while
     * the file could not be opened (write_piece reads file under it). */
    pthread_mutex_lock(&dft_writer.file_lock);
    free(dft_writer.actual);
    dft_writer.actual = used;
    dft_writer.pending = 0;
    int rc = dft_owned_fd_adopt(&dft_writer.file, fd);
    if (rc == 0) {
        dft_writer.dead = 0;
        dft_writer.good_end = size;
        atomic_store(&dft_writer.need_bracket, size == 0);
        atomic_store(&dft_writer.has_file, 1);
    }
    pthread_mutex_unlock(&dft_writer.file_lock);
    return rc;
}

/* Opens the file a trace waits for (opened at the first write), reporting
 * a failure once per trace.  Caller holds dft_writer.lock. */
void dft_writer_open_pending_locked(void)
{
    if (!atomic_load(&dft_writer.has_file) && dft_writer.pending && open_file_locked() != 0 &&
        !dft_writer.write_error_reported) {
        dft_writer.write_error_reported = 1;
        dft_log(DFT_LOG_ERROR, "cannot open %s: %s; events are being dropped", dft_writer.path,
                strerror(errno));
    }
}

/* The file of the current (or last) trace: a fallback name when the configured
 * one was refused; the configured one before it is opened; NULL before any. */
const char *dft_writer_path(void)
{
    return dft_writer.actual ? dft_writer.actual : dft_writer.path;
}

/* Sets the file and format for the next trace; with open_now, opens it at once
 * (so initialize_log can report a bad path), else at the first write.  Called
 * under dft_g.life_lock with no writer thread running (or in a forked child). */
int dft_writer_open(const dft_writer_opts *o, int open_now)
{
    char *path = strdup(o->path);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    free(dft_writer.path);
    dft_writer.path = path;
    free(dft_writer.actual);
    dft_writer.actual = NULL;
    dft_writer.compression = o->compression;
    dft_writer.fmt.pid = o->pid;
    dft_writer.fmt.hhash = o->hhash;
    dft_writer.fmt.inc_metadata = o->inc_metadata;
    dft_writer.write_error_reported = 0;
    dft_writer.dead = 0;
    atomic_store(&dft_writer.lines, 0);
    atomic_store(&dft_writer.need_bracket, 1);
    pthread_mutex_lock(&dft_writer.file_lock);
    dft_kept_reset(o->gen); /* an earlier file's lines, never written */
    pthread_mutex_unlock(&dft_writer.file_lock);
    dft_writer.nworkers = o->nthreads < 1             ? 1
                          : o->nthreads > MAX_WORKERS ? MAX_WORKERS
                                                      : o->nthreads;
    dft_writer.max_inflight = 2 * dft_writer.nworkers + 2;
    dft_writer.pending = 1;
    return open_now ? open_file_locked() : 0;
}

/* The trace file's bytes were copied to fd, a new file (another file
 * system): fd replaces the old descriptor, whose file is gone.  Under both
 * writer locks. */
static void adopt_moved_locked(int fd)
{
    dft_owned_fd_close(&dft_writer.file);
    if (dft_owned_fd_adopt(&dft_writer.file, fd) != 0) {
        atomic_store(&dft_writer.has_file, 0);
        dft_writer.dead = 1;
        dft_log(DFT_LOG_ERROR, "cannot keep %s open after moving it there: %s; no more events "
                "are written to it", dft_writer.actual, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(dft_writer.file.fd, &st) == 0)
        dft_writer.good_end = st.st_size;
}

/* Any thread, no GIL (under dft_g.life_lock). */
int dft_writer_rename(const char *new_path)
{
    char *path = strdup(new_path);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    pthread_mutex_lock(&dft_writer.lock);
    pthread_mutex_lock(&dft_writer.file_lock);
    int rc = 0;
    if (dft_writer.actual) { /* opened: the file itself takes the name */
        char *actual = strdup(new_path);
        int moved = -1;
        if (!actual || dft_trace_file_rename(dft_writer.actual, new_path, &moved) != 0) {
            int e = actual ? errno : ENOMEM;
            free(actual);
            free(path);
            path = NULL;
            errno = e;
            rc = -1;
        } else {
            free(dft_writer.actual);
            dft_writer.actual = actual;
            if (moved >= 0) /* copied to another file system: write on in the copy */
                adopt_moved_locked(moved);
        }
    }
    if (path) {
        free(dft_writer.path);
        dft_writer.path = path;
    }
    pthread_mutex_unlock(&dft_writer.file_lock);
    pthread_mutex_unlock(&dft_writer.lock);
    return rc;
}

/* Formats one event and writes it at once, bypassing the queue (the end event).
 * Called by finalize after the queue is drained. */
void dft_writer_write_now(const dft_event *ev, int64_t id)
{
    char rec[DFT_REC_MAX];
    size_t size = dft_record_size(ev);
    if (size > sizeof rec)
        return;
    dft_rec_place at = {.id = id, .level = 1, .p_idx = -1, .tid = ev->tid};
    dft_record_encode(rec, ev, size, &at);
    if (!atomic_load(&dft_writer.has_file) && dft_writer.pending && open_file_locked() != 0)
        return;
    worker *wk = &dft_writer.sync;
    size_t pos = 0;
    wk->json.len = 0;
    size_t lines = dft_format_records(&wk->json, rec, &pos, size, &dft_writer.fmt, PIECE);
    piece_recs recs = {rec, 0, pos};
    if (!wk->json.failed && lines)
        write_piece(wk, wk->json.data, wk->json.len, lines, &recs);
}

/* dft_writer_write_now from a thread that runs beside the writer threads
 * (the flusher's clock pairs): under the writer's lock, as the writers'
 * own hand-offs.  Any thread, no GIL. */
void dft_writer_write_now_shared(const dft_event *ev, int64_t id)
{
    pthread_mutex_lock(&dft_writer.lock);
    dft_writer_write_now(ev, id);
    pthread_mutex_unlock(&dft_writer.lock);
}

/* Any thread, no GIL. */
int dft_writer_keep(const char *data, size_t start, size_t end, uint64_t gen)
{
    int rc = 0;
    pthread_mutex_lock(&dft_writer.lock);
    worker *wk = &dft_writer.sync;
    size_t pos = start;
    while (rc == 0 && pos < end) {
        wk->json.len = 0;
        wk->json.failed = 0;
        size_t before = pos;
        size_t lines = dft_format_records(&wk->json, data, &pos, end, &dft_writer.fmt, PIECE);
        pthread_mutex_lock(&dft_writer.file_lock);
        if (dft_kept_gen() != gen) {
            rc = 1; /* another file started: not this one's */
        } else if (wk->json.failed || pos == before ||
                   dft_kept_add(wk->json.data, wk->json.len, lines) != 0) {
            dft_log(DFT_LOG_ERROR, "out of memory keeping the header of %s; it may not validate",
                    dft_writer.actual ? dft_writer.actual : "trace");
            rc = -1;
        }
        pthread_mutex_unlock(&dft_writer.file_lock);
    }
    pthread_mutex_unlock(&dft_writer.lock);
    return rc;
}

/* Any thread, no GIL. */
void dft_writer_write_kept(void)
{
    if (!dft_kept_pending())
        return;
    pthread_mutex_lock(&dft_writer.lock);
    dft_writer_open_pending_locked();
    pthread_mutex_lock(&dft_writer.file_lock);
    write_kept_locked(&dft_writer.sync);
    pthread_mutex_unlock(&dft_writer.file_lock);
    pthread_mutex_unlock(&dft_writer.lock);
}

/* The flusher's tick: lines kept for a whole period with no member written
 * to carry them (a forked child's header, a full disk that freed) are
 * written on their own.  The flusher thread, no GIL. */
void dft_writer_tick(void)
{
    if (!dft_kept_pending())
        return;
    pthread_mutex_lock(&dft_writer.file_lock);
    int aged = dft_kept_aged();
    pthread_mutex_unlock(&dft_writer.file_lock);
    if (aged)
        dft_writer_write_kept();
}

/* ---- signals ----------------------------------------------------------- */

int dft_writer_emergency_prepare(void)
{
    if (dft_writer.emergency_ready)
        return 0;
    worker *wk = &dft_writer.emergency;
    if (worker_zinit(wk) != 0)
        return -1;
    if (dft_sbuf_reserve(&wk->json, EMERGENCY_PIECE + 8 * DFT_REC_MAX) != 0 ||
        dft_sbuf_reserve(&wk->first, EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) != 0 ||
        dft_sbuf_reserve(&wk->out, dft_compress_bound(EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) +
                                       EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) != 0)
        return -1;
    dft_writer.emergency_ready = 1;
    return 0;
}

/* From a signal handler: formats and writes records with preallocated buffers;
 * skips the write if another thread holds the file lock. */
int dft_writer_emergency(const char *data, size_t start, size_t end)
{
    if (!dft_writer.emergency_ready || !atomic_load(&dft_writer.has_file) ||
        atomic_exchange(&dft_writer.emergency_busy, 1))
        return -1;
    worker *wk = &dft_writer.emergency;
    size_t pos = start;
    int rc = 0;
    while (pos < end && rc == 0) {
        wk->json.len = 0;
        size_t lines =
            dft_format_records(&wk->json, data, &pos, end, &dft_writer.fmt, EMERGENCY_PIECE);
        if (wk->json.failed || !lines)
            break;
        const char *buf;
        size_t len;
        if (pthread_mutex_trylock(&dft_writer.file_lock) != 0) {
            rc = -1;
            break;
        }
        /* Encoded under the lock: the first piece of a new file carries "[".
         * The reserved buffers hold it, so nothing is allocated here.  While
         * lines are kept (they would need allocating), nothing is written. */
        int bracket = atomic_load(&dft_writer.need_bracket);
        if (dft_kept_pending() ||
            encode_piece(wk, bracket, wk->json.data, wk->json.len, &buf, &len) != 0) {
            pthread_mutex_unlock(&dft_writer.file_lock);
            rc = -1;
            break;
        }
        if (write_all(buf, len) == 0) {
            atomic_store(&dft_writer.need_bracket, 0);
            atomic_fetch_add(&dft_writer.lines, lines);
        }
        pthread_mutex_unlock(&dft_writer.file_lock);
    }
    atomic_store(&dft_writer.emergency_busy, 0);
    return rc;
}

/* One event (its tid set) straight to the file with an id block of its own:
 * the flusher's `open`, `stack` and memory events (core.h).  Any thread
 * beside the writers (the flusher), no GIL. */
void dft_write_meta_now(const dft_event *ev)
{
    dft_writer_write_now_shared(ev, atomic_fetch_add(&dft_g.next_id_block, 1));
}
