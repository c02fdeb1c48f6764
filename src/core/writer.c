/* core/writer.c: the writer queue, its threads, and writing the trace file
 * (which file that is: core/trace_file.c).
 *
 * Traced threads submit full chunks of records; writer threads format them into
 * JSON lines, deflate each piece of about PIECE bytes into one complete gzip
 * member and append it with a single write() under the file lock, so every
 * member on disk is whole and independent.  The queue is bounded: a submitter
 * waits when the writers are behind, so memory stays bounded and nothing is
 * dropped.
 *
 * A new file's "[" line is not written on its own: the first piece written
 * (by whichever thread gets the file lock first) carries it, so the first
 * member always holds "[" and at least one whole event line.  Perfetto guesses
 * a gzip file's format from its first member alone and refuses a first member
 * that holds only "[" (docs/trace-format.md, "Member layout").  The lines a
 * file cannot be valid without (its header, hash definitions) are kept
 * (core/kept_lines.c) and written as a member of their own before any other
 * member, after the "[" line when it is the first; a member that cannot be
 * written (a full disk) leaves what the file needs of it kept. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/compress.h"
#include "core/kept_lines.h"
#include "core/trace_file.h"
#include "core/writer.h"
#include "format/lines.h"

#define PIECE ((size_t)1 << 20)   /* JSON bytes per gzip member */
#define EMERGENCY_PIECE ((size_t)128 << 10)
#define MAX_WORKERS 16

typedef struct worker {
    pthread_t thread;
    int started;
    _Atomic pid_t tid; /* the kernel's id of the thread, once it runs */
    dft_compressor *cz; /* made at the first member */
    int hurry; /* chunks are piling up: deflate with the fastest encoder */
    dft_sbuf json, out;
    dft_sbuf first; /* "[\n" and the first piece of a file, joined to be deflated */
} worker;

static struct {
    pthread_mutex_t lock; /* queue, pool and worker lifecycle */
    pthread_cond_t nonempty, space, idle;
    dft_chunk *head, *tail;
    int queued, busy, max_inflight;
    int waiting; /* submitters waiting for space, their chunk in hand */
    _Atomic int in_flight; /* chunks handed off by a thread, not yet queued */
    dft_chunk *pool;
    int pool_len;
    int stopping;
    worker workers[MAX_WORKERS];
    int nworkers, running;
    worker sync; /* for the header and end event, written under dft_g.life_lock */
    int pending; /* the file is configured but not opened yet */

    pthread_mutex_t file_lock; /* the fd and the write of one member */
    int fd;
    char *path;      /* the file asked for */
    char *actual;    /* the file written: path, or its fallback name */
    off_t good_end;  /* end of the last whole member written */
    int dead;        /* a torn write could not be cut back: writing stopped */
    int compression;
    dft_fmt_ctx fmt;
    _Atomic int need_bracket; /* a new file: the next piece written starts with "[\n" */

    _Atomic uint64_t lines;
    int write_error_reported;

    /* Preallocated for writes from signal handlers (DFTRACER_BIND_SIGNALS). */
    _Atomic int emergency_busy;
    worker emergency;
    int emergency_ready;
} writer = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .nonempty = PTHREAD_COND_INITIALIZER,
    .space = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
    .file_lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

static int open_file_locked(void);

/* ---- chunks ------------------------------------------------------------ */

/* Any thread, no GIL. */
dft_chunk *dft_chunk_new(void)
{
    dft_chunk *c = NULL;
    pthread_mutex_lock(&writer.lock);
    if (writer.pool && writer.pool->cap == dft_g.chunk_cap) {
        c = writer.pool;
        writer.pool = c->next;
        writer.pool_len--;
    }
    pthread_mutex_unlock(&writer.lock);
    if (!c) {
        c = malloc(sizeof *c);
        if (!c)
            return NULL;
        c->cap = dft_g.chunk_cap;
        c->data = malloc(c->cap);
        if (!c->data) {
            free(c);
            return NULL;
        }
    }
    c->next = NULL;
    c->start = c->end = 0;
    c->gen = 0;
    return c;
}

