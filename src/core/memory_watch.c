/* core/memory_watch.c: the peak sampler of MemoryTracker.  Each open block
 * is a dft_mem_watch of the caller's (torch/memory_py.c keeps it in the
 * block's Python object), linked into one list: no fixed number of blocks,
 * nested, recursive or overlapping, in any thread.  While the list is not
 * empty one thread (named dft-memwatch) reads the resident memory every
 * DFT_MEM_WATCH_US and raises the peak of every open block; the end of the
 * last block wakes it and it exits.  The kernel's high-water mark, when it
 * rose during the block, is the exact peak and replaces the sampled one
 * (dftracer/python/torch/memory.py).
 *
 * At fork() the thread is one of core/park.c's helpers: it exits before the
 * fork and starts again in the parent when park.c resumes the helpers (or at
 * the next block's start or end).  A forked child samples only the blocks it
 * opens itself: the blocks open at the fork (the child's copies of the
 * parent's) keep the peak sampled before it, and their end gives the larger
 * of that and the child's resident memory then.  Any thread, no GIL. */
#include "core/memory.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/park.h"

static struct {
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t wake;  /* the thread's wait between samples, and its exit */
    clockid_t clock;      /* wake's clock */
    dft_mem_watch *head;  /* the open blocks of this process */
    long nopen;
    uint64_t epoch; /* this process's: a forked child's is one more than its parent's */
    int running;    /* a watcher thread runs; it clears this as it exits */
    int stop;       /* asks it to exit (a fork) */
    int parked;     /* stopped for a fork: resume starts it again if blocks are open */
    int start_failed; /* said once */
    pid_t tid;      /* the kernel id of the thread that runs, or ran last */
} w = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void init_wake(void)
{
    pthread_condattr_t a;
    w.clock = CLOCK_REALTIME;
    if (pthread_condattr_init(&a) == 0) {
        if (pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 &&
            pthread_cond_init(&w.wake, &a) == 0)
            w.clock = CLOCK_MONOTONIC;
        else
            pthread_cond_init(&w.wake, NULL);
        pthread_condattr_destroy(&a);
    } else {
        pthread_cond_init(&w.wake, NULL);
    }
}

/* ---- the watcher thread --------------------------------------------------- */

/* Raises every open block's peak to rss.  Under w.lock. */
static void raise_peaks(int64_t rss)
{
    for (dft_mem_watch *b = w.head; b; b = b->next)
        if (rss > b->peak)
            b->peak = rss;
}

/* The watcher thread, no GIL, every signal blocked. */
static void *watch_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&w.lock);
    w.tid = (pid_t)syscall(SYS_gettid);
    while (w.nopen > 0 && !w.stop) {
        pthread_mutex_unlock(&w.lock);
        int64_t rss = dft_mem_rss();
        pthread_mutex_lock(&w.lock);
        if (rss >= 0)
            raise_peaks(rss);
        struct timespec t;
        clock_gettime(w.clock, &t);
        t.tv_nsec += DFT_MEM_WATCH_US * 1000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        while (w.nopen > 0 && !w.stop && pthread_cond_timedwait(&w.wake, &w.lock, &t) != ETIMEDOUT)
            ;
    }
    w.running = 0;
    pthread_cond_broadcast(&w.wake); /* a stop waiting for this exit */
    pthread_mutex_unlock(&w.lock);
    return NULL;
}

/* Starts the thread, detached (it ends itself; a fork waits for the kernel
 * to let go of it, core/park.c).  Under w.lock. */
static void start_locked(void)
{
    pthread_attr_t attr;
    pthread_t t;
    int e = pthread_attr_init(&attr);
    if (e == 0) {
        e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (e == 0)
            e = pthread_create(&t, &attr, watch_main, NULL);
        pthread_attr_destroy(&attr);
    }
    if (e == 0) {
        w.running = 1;
        /* named before begin returns (tests find it so); alive: it waits for w.lock */
        pthread_setname_np(t, "dft-memwatch");
    } else if (!w.start_failed) {
        w.start_failed = 1;
        dft_log(DFT_LOG_ERROR, "memory watcher thread: %s; MemoryTracker peaks are those at "
                               "the ends and the kernel's mark", strerror(e));
    }
}

/* ---- fork (core/park.c's table) -------------------------------------------- */

/* Before fork(): the thread exits; w.lock stays held through the fork, so
 * the child gets the list whole.  The forking thread. */
static int watch_stop(pid_t *tids, int cap)
{
    pthread_mutex_lock(&w.lock);
    int n = 0;
    if (w.running) {
        w.stop = 1;
        pthread_cond_broadcast(&w.wake);
        while (w.running)
            pthread_cond_wait(&w.wake, &w.lock);
        w.stop = 0;
        w.parked = 1;
        if (cap > 0 && w.tid > 0)
            tids[n++] = w.tid;
    }
    return n;
}

static void watch_parent(void) { pthread_mutex_unlock(&w.lock); }

/* The child: no thread, and none of the parent's blocks in its list. */
static void watch_child(void)
{
    pthread_mutex_init(&w.lock, NULL);
    init_wake();
    w.head = NULL;
    w.nopen = 0;
    w.epoch++;
    w.running = w.stop = w.parked = 0;
    w.tid = 0;
}

/* Under the lifecycle lock, in the parent once the interpreter counted. */
static void watch_resume(void)
{
    pthread_mutex_lock(&w.lock);
    if (w.parked) {
        w.parked = 0;
        if (w.nopen > 0 && !w.running)
            start_locked();
    }
    pthread_mutex_unlock(&w.lock);
}

static const dft_helper_thread watch_helper = {
    .name = "MemoryTracker watcher",
    .stop = watch_stop,
    .parent = watch_parent,
    .child = watch_child,
    .resume = watch_resume,
};

static int registered; /* set once, under the once */

static void init_once(void)
{
    init_wake();
    registered = dft_park_register(&watch_helper) == 0;
}

/* After a fork, a block's start or end is the next chance to resume the
 * parked helpers (core/park.c decides whether it is time). */
static void resume_if_parked(void)
{
    if (atomic_load(&dft_threads_parked))
        dft_threads_resume((int64_t)syscall(SYS_gettid));
}

/* ---- blocks ----------------------------------------------------------------- */

void dft_mem_watch_begin(dft_mem_watch *b)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
    resume_if_parked();
    int64_t rss = dft_mem_rss();
    pthread_mutex_lock(&w.lock);
    b->peak = rss;
    b->epoch = w.epoch;
    b->open = 1;
    b->prev = NULL;
    b->next = w.head;
    if (w.head)
        w.head->prev = b;
    w.head = b;
    w.nopen++;
    /* Without a place in park.c's table the thread would be counted at
     * fork(): then only the ends and the kernel's mark give the peak. */
    if (registered && !w.running && !w.parked)
        start_locked();
    pthread_mutex_unlock(&w.lock);
}

int64_t dft_mem_watch_end(dft_mem_watch *b)
{
    int64_t rss = dft_mem_rss();
    pthread_mutex_lock(&w.lock);
    int64_t peak = b->peak;
    if (b->open && b->epoch == w.epoch) {
        if (b->prev)
            b->prev->next = b->next;
        else
            w.head = b->next;
        if (b->next)
            b->next->prev = b->prev;
        if (--w.nopen == 0)
            pthread_cond_broadcast(&w.wake); /* the thread exits now, not in 2 ms */
    }
    b->open = 0;
    b->prev = b->next = NULL;
    pthread_mutex_unlock(&w.lock);
    resume_if_parked();
    return rss > peak ? rss : peak;
}
