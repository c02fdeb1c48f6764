/* core/writer.c: the writer queue, its threads, and the trace file.
 *
 * Traced threads submit full chunks of records; writer threads format them into
 * JSON lines, deflate each piece of about PIECE bytes into one complete gzip
 * member and append it with a single write() under the file lock, so every
 * member on disk is whole and independent.  The queue is bounded: a submitter
 * waits when the writers are behind, so memory stays bounded and nothing is
 * dropped. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/compress.h"
#include "core/writer.h"
#include "format/lines.h"

#define PIECE ((size_t)1 << 20)   /* JSON bytes per gzip member */
#define EMERGENCY_PIECE ((size_t)128 << 10)
#define MAX_WORKERS 16

typedef struct worker {
    pthread_t thread;
    int started;
    dft_compressor *cz; /* made at the first member */
    dft_sbuf json, out;
} worker;

static struct {
    pthread_mutex_t lock; /* queue, pool and worker lifecycle */
    pthread_cond_t nonempty, space, idle;
    dft_chunk *head, *tail;
    int queued, busy, max_inflight;
    dft_chunk *pool;
    int pool_len;
    int stopping;
    worker workers[MAX_WORKERS];
    int nworkers, running;
    worker sync; /* for the header and end event, written under dft_g.life_lock */
    int pending; /* the file is configured but not opened yet */

    pthread_mutex_t file_lock; /* the fd and the write of one member */
    int fd;
    char *path;
    int compression;
    dft_fmt_ctx fmt;
    _Atomic uint64_t lines;
    int write_error_reported;

    /* Preallocated for writes from signal handlers (DFTRACER_BIND_SIGNALS). */
    _Atomic int emergency_busy;
    worker emergency;
    int emergency_ready;
} W = {
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
    pthread_mutex_lock(&W.lock);
    if (W.pool && W.pool->cap == dft_g.chunk_cap) {
        c = W.pool;
        W.pool = c->next;
        W.pool_len--;
    }
    pthread_mutex_unlock(&W.lock);
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
    pthread_mutex_lock(&W.lock);
    if (W.pool_len < W.max_inflight + 2 && c->cap == dft_g.chunk_cap) {
        c->next = W.pool;
        W.pool = c;
        W.pool_len++;
        c = NULL;
    }
    pthread_mutex_unlock(&W.lock);
    if (c) {
        free(c->data);
        free(c);
    }
}

/* ---- writing ----------------------------------------------------------- */

/* Appends buf with write() calls, retrying short writes and EINTR; reports the
 * first failure once.  Caller holds file_lock (or is in a signal handler). */
