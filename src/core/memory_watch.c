/* core/memory_watch.c: the peak sampler of MemoryTracker.  While at least one
 * slot is in use, one thread reads the resident memory every
 * DFT_MEM_WATCH_US and raises the peak of every slot in use; it exits when
 * the last slot is given back.  The kernel's high-water mark, when it rose
 * during the block, is the exact peak and replaces the sampled one
 * (dftracer/python/torch/memory.py).  Any thread, no GIL. */
#include "core/memory.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/config.h"

#define SLOTS 32

static struct {
    pthread_mutex_t lock; /* slot use and the thread's start and exit */
    int used[SLOTS];
    int nused;
    int running;          /* a sampler thread runs (or is about to exit) */
    _Atomic int64_t peak[SLOTS];
} w = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void raise_peaks(int64_t rss)
{
    for (int i = 0; i < SLOTS; i++) {
        int64_t p = atomic_load(&w.peak[i]);
        while (rss > p && !atomic_compare_exchange_weak(&w.peak[i], &p, rss))
            ;
    }
}

/* The sampler thread, no GIL. */
static void *sampler(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        int64_t rss = dft_mem_rss();
        pthread_mutex_lock(&w.lock);
        if (w.nused == 0) {
            w.running = 0;
            pthread_mutex_unlock(&w.lock);
            return NULL;
        }
        if (rss >= 0)
            raise_peaks(rss);
        pthread_mutex_unlock(&w.lock);
        struct timespec t = {0, DFT_MEM_WATCH_US * 1000L};
        nanosleep(&t, NULL);
    }
}

/* A forked child has no sampler thread and its parent's slots. */
static void after_fork_child(void)
{
    pthread_mutex_init(&w.lock, NULL);
    memset(w.used, 0, sizeof w.used);
    w.nused = 0;
    w.running = 0;
}

static void register_atfork(void)
{
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0)
        dft_log(DFT_LOG_ERROR, "pthread_atfork failed; MemoryTracker in forked children may stall");
}

int dft_mem_watch_begin(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_atfork);
    int64_t rss = dft_mem_rss();
    pthread_mutex_lock(&w.lock);
    int slot = -1;
    for (int i = 0; i < SLOTS && slot < 0; i++)
        if (!w.used[i])
            slot = i;
    if (slot >= 0) {
        w.used[slot] = 1;
        w.nused++;
        atomic_store(&w.peak[slot], rss);
        if (!w.running) {
            pthread_t t;
            pthread_attr_t attr;
            int e = pthread_attr_init(&attr);
            if (e == 0) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                e = pthread_create(&t, &attr, sampler, NULL);
                pthread_attr_destroy(&attr);
            }
            if (e == 0)
                w.running = 1;
            else
                dft_log(DFT_LOG_ERROR, "memory sampler thread: %s; peaks are those at the ends",
                        strerror(e));
        }
    }
    pthread_mutex_unlock(&w.lock);
    return slot;
}

int64_t dft_mem_watch_end(int slot)
{
    int64_t rss = dft_mem_rss();
    if (slot < 0 || slot >= SLOTS)
        return rss;
    pthread_mutex_lock(&w.lock);
    int64_t peak = -1;
    if (w.used[slot]) {
        peak = atomic_load(&w.peak[slot]);
        w.used[slot] = 0;
        w.nused--;
    }
    pthread_mutex_unlock(&w.lock);
    return rss > peak ? rss : peak;
}
