/* core/writer.c: the writer queue and its threads (writing the trace file:
 * core/writer_file.c; which file that is: core/trace_file.c).
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
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/kept_lines.h"
#include "core/trace_file.h"
#include "core/writer.h"
#include "core/writer_state.h"

/* ---- chunks ------------------------------------------------------------ */

/* A thread's first chunk holds this much before its first hand-off: a thread
 * that writes a few events keeps a small buffer, and one that writes many
 * moves to full chunks after its first few kilobytes. */
#define FIRST_CHUNK ((size_t)16 << 10)

/* The records a chunk of cap bytes takes before it is handed off: the write
 * buffer size, at most cap - DFT_REC_MAX (room for the last record). */
static size_t chunk_limit(size_t cap)
{
    size_t room = cap - DFT_REC_MAX;
    return dft_g.flush_threshold < room ? dft_g.flush_threshold : room;
}

/* Maps the pages of [from, to) writable (MADV_POPULATE_WRITE, Linux 5.14)
 * without touching them, so another thread may be writing records there.
 * 0, or -1 where the kernel cannot.  Any thread, no GIL. */
static int map_pages(char *from, char *to)
{
#ifdef MADV_POPULATE_WRITE
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t ps = page > 0 ? (uintptr_t)page : 4096;
    uintptr_t a = ((uintptr_t)from + ps - 1) & ~(ps - 1), b = (uintptr_t)to & ~(ps - 1);
    if (b <= a)
        return 0;
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0)
        return 0;
#else
    (void)from;
    (void)to;
#endif
    return -1;
}

/* 1 once the kernel has mapped pages for us (map_pages), 0 once it refused:
 * only then may a writer map a traced thread's chunk behind it. */
static _Atomic int kernel_maps = -1;

/* Memory for a chunk's records with its first `mapped` bytes' pages already
 * mapped: a traced thread appending records takes no page fault per event
 * (on a freshly booted VM a first touch costs tens of microseconds: docs/
 * performance.md, "Page faults").  The kernel maps them in one call; else
 * one byte a page is written here.  NULL when out of memory.  Any thread,
 * no GIL. */