/* Any thread, no GIL. */
void dft_chunk_free(dft_chunk *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&writer.lock);
    if (writer.pool_len < writer.max_inflight + 2 && c->cap == dft_g.chunk_cap) {
        c->next = writer.pool;
        writer.pool = c;
        writer.pool_len++;
        c = NULL;
    }
    pthread_mutex_unlock(&writer.lock);
    if (c) {
        free(c->data);
        free(c);
    }
}

/* ---- writing ----------------------------------------------------------- */

/* Appends one whole member (buf) with write() calls, retrying short writes and
 * EINTR.  On a failure (disk full, file too large) the file is cut back to the
 * end of the last whole member, so a torn member never sits between two good
 * ones; if it cannot be cut back, writing stops for good.  The first failure
 * is reported once.  Caller holds file_lock (or is in a signal handler:
 * write, ftruncate and the log's one write() are async-signal-safe). */
static int write_all(const char *buf, size_t n)
{
    if (writer.fd < 0 || writer.dead)
        return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(writer.fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            if (!writer.write_error_reported) {
                writer.write_error_reported = 1;
                dft_log(DFT_LOG_ERROR, "cannot write to %s: %s; events are being dropped",
                        writer.actual ? writer.actual : "trace", strerror(e));
            }
            if (done > 0 && ftruncate(writer.fd, writer.good_end) != 0) {
                writer.dead = 1;
                dft_log(DFT_LOG_ERROR, "cannot cut %s back to its last whole member: %s; "
                        "no more events are written to it", writer.actual ? writer.actual : "trace",
                        strerror(errno));
            }
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    writer.good_end += (off_t)n;
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
    if (!writer.compression) {
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

/* A piece of `lines` lines was not written: keeps the lines the file needs
 * for the next member.  Caller holds file_lock. */
static void keep_needed(const char *text, size_t n, size_t lines, const char *why)
{
    if (dft_kept_add_needed(text, n) != 0)
        dft_log(DFT_LOG_ERROR, "out of memory keeping the header of %s; it may not validate",
                writer.actual ? writer.actual : "trace");
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
    if (writer.fd < 0 || writer.dead || (writer.compression && worker_zinit(wk) != 0) ||
        dft_kept_member(atomic_load(&writer.need_bracket), writer.compression ? wk->cz : NULL,
                        &buf, &len) != 0 ||
        write_all(buf, len) != 0)
        return -1;
    atomic_fetch_add(&writer.lines, dft_kept_written());
    atomic_store(&writer.need_bracket, 0);
    return 0;
}

/* Writes whole lines as one member (or as-is when uncompressed), deflated
 * outside the file lock, in parallel with the other writers.  Under the
 * lock, the kept lines go first; when they cannot be written, neither is
 * the piece (its events may use their hashes): it is dropped, and what the
 * file needs of it kept.  The first piece of a file without kept lines is
 * encoded again under the lock, with "[", so that nothing is written before
 * it.  Writer threads (or the sync worker under writer.lock), no GIL. */
static void write_piece(worker *wk, const char *text, size_t n, size_t lines)
{
    const char *buf;
    size_t len;
    int encoded = encode_piece(wk, 0, text, n, &buf, &len) == 0;
    pthread_mutex_lock(&writer.file_lock);
    int ok = writer.fd >= 0 && !writer.dead && write_kept_locked(wk) == 0;
    int bracket = atomic_load(&writer.need_bracket);
    if (ok && (bracket || !encoded) && encode_piece(wk, bracket, text, n, &buf, &len) != 0) {
        keep_needed(text, n, lines, "compression failed");
    } else if (ok && write_all(buf, len) == 0) {
        atomic_store(&writer.need_bracket, 0);
        atomic_fetch_add(&writer.lines, lines);
    } else {
        keep_needed(text, n, lines, NULL); /* write_all reported a failed write */
    }
    pthread_mutex_unlock(&writer.file_lock);
}

/* Formats and writes the records of one chunk.  Writer threads, no GIL. */
static void process_chunk(worker *wk, dft_chunk *c)
{
    if (c->gen != atomic_load(&dft_trace.gen))
        return; /* records of an earlier file (inherited across fork) */
    size_t pos = c->start;
    while (pos < c->end) {
        wk->json.len = 0;
        wk->json.failed = 0;
        size_t lines = dft_format_records(&wk->json, c->data, &pos, c->end, &writer.fmt, PIECE);
        if (wk->json.failed) {
            dft_log(DFT_LOG_ERROR, "out of memory while formatting; %zu events dropped", lines);
            dft_sbuf_free(&wk->json);
            continue;
        }
        if (lines)
            write_piece(wk, wk->json.data, wk->json.len, lines);
    }
}

/* Writer thread body.  Never touches Python. */
static void *worker_main(void *arg)
{
    worker *wk = arg;
    atomic_store(&wk->tid, (pid_t)syscall(SYS_gettid));
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the program's threads */
    pthread_mutex_lock(&writer.lock);
    for (;;) {
        while (!writer.head && !writer.stopping)
            pthread_cond_wait(&writer.nonempty, &writer.lock);
        if (!writer.head && writer.stopping)
            break;
        dft_chunk *c = writer.head;
        writer.head = c->next;
        if (!writer.head)
            writer.tail = NULL;
        writer.queued--;
        writer.busy++;
        /* The line encoder is smaller but slower than igzip's fastest level:
         * it runs while the writers keep up, and the fastest encoder takes
         * over once more than half the queue is taken (or a traced thread
         * waits), so that a flood never waits longer for it (docs/
         * performance.md, "What it costs, and when the writer falls behind"). */
        wk->hurry = writer.waiting > 0 || writer.queued + writer.busy > writer.max_inflight / 2;
        pthread_mutex_unlock(&writer.lock);
        process_chunk(wk, c);
        dft_chunk_free(c);
        pthread_mutex_lock(&writer.lock);
        writer.busy--;
        pthread_cond_broadcast(&writer.space);
        if (!writer.head && writer.busy == 0)
            pthread_cond_broadcast(&writer.idle);
    }
    pthread_mutex_unlock(&writer.lock);
    return NULL;
}

/* Starts the writer threads if they are not running.  Caller holds writer.lock. */
static int ensure_workers_locked(void)
{
    if (writer.running)
        return 0;
    writer.stopping = 0;
    for (int i = 0; i < writer.nworkers; i++) {
        worker *wk = &writer.workers[i];
        if (pthread_create(&wk->thread, NULL, worker_main, wk) != 0) {
            dft_log(DFT_LOG_ERROR, "cannot start writer thread: %s", strerror(errno));
            break;
        }
        wk->started = 1;
        writer.running++;
    }
    return writer.running ? 0 : -1;
}

/* Set while fork() prepares: the forking thread must keep the GIL. */
__thread int dft_no_gil_release;

static void *gil_release(void)
{
    return dft_g.before_wait && !dft_no_gil_release ? dft_g.before_wait() : NULL;
}

static void gil_restore(void *h)
{
    if (dft_g.after_wait)
        dft_g.after_wait(h);
}

/* Any thread, no GIL needed; releases the GIL if it must wait. */
void dft_writer_submit(dft_chunk *c)
{
    pthread_mutex_lock(&writer.lock);
    if (writer.fd < 0 && writer.pending && open_file_locked() != 0 && !writer.write_error_reported) {
        writer.write_error_reported = 1;
        dft_log(DFT_LOG_ERROR, "cannot open %s: %s; events are being dropped", writer.path,
                strerror(errno));
    }
    /* A file that could not be opened yet still gets the chunk: the writer
     * keeps the lines the file needs for when it opens. */
    if ((writer.fd < 0 && !writer.pending) || ensure_workers_locked() != 0) {
        atomic_fetch_sub(&writer.in_flight, 1);
        pthread_cond_broadcast(&writer.idle);
        pthread_mutex_unlock(&writer.lock);
        dft_chunk_free(c);
        return;
    }
    void *h = NULL;
    int waited = 0;
    if (writer.queued + writer.busy >= writer.max_inflight) {
        /* Counted in writer.waiting so that a drain (flush, a signal's flush) waits
         * for this chunk too; queued below without taking the GIL back first,
         * so a drain never waits on a thread that waits for the GIL. */
        writer.waiting++;
        waited = 1;
        pthread_mutex_unlock(&writer.lock);
        h = gil_release();
        pthread_mutex_lock(&writer.lock);
        while (writer.queued + writer.busy >= writer.max_inflight && writer.running)
            pthread_cond_wait(&writer.space, &writer.lock);
        writer.waiting--;
    }
    c->next = NULL;
    if (writer.tail)
        writer.tail->next = c;
    else
        writer.head = c;
    writer.tail = c;
    writer.queued++;
    atomic_fetch_sub(&writer.in_flight, 1);
    pthread_cond_signal(&writer.nonempty);
    pthread_mutex_unlock(&writer.lock);
    if (waited)
        gil_restore(h);
}

/* Called by a thread handing off a chunk, before it releases the lock under
 * which the chunk left its buffer: from then on a drain waits for the chunk
 * until dft_writer_submit has queued it, so a finalize that runs in between
 * never closes the file under it.  Any thread, no GIL. */
void dft_writer_handoff_begin(void) { atomic_fetch_add(&writer.in_flight, 1); }

/* Waits until every submitted chunk is written.  Any thread. */
void dft_writer_drain(void)
{
    void *h = gil_release();
    pthread_mutex_lock(&writer.lock);
    if (writer.head && !writer.running && writer.fd >= 0)
        ensure_workers_locked(); /* chunks queued while the writers were stopped for a fork */
    while (((writer.head || writer.busy || writer.waiting) && writer.running) || atomic_load(&writer.in_flight))
        pthread_cond_wait(&writer.idle, &writer.lock);
    pthread_mutex_unlock(&writer.lock);
    gil_restore(h);
}

/* The lines a member written now would follow: those written, and the kept
 * lines it would carry.  Called by finalize with the queue drained. */
uint64_t dft_writer_lines(void)
{
    pthread_mutex_lock(&writer.file_lock);
    uint64_t n = atomic_load(&writer.lines) + dft_kept_count();
    pthread_mutex_unlock(&writer.file_lock);
    return n;
}

/* ---- the file ---------------------------------------------------------- */

/* Opens the configured file (or its fallback name, core/trace_file.c); when
 * the file is new, the first piece written will start with the "[" line.
 * Caller holds writer.lock or runs before any writer thread exists. */
static int open_file_locked(void)
{
    char *used;
    off_t size;
    int fd = dft_trace_file_open(writer.path, &used, &size);
    if (fd < 0)
        return -1;
    free(writer.actual);
    writer.actual = used;
    writer.pending = 0;
    writer.fd = fd;
    writer.dead = 0;
    writer.good_end = size;
    atomic_store(&writer.need_bracket, size == 0);
    return 0;
}

/* The file of the current (or last) trace: a fallback name when the configured
 * one was refused; the configured one before it is opened; NULL before any. */
const char *dft_writer_path(void) { return writer.actual ? writer.actual : writer.path; }

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
    free(writer.path);
    writer.path = path;
    free(writer.actual);
    writer.actual = NULL;
    writer.compression = o->compression;
    writer.fmt.pid = o->pid;
    writer.fmt.hhash = o->hhash;
    writer.fmt.inc_metadata = o->inc_metadata;
    writer.write_error_reported = 0;
    writer.dead = 0;
    atomic_store(&writer.lines, 0);
    atomic_store(&writer.need_bracket, 1);
    pthread_mutex_lock(&writer.file_lock);
    dft_kept_reset(o->gen); /* an earlier file's lines, never written */
    pthread_mutex_unlock(&writer.file_lock);
    writer.nworkers = o->nthreads < 1 ? 1 : o->nthreads > MAX_WORKERS ? MAX_WORKERS : o->nthreads;
    writer.max_inflight = 2 * writer.nworkers + 2;
    writer.pending = 1;
    return open_now ? open_file_locked() : 0;
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
    if (writer.fd < 0 && writer.pending && open_file_locked() != 0)
        return;
    worker *wk = &writer.sync;
    size_t pos = 0;
    wk->json.len = 0;
    size_t lines = dft_format_records(&wk->json, rec, &pos, size, &writer.fmt, PIECE);
    if (!wk->json.failed && lines)
        write_piece(wk, wk->json.data, wk->json.len, lines);
}

/* dft_writer_write_now from a thread that runs beside the writer threads
 * (the flusher's clock pairs): under the writer's lock, as the writers'
 * own hand-offs.  Any thread, no GIL. */
void dft_writer_write_now_shared(const dft_event *ev, int64_t id)
{
    pthread_mutex_lock(&writer.lock);
    dft_writer_write_now(ev, id);
    pthread_mutex_unlock(&writer.lock);
}

/* Any thread, no GIL. */
int dft_writer_keep(const char *data, size_t start, size_t end, uint64_t gen)
{
    int rc = 0;
    pthread_mutex_lock(&writer.lock);
    worker *wk = &writer.sync;
    size_t pos = start;
    while (rc == 0 && pos < end) {
        wk->json.len = 0;
        wk->json.failed = 0;
        size_t before = pos;
        size_t lines = dft_format_records(&wk->json, data, &pos, end, &writer.fmt, PIECE);
        pthread_mutex_lock(&writer.file_lock);
        if (dft_kept_gen() != gen) {
            rc = 1; /* another file started: not this one's */
        } else if (wk->json.failed || pos == before ||
                   dft_kept_add(wk->json.data, wk->json.len, lines) != 0) {
            dft_log(DFT_LOG_ERROR, "out of memory keeping the header of %s; it may not validate",
                    writer.actual ? writer.actual : "trace");
            rc = -1;
        }
        pthread_mutex_unlock(&writer.file_lock);
    }
    pthread_mutex_unlock(&writer.lock);
    return rc;
}

/* Any thread, no GIL. */
void dft_writer_write_kept(void)
{
    if (!dft_kept_pending())
        return;
    pthread_mutex_lock(&writer.lock);
    if (writer.fd < 0 && writer.pending && open_file_locked() != 0 &&
        !writer.write_error_reported) {
        writer.write_error_reported = 1;
        dft_log(DFT_LOG_ERROR, "cannot open %s: %s; events are being dropped", writer.path,
                strerror(errno));
    }
    pthread_mutex_lock(&writer.file_lock);
    write_kept_locked(&writer.sync);
    pthread_mutex_unlock(&writer.file_lock);
    pthread_mutex_unlock(&writer.lock);
}

/* The flusher's tick: lines kept for a whole period with no member written
 * to carry them (a forked child's header, a full disk that freed) are
 * written on their own.  The flusher thread, no GIL. */
void dft_writer_tick(void)
{
    if (!dft_kept_pending())
        return;
    pthread_mutex_lock(&writer.file_lock);
    int aged = dft_kept_aged();
    pthread_mutex_unlock(&writer.file_lock);
    if (aged)
        dft_writer_write_kept();
}

/* Stops the writer threads once the queue is empty (chunks queued after that
 * wait for the next start) and writes the kernel ids of the threads stopped
 * to tids (at most cap).  Returns how many.  Under dft_g.life_lock; no GIL
 * needed: writer threads never wait for it. */
static int stop_workers(pid_t *tids, int cap)
{
    pthread_mutex_lock(&writer.lock);
    writer.stopping = 1;
    pthread_cond_broadcast(&writer.nonempty);
    pthread_mutex_unlock(&writer.lock);
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++) {
        worker *wk = &writer.workers[i];
        if (wk->started) {
            pthread_join(wk->thread, NULL);
            wk->started = 0;
            if (n < cap)
                tids[n++] = atomic_load(&wk->tid);
        }
    }
    pthread_mutex_lock(&writer.lock);
    writer.running = 0;
    writer.stopping = 0;
    pthread_cond_broadcast(&writer.space);
    pthread_cond_broadcast(&writer.idle);
    pthread_mutex_unlock(&writer.lock);
    return n;
}

/* Before fork(): the queue is written and the threads are gone; the next
 * submit (or drain) starts them again (ensure_workers_locked). */
int dft_writer_stop_threads(pid_t *tids, int cap) { return stop_workers(tids, cap); }

/* Stops the writer threads after the queue is empty and closes the file. */
void dft_writer_close(void)
{
    pid_t unused[MAX_WORKERS];
    stop_workers(unused, MAX_WORKERS);
    pthread_mutex_lock(&writer.file_lock);
    writer.pending = 0;
    if (writer.fd >= 0) {
        if (close(writer.fd) != 0)
            dft_log(DFT_LOG_ERROR, "closing %s: %s", writer.path ? writer.path : "trace", strerror(errno));
        writer.fd = -1;
    }
    pthread_mutex_unlock(&writer.file_lock);
}

/* ---- fork -------------------------------------------------------------- */

/* Holds the writer locks across fork() so the child inherits them unlocked
 * and consistent.  The queue was drained just before. */
void dft_writer_atfork_prepare(void)
{
    pthread_mutex_lock(&writer.lock);
    pthread_mutex_lock(&writer.file_lock);
}

void dft_writer_atfork_parent(void)
{
    pthread_mutex_unlock(&writer.file_lock);
    pthread_mutex_unlock(&writer.lock);
}

/* In the child: no writer thread exists and the parent's file is not ours.
 * Single-threaded. */
void dft_writer_atfork_child(void)
{
    atomic_store(&writer.in_flight, 0); /* hand-offs of threads that do not exist here */
    pthread_mutex_init(&writer.lock, NULL);
    pthread_mutex_init(&writer.file_lock, NULL);
    pthread_cond_init(&writer.nonempty, NULL);
    pthread_cond_init(&writer.space, NULL);
    pthread_cond_init(&writer.idle, NULL);
    for (dft_chunk *c = writer.head; c;) {
        dft_chunk *n = c->next;
        free(c->data);
        free(c);
        c = n;
    }
    writer.head = writer.tail = NULL;
    writer.queued = writer.busy = writer.waiting = 0;
    writer.running = 0;
    writer.stopping = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        writer.workers[i].started = 0;
    if (writer.fd >= 0) {
        close(writer.fd);
        writer.fd = -1;
    }
    writer.pending = 0;
    dft_kept_reset(0); /* the parent's file's */
    dft_trace_file_forget_owned(); /* the parent's files: never appended to here */
    atomic_store(&writer.emergency_busy, 0);
}

/* ---- signals ----------------------------------------------------------- */

int dft_writer_emergency_prepare(void)
{
    if (writer.emergency_ready)
        return 0;
    worker *wk = &writer.emergency;
    if (worker_zinit(wk) != 0)
        return -1;
    if (dft_sbuf_reserve(&wk->json, EMERGENCY_PIECE + 8 * DFT_REC_MAX) != 0 ||
        dft_sbuf_reserve(&wk->first, EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) != 0 ||
        dft_sbuf_reserve(&wk->out, dft_compress_bound(EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) +
                                       EMERGENCY_PIECE + 8 * DFT_REC_MAX + 2) != 0)
        return -1;
    writer.emergency_ready = 1;
    return 0;
}

/* From a signal handler: formats and writes records with preallocated buffers;
 * skips the write if another thread holds the file lock. */
int dft_writer_emergency(const char *data, size_t start, size_t end)
{
    if (!writer.emergency_ready || writer.fd < 0 || atomic_exchange(&writer.emergency_busy, 1))
        return -1;
    worker *wk = &writer.emergency;
    size_t pos = start;
    int rc = 0;
    while (pos < end && rc == 0) {
        wk->json.len = 0;
        size_t lines = dft_format_records(&wk->json, data, &pos, end, &writer.fmt, EMERGENCY_PIECE);
        if (wk->json.failed || !lines)
            break;
        const char *buf;
        size_t len;
        if (pthread_mutex_trylock(&writer.file_lock) != 0) {
            rc = -1;
            break;
        }
        /* Encoded under the lock: the first piece of a new file carries "[".
         * The reserved buffers hold it, so nothing is allocated here.  While
         * lines are kept (they would need allocating), nothing is written. */
        int bracket = atomic_load(&writer.need_bracket);
        if (dft_kept_pending() ||
            encode_piece(wk, bracket, wk->json.data, wk->json.len, &buf, &len) != 0) {
            pthread_mutex_unlock(&writer.file_lock);
            rc = -1;
            break;
        }
        if (write_all(buf, len) == 0) {
            atomic_store(&writer.need_bracket, 0);
            atomic_fetch_add(&writer.lines, lines);
        }
        pthread_mutex_unlock(&writer.file_lock);
    }
    atomic_store(&writer.emergency_busy, 0);
    return rc;
}
