/* core/sigmask.h: the signal mask the tracer's slow paths hold, and the
 * async-signal-safe clock and nap a handler waiting for a flush uses.  Header
 * only; apart from core/signals.h (the handlers) so that the slow paths
 * (core/buffer.c, park.c, flusher.c) do not depend on the handlers that
 * call them. */
#ifndef DFT_CORE_SIGMASK_H
#define DFT_CORE_SIGMASK_H

#include <pthread.h>
#include <signal.h>
#include <time.h>

/* The tracer's slow paths (a hand-off, a flush, a thread's first event,
 * start, finalize, fork) hold locks that the flush of a SIGTERM needs.
 * SIGTERM, SIGHUP and SIGINT wait on this thread until such a path is done: another
 * thread takes them, or they are delivered right after.  Two system calls
 * per hand-off of a whole buffer; never on the hot path. */
static inline void dft_signals_hold(sigset_t *saved)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, saved);
}

static inline void dft_signals_release(const sigset_t *saved)
{
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* CLOCK_MONOTONIC in ns, and a 1 ms sleep: what a signal handler waiting for
 * a flush may call (async-signal-safe). */
static inline long long dft_signal_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void dft_signal_nap_1ms(void)
{
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

#endif