static int write_all(const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(W.fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (!W.write_error_reported) {
                W.write_error_reported = 1;
                dft_log(DFT_LOG_ERROR, "cannot write to %s: %s; events are being dropped",
                        W.path ? W.path : "trace", strerror(errno));
            }
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int worker_zinit(worker *wk)
{
    if (!wk->cz)
        wk->cz = dft_compressor_new();
    return wk->cz ? 0 : -1;
}

/* Deflates text into one gzip member in wk->out (core/compress.c).  Writer
 * threads, no GIL. */
static int deflate_member(worker *wk, const char *text, size_t n)
{
    if (worker_zinit(wk) != 0)
        return -1;
    wk->out.len = 0;
    if (dft_sbuf_reserve(&wk->out, dft_compress_bound(n)) != 0)
        return -1;
    wk->out.len = dft_compress_member(wk->cz, text, n, wk->out.data, wk->out.cap);
    return wk->out.len ? 0 : -1;
}

/* Writes whole lines as one member (or as-is when uncompressed). */
static void write_piece(worker *wk, const char *text, size_t n, size_t lines)
{
    const char *buf = text;
    size_t len = n;
    if (W.compression) {
        if (deflate_member(wk, text, n) != 0) {
            dft_log(DFT_LOG_ERROR, "compression failed; %zu events dropped", lines);
            return;
        }
        buf = wk->out.data;
        len = wk->out.len;
    }
    pthread_mutex_lock(&W.file_lock);
    if (W.fd >= 0 && write_all(buf, len) == 0)
        atomic_fetch_add(&W.lines, lines);
    pthread_mutex_unlock(&W.file_lock);
}

/* Formats and writes the records of one chunk.  Writer threads, no GIL. */
static void process_chunk(worker *wk, dft_chunk *c)
{
    if (c->gen != atomic_load(&dft_g.gen))
        return; /* records of an earlier file (inherited across fork) */
    size_t pos = c->start;
    while (pos < c->end) {
        wk->json.len = 0;
        wk->json.failed = 0;
        size_t lines = dft_format_records(&wk->json, c->data, &pos, c->end, &W.fmt, PIECE);
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
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the program's threads */
    pthread_mutex_lock(&W.lock);
    for (;;) {
        while (!W.head && !W.stopping)
            pthread_cond_wait(&W.nonempty, &W.lock);
        if (!W.head && W.stopping)
            break;
        dft_chunk *c = W.head;
        W.head = c->next;
        if (!W.head)
            W.tail = NULL;
        W.queued--;
        W.busy++;
        pthread_mutex_unlock(&W.lock);
        process_chunk(wk, c);
        dft_chunk_free(c);
        pthread_mutex_lock(&W.lock);
        W.busy--;
        pthread_cond_broadcast(&W.space);
        if (!W.head && W.busy == 0)
            pthread_cond_broadcast(&W.idle);
    }
    pthread_mutex_unlock(&W.lock);
    return NULL;
}

/* Starts the writer threads if they are not running.  Caller holds W.lock. */
static int ensure_workers_locked(void)
{
    if (W.running)
        return 0;
    W.stopping = 0;
    for (int i = 0; i < W.nworkers; i++) {
        worker *wk = &W.workers[i];
        if (pthread_create(&wk->thread, NULL, worker_main, wk) != 0) {
            dft_log(DFT_LOG_ERROR, "cannot start writer thread: %s", strerror(errno));
            break;
        }
        wk->started = 1;
        W.running++;
    }
    return W.running ? 0 : -1;
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
    pthread_mutex_lock(&W.lock);
    if (W.fd < 0 && W.pending && open_file_locked() != 0 && !W.write_error_reported) {
        W.write_error_reported = 1;
        dft_log(DFT_LOG_ERROR, "cannot open %s: %s; events are being dropped", W.path,
                strerror(errno));
    }
    if (W.fd < 0 || ensure_workers_locked() != 0) {
        pthread_mutex_unlock(&W.lock);
        dft_chunk_free(c);
        return;
    }
    if (W.queued + W.busy >= W.max_inflight) {
        pthread_mutex_unlock(&W.lock);
        void *h = gil_release();
        pthread_mutex_lock(&W.lock);
        while (W.queued + W.busy >= W.max_inflight && W.running)
            pthread_cond_wait(&W.space, &W.lock);
        pthread_mutex_unlock(&W.lock);
        gil_restore(h);
        pthread_mutex_lock(&W.lock);
    }
    c->next = NULL;
    if (W.tail)
        W.tail->next = c;
    else
        W.head = c;
    W.tail = c;
    W.queued++;
    pthread_cond_signal(&W.nonempty);
    pthread_mutex_unlock(&W.lock);
}

/* Waits until every submitted chunk is written.  Any thread. */
void dft_writer_drain(void)
{
    void *h = gil_release();
    pthread_mutex_lock(&W.lock);
    while ((W.head || W.busy) && W.running)
        pthread_cond_wait(&W.idle, &W.lock);
    pthread_mutex_unlock(&W.lock);
    gil_restore(h);
}

uint64_t dft_writer_lines(void) { return atomic_load(&W.lines); }

/* ---- the file ---------------------------------------------------------- */

/* Opens (appending to) the configured file and writes the "[" line if it is
 * new.  Caller holds W.lock or runs before any writer thread exists. */
static int open_file_locked(void)
{
    int fd = open(W.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    W.pending = 0;
    W.fd = fd;
    if (st.st_size == 0) {
        /* The header line, as its own member so any member order stays valid. */
        worker *wk = &W.sync;
        if (W.compression) {
            if (deflate_member(wk, "[\n", 2) != 0 || write_all(wk->out.data, wk->out.len) != 0)
                return -1;
        } else if (write_all("[\n", 2) != 0) {
            return -1;
        }
    }
    return 0;
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
    free(W.path);
    W.path = path;
    W.compression = o->compression;
    W.fmt.pid = o->pid;
    W.fmt.hhash = o->hhash;
    W.fmt.inc_metadata = o->inc_metadata;
    W.write_error_reported = 0;
    atomic_store(&W.lines, 0);
    W.nworkers = o->nthreads < 1 ? 1 : o->nthreads > MAX_WORKERS ? MAX_WORKERS : o->nthreads;
    W.max_inflight = 2 * W.nworkers + 2;
    W.pending = 1;
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
    if (W.fd < 0 && W.pending && open_file_locked() != 0)
        return;
    worker *wk = &W.sync;
    size_t pos = 0;
    wk->json.len = 0;
    size_t lines = dft_format_records(&wk->json, rec, &pos, size, &W.fmt, PIECE);
    if (!wk->json.failed && lines)
        write_piece(wk, wk->json.data, wk->json.len, lines);
}

/* Stops the writer threads after the queue is empty and closes the file. */
void dft_writer_close(void)
{
    pthread_mutex_lock(&W.lock);
    W.stopping = 1;
    pthread_cond_broadcast(&W.nonempty);
    pthread_mutex_unlock(&W.lock);
    for (int i = 0; i < W.nworkers; i++) {
        worker *wk = &W.workers[i];
        if (wk->started) {
            pthread_join(wk->thread, NULL);
            wk->started = 0;
        }
    }
    pthread_mutex_lock(&W.lock);
    W.running = 0;
    W.stopping = 0;
    pthread_cond_broadcast(&W.space);
    pthread_cond_broadcast(&W.idle);
    pthread_mutex_unlock(&W.lock);
    pthread_mutex_lock(&W.file_lock);
    W.pending = 0;
    if (W.fd >= 0) {
        if (close(W.fd) != 0)
            dft_log(DFT_LOG_ERROR, "closing %s: %s", W.path ? W.path : "trace", strerror(errno));
        W.fd = -1;
    }
    pthread_mutex_unlock(&W.file_lock);
}

/* ---- fork -------------------------------------------------------------- */

/* Holds the writer locks across fork() so the child inherits them unlocked
 * and consistent.  The queue was drained just before. */
void dft_writer_atfork_prepare(void)
{
    pthread_mutex_lock(&W.lock);
    pthread_mutex_lock(&W.file_lock);
}

void dft_writer_atfork_parent(void)
{
    pthread_mutex_unlock(&W.file_lock);
    pthread_mutex_unlock(&W.lock);
}

/* In the child: no writer thread exists and the parent's file is not ours.
 * Single-threaded. */
void dft_writer_atfork_child(void)
{
    pthread_mutex_init(&W.lock, NULL);
    pthread_mutex_init(&W.file_lock, NULL);
    pthread_cond_init(&W.nonempty, NULL);
    pthread_cond_init(&W.space, NULL);
    pthread_cond_init(&W.idle, NULL);
    for (dft_chunk *c = W.head; c;) {
        dft_chunk *n = c->next;
        free(c->data);
        free(c);
        c = n;
    }
    W.head = W.tail = NULL;
    W.queued = W.busy = 0;
    W.running = 0;
    W.stopping = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        W.workers[i].started = 0;
    if (W.fd >= 0) {
        close(W.fd);
        W.fd = -1;
    }
    W.pending = 0;
    atomic_store(&W.emergency_busy, 0);
}

/* ---- signals ----------------------------------------------------------- */

int dft_writer_emergency_prepare(void)
{
    if (W.emergency_ready)
        return 0;
    worker *wk = &W.emergency;
    if (worker_zinit(wk) != 0)
        return -1;
    if (dft_sbuf_reserve(&wk->json, EMERGENCY_PIECE + 8 * DFT_REC_MAX) != 0 ||
        dft_sbuf_reserve(&wk->out, dft_compress_bound(EMERGENCY_PIECE + 8 * DFT_REC_MAX)) != 0)
        return -1;
    W.emergency_ready = 1;
    return 0;
}

/* From a signal handler: formats and writes records with preallocated buffers;
 * skips the write if another thread holds the file lock. */
int dft_writer_emergency(const char *data, size_t start, size_t end)
{
    if (!W.emergency_ready || W.fd < 0 || atomic_exchange(&W.emergency_busy, 1))
        return -1;
    worker *wk = &W.emergency;
    size_t pos = start;
    int rc = 0;
    while (pos < end && rc == 0) {
        wk->json.len = 0;
        size_t lines = dft_format_records(&wk->json, data, &pos, end, &W.fmt, EMERGENCY_PIECE);
        if (wk->json.failed || !lines)
            break;
        const char *buf = wk->json.data;
        size_t len = wk->json.len;
        if (W.compression) {
            len = dft_compress_member(wk->cz, wk->json.data, wk->json.len, wk->out.data,
                                      wk->out.cap);
            if (len == 0) {
                rc = -1;
                break;
            }
            buf = wk->out.data;
        }
        if (pthread_mutex_trylock(&W.file_lock) != 0) {
            rc = -1;
            break;
        }
        if (write_all(buf, len) == 0)
            atomic_fetch_add(&W.lines, lines);
        pthread_mutex_unlock(&W.file_lock);
    }
    atomic_store(&W.emergency_busy, 0);
    return rc;
}