static char *chunk_data_alloc(size_t cap, size_t mapped)
{
    char *p = malloc(cap);
    if (!p)
        return NULL;
    if (mapped > cap)
        mapped = cap;
    if (atomic_load(&kernel_maps) != 0) {
        int ok = map_pages(p, p + mapped) == 0;
        atomic_store(&kernel_maps, ok);
        if (ok) {
            ((volatile char *)p)[0] = 0; /* the page before the first whole one */
            if (mapped)
                ((volatile char *)p)[mapped - 1] = 0; /* and the one after the last */
            return p;
        }
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t ps = page > 0 ? (size_t)page : 4096;
    for (size_t i = 0; i < mapped; i += ps) /* the kernel cannot: touch each page */
        ((volatile char *)p)[i] = 0;
    return p;
}

static dft_chunk *chunk_alloc(size_t cap, size_t mapped)
{
    dft_chunk *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    c->cap = cap;
    c->data = chunk_data_alloc(cap, mapped);
    if (!c->data) {
        free(c);
        return NULL;
    }
    return c;
}

/* A full-size chunk a traced thread takes when the pool is empty (its
 * second chunk, or the writers are behind) has only its first MAP_NOW bytes
 * mapped by that thread: the rest, 1 MiB by default (1 to 9 ms on a fresh
 * VM), is mapped by the writer that the hand-off taking it wakes, while the
 * thread goes on writing records into the first pages.  One chunk at a time
 * (another is mapped whole by its thread).  A chunk is published in to_map
 * by an atomic exchange; map_lock is held while a writer maps it, and
 * dft_chunk_free takes it for that chunk, so it is never freed while mapped. */
#define MAP_NOW FIRST_CHUNK
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(dft_chunk *) to_map;

/* A writer thread, before its chunk: maps the waiting chunk's pages, then,
 * since a traced thread found the pool empty, puts a mapped chunk there for
 * the next one that does (a thread's third chunk: its second is still being
 * written out).  No GIL. */
static void map_waiting_chunk(void)
{
    if (!atomic_load_explicit(&to_map, memory_order_relaxed))
        return;
    pthread_mutex_lock(&map_lock);
    dft_chunk *c = atomic_load(&to_map);
    if (c) {
        map_pages(c->data + MAP_NOW, c->data + c->limit);
        atomic_store(&to_map, NULL);
    }
    pthread_mutex_unlock(&map_lock);
    pthread_mutex_lock(&dft_writer.lock);
    int empty = !dft_writer.pool;
    pthread_mutex_unlock(&dft_writer.lock);
    if (c && empty && (c = chunk_alloc(dft_g.chunk_cap, chunk_limit(dft_g.chunk_cap))))
        dft_chunk_free(c); /* into the pool */
}

static dft_chunk *chunk_ready(dft_chunk *c)
{
    c->next = NULL;
    c->start = c->end = 0;
    c->gen = 0;
    c->limit = chunk_limit(c->cap);
    return c;
}

/* Any thread, no GIL. */
dft_chunk *dft_chunk_new(void)
{
    dft_chunk *c = NULL;
    pthread_mutex_lock(&dft_writer.lock);
    if (dft_writer.pool && dft_writer.pool->cap == dft_g.chunk_cap) {
        c = dft_writer.pool;
        dft_writer.pool = c->next;
        dft_writer.pool_len--;
    }
    pthread_mutex_unlock(&dft_writer.lock);
    if (c)
        return chunk_ready(c);
    size_t limit = chunk_limit(dft_g.chunk_cap);
    int later = atomic_load(&kernel_maps) == 1 && limit > MAP_NOW &&
                !atomic_load_explicit(&to_map, memory_order_relaxed);
    if (!(c = chunk_alloc(dft_g.chunk_cap, later ? MAP_NOW : limit)))
        return NULL;
    chunk_ready(c);
    dft_chunk *none = NULL; /* published by the exchange: no lock, no wait here */
    if (later && !atomic_compare_exchange_strong(&to_map, &none, c))
        map_pages(c->data + MAP_NOW, c->data + limit); /* another waits: map it here */
    return c;
}

/* A thread's first chunk (not pooled: its size is not chunk_cap, unless the
 * write buffer is as small).  Any thread, no GIL. */
dft_chunk *dft_chunk_new_first(void)
{
    size_t cap = FIRST_CHUNK + DFT_REC_MAX;
    if (cap >= dft_g.chunk_cap)
        return dft_chunk_new();
    dft_chunk *c = chunk_alloc(cap, chunk_limit(cap));
    return c ? chunk_ready(c) : NULL;
}

/* Any thread, no GIL. */
void dft_chunk_free(dft_chunk *c)
{
    if (!c)
        return;
    if (atomic_load(&to_map) == c) { /* not freed while a writer maps it */
        pthread_mutex_lock(&map_lock);
        dft_chunk *mine = c;
        atomic_compare_exchange_strong(&to_map, &mine, NULL);
        pthread_mutex_unlock(&map_lock);
    }
    pthread_mutex_lock(&dft_writer.lock);
    if (dft_writer.pool_len < dft_writer.max_inflight + 2 && c->cap == dft_g.chunk_cap) {
        c->next = dft_writer.pool;
        dft_writer.pool = c;
        dft_writer.pool_len++;
        c = NULL;
    }
    pthread_mutex_unlock(&dft_writer.lock);
    if (c) {
        free(c->data);
        free(c);
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
    pthread_mutex_lock(&dft_writer.lock);
    for (;;) {
        while (!dft_writer.head && !dft_writer.stopping)
            pthread_cond_wait(&dft_writer.nonempty, &dft_writer.lock);
        if (!dft_writer.head && dft_writer.stopping)
            break;
        dft_chunk *c = dft_writer.head;
        dft_writer.head = c->next;
        if (!dft_writer.head)
            dft_writer.tail = NULL;
        dft_writer.queued--;
        dft_writer.busy++;
        /* The line encoder is smaller but slower than igzip's fastest level:
         * it runs while the writers keep up, and the fastest encoder takes
         * over once more than half the queue is taken (or a traced thread
         * waits), so that a flood never waits longer for it (docs/
         * performance.md, "What it costs, and when the writer falls behind"). */
        wk->hurry = dft_writer.waiting > 0 ||
                    dft_writer.queued + dft_writer.busy > dft_writer.max_inflight / 2;
        pthread_mutex_unlock(&dft_writer.lock);
        map_waiting_chunk();
        dft_writer_process_chunk(wk, c);
        dft_chunk_free(c);
        pthread_mutex_lock(&dft_writer.lock);
        dft_writer.busy--;
        pthread_cond_broadcast(&dft_writer.space);
        if (!dft_writer.head && dft_writer.busy == 0)
            pthread_cond_broadcast(&dft_writer.idle);
    }
    pthread_mutex_unlock(&dft_writer.lock);
    return NULL;
}

/* Starts the writer threads if they are not running.  Caller holds dft_writer.lock. */
static int ensure_workers_locked(void)
{
    if (dft_writer.running)
        return 0;
    dft_writer.stopping = 0;
    for (int i = 0; i < dft_writer.nworkers; i++) {
        worker *wk = &dft_writer.workers[i];
        if (pthread_create(&wk->thread, NULL, worker_main, wk) != 0) {
            dft_log(DFT_LOG_ERROR, "cannot start writer thread: %s", strerror(errno));
            break;
        }
        wk->started = 1;
        dft_writer.running++;
    }
    return dft_writer.running ? 0 : -1;
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
    pthread_mutex_lock(&dft_writer.lock);
    dft_writer_open_pending_locked();
    /* A file that could not be opened yet still gets the chunk: the writer
     * keeps the lines the file needs for when it opens. */
    if ((!atomic_load(&dft_writer.has_file) && !dft_writer.pending) || ensure_workers_locked() != 0) {
        atomic_fetch_sub(&dft_writer.in_flight, 1);
        pthread_cond_broadcast(&dft_writer.idle);
        pthread_mutex_unlock(&dft_writer.lock);
        dft_chunk_free(c);
        return;
    }
    void *h = NULL;
    int waited = 0;
    if (dft_writer.queued + dft_writer.busy >= dft_writer.max_inflight) {
        /* Counted in dft_writer.waiting so that a drain (flush, a signal's flush) waits
         * for this chunk too; queued below without taking the GIL back first,
         * so a drain never waits on a thread that waits for the GIL. */
        dft_writer.waiting++;
        waited = 1;
        pthread_mutex_unlock(&dft_writer.lock);
        h = gil_release();
        pthread_mutex_lock(&dft_writer.lock);
        while (dft_writer.queued + dft_writer.busy >= dft_writer.max_inflight && dft_writer.running)
            pthread_cond_wait(&dft_writer.space, &dft_writer.lock);
        dft_writer.waiting--;
    }
    c->next = NULL;
    if (dft_writer.tail)
        dft_writer.tail->next = c;
    else
        dft_writer.head = c;
    dft_writer.tail = c;
    dft_writer.queued++;
    atomic_fetch_sub(&dft_writer.in_flight, 1);
    pthread_cond_signal(&dft_writer.nonempty);
    pthread_mutex_unlock(&dft_writer.lock);
    if (waited)
        gil_restore(h);
}

/* Called by a thread handing off a chunk, before it releases the lock under
 * which the chunk left its buffer: from then on a drain waits for the chunk
 * until dft_writer_submit has queued it, so a finalize that runs in between
 * never closes the file under it.  Any thread, no GIL. */
void dft_writer_handoff_begin(void) { atomic_fetch_add(&dft_writer.in_flight, 1); }

/* Waits until every submitted chunk is written.  Any thread. */
void dft_writer_drain(void)
{
    void *h = gil_release();
    pthread_mutex_lock(&dft_writer.lock);
    if (dft_writer.head && !dft_writer.running && atomic_load(&dft_writer.has_file))
        ensure_workers_locked(); /* chunks queued while the writers were stopped for a fork */
    while (((dft_writer.head || dft_writer.busy || dft_writer.waiting) && dft_writer.running) ||
           atomic_load(&dft_writer.in_flight))
        pthread_cond_wait(&dft_writer.idle, &dft_writer.lock);
    pthread_mutex_unlock(&dft_writer.lock);
    gil_restore(h);
}

/* The lines a member written now would follow: those written, and the kept
 * lines it would carry.  Called by finalize with the queue drained. */
uint64_t dft_writer_lines(void)
{
    pthread_mutex_lock(&dft_writer.file_lock);
    uint64_t n = atomic_load(&dft_writer.lines) + dft_kept_count();
    pthread_mutex_unlock(&dft_writer.file_lock);
    return n;
}

/* Stops the writer threads once the queue is empty (chunks queued after that
 * wait for the next start) and writes the kernel ids of the threads stopped
 * to tids (at most cap).  Returns how many.  Under dft_g.life_lock; no GIL
 * needed: writer threads never wait for it. */
int dft_writer_stop_workers(pid_t *tids, int cap)
{
    pthread_mutex_lock(&dft_writer.lock);
    dft_writer.stopping = 1;
    pthread_cond_broadcast(&dft_writer.nonempty);
    pthread_mutex_unlock(&dft_writer.lock);
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++) {
        worker *wk = &dft_writer.workers[i];
        if (wk->started) {
            pthread_join(wk->thread, NULL);
            wk->started = 0;
            if (n < cap)
                tids[n++] = atomic_load(&wk->tid);
        }
    }
    pthread_mutex_lock(&dft_writer.lock);
    dft_writer.running = 0;
    dft_writer.stopping = 0;
    pthread_cond_broadcast(&dft_writer.space);
    pthread_cond_broadcast(&dft_writer.idle);
    pthread_mutex_unlock(&dft_writer.lock);
    return n;
}

/* Before fork(): the queue is written and the threads are gone; the next
 * submit (or drain) starts them again (ensure_workers_locked). */
int dft_writer_stop_threads(pid_t *tids, int cap) { return dft_writer_stop_workers(tids, cap); }

/* Stops the writer threads after the queue is empty and closes the file. */
void dft_writer_close(void)
{
    pid_t unused[MAX_WORKERS];
    dft_writer_stop_workers(unused, MAX_WORKERS);
    pthread_mutex_lock(&dft_writer.file_lock);
    dft_writer.pending = 0;
    atomic_store(&dft_writer.has_file, 0);
    if (dft_owned_fd_close(&dft_writer.file) != 0) /* only while it is still ours */
        dft_log(DFT_LOG_ERROR, "closing %s: %s", dft_writer.path ? dft_writer.path : "trace",
                strerror(errno));
    pthread_mutex_unlock(&dft_writer.file_lock);
}

/* ---- fork -------------------------------------------------------------- */

/* Holds the writer locks across fork() so the child inherits them unlocked
 * and consistent.  The queue was drained just before. */
void dft_writer_atfork_prepare(void)
{
    pthread_mutex_lock(&map_lock);
    pthread_mutex_lock(&dft_writer.lock);
    pthread_mutex_lock(&dft_writer.file_lock);
}

void dft_writer_atfork_parent(void)
{
    pthread_mutex_unlock(&dft_writer.file_lock);
    pthread_mutex_unlock(&dft_writer.lock);
    pthread_mutex_unlock(&map_lock);
}

/* In the child: no writer thread exists and the parent's file is not ours.
 * Single-threaded. */
void dft_writer_atfork_child(void)
{
    atomic_store(&dft_writer.in_flight, 0); /* hand-offs of threads that do not exist here */
    pthread_mutex_init(&map_lock, NULL);
    atomic_store(&to_map, NULL); /* its pages fault in as they are written */
    pthread_mutex_init(&dft_writer.lock, NULL);
    pthread_mutex_init(&dft_writer.file_lock, NULL);
    pthread_cond_init(&dft_writer.nonempty, NULL);
    pthread_cond_init(&dft_writer.space, NULL);
    pthread_cond_init(&dft_writer.idle, NULL);
    for (dft_chunk *c = dft_writer.head; c;) {
        dft_chunk *n = c->next;
        free(c->data);
        free(c);
        c = n;
    }
    dft_writer.head = dft_writer.tail = NULL;
    dft_writer.queued = dft_writer.busy = dft_writer.waiting = 0;
    dft_writer.running = 0;
    dft_writer.stopping = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        dft_writer.workers[i].started = 0;
    dft_owned_fd_close(&dft_writer.file); /* the parent's file, if still the one it opened */
    atomic_store(&dft_writer.has_file, 0);
    dft_writer.pending = 0;
    dft_kept_reset(0); /* the parent's file's */
    dft_trace_file_forget_owned(); /* the parent's files: never appended to here */
    atomic_store(&dft_writer.emergency_busy, 0);
}

