/* core/flusher.c: the flusher thread.
 *
 * One thread per tracing process, started with the trace and stopped by
 * finalize.  Every half DFTRACER_FLUSH_INTERVAL it hands the writer the buffer
 * of each thread whose records have waited a whole period
 * (dft_flush_aged_threads), so an idle process keeps at most one interval of
 * events in memory.  A signal handler wakes it with sem_post (async-signal-
 * safe) to write every thread's committed records and drain the writer queue
 * while the handler waits: the handler itself takes no lock and allocates
 * nothing, and the flush runs on a thread that holds no lock of the
 * interrupted one; when the signal ends the process, the flusher finalizes
 * the trace instead (through the function tracer.c sets: the `end` event,
 * carrying the signal, is written before the process goes).  Each wake also looks once at the stacks request file
 * (core/stacks.c); with the time-based flush off it still wakes every
 * STACKS_POLL_S for that alone.  All signals are blocked here; no GIL, never
 * Python. */
#include "core/flusher.h"

#include <errno.h>
#include <semaphore.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/identity.h"
#include "core/memory.h"
#include "core/open_spans.h"
#include "core/sigmask.h"
#include "core/stacks.h"
#include "core/state.h"
#include "core/writer.h"

#define STACKS_POLL_S 1 /* the wake for stacks requests when the flush is off */

static struct {
    pthread_t thread;
    int started;          /* a thread to join; under life_lock */
    _Atomic pid_t tid;    /* the kernel's id of the thread, once it runs */
    sem_t wake;
    int sem_ready;
    _Atomic int stop;
    _Atomic int alive;    /* the thread runs and serves requests */
    _Atomic unsigned req; /* flush requests from signal handlers */
    _Atomic unsigned done;
    _Atomic int final;    /* a request's process ends after it by this signal: finalize */
    _Atomic long long final_deadline_ns;
    _Atomic(int (*)(long long deadline_ns, int sig)) finalize; /* tracer.c's, for a signal */
    double period;        /* seconds between ticks; 0: requests only */
} flusher;

static void *flusher_main(void *arg)
{
    (void)arg;
    atomic_store(&flusher.tid, (pid_t)syscall(SYS_gettid));
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    dft_no_gil_release = 1; /* never a Python thread */
    while (!atomic_load(&flusher.stop)) {
        dft_stacks_serve(); /* before a SIGTERM's flush, which waits for them */
        unsigned req = atomic_load(&flusher.req);
        if (req != atomic_load(&flusher.done)) {
            if (flusher.period > 0 && atomic_load(&dft_trace.active))
                dft_open_spans_tick((int64_t)(flusher.period * 2e6), 0, 1); /* at the kill */
            int final_sig = atomic_load(&flusher.final);
            int (*finalize)(long long, int) = final_sig ? atomic_load(&flusher.finalize) : NULL;
            /* finalize stops this thread (the loop ends after the store below) */
            if (!finalize || !finalize(atomic_load(&flusher.final_deadline_ns), final_sig)) {
                dft_flush_all_threads(1); /* every thread's records, and the queue drained */
                /* A process killed before its first member still leaves its
                 * header: it lived (an exec'd child never gets here). */
                dft_writer_write_kept();
            }
            atomic_store(&flusher.done, req);
            continue;
        }
        if (flusher.period > 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            long long ns = t.tv_nsec + (long long)(flusher.period * 1e9);
            t.tv_sec += (time_t)(ns / 1000000000);
            t.tv_nsec = (long)(ns % 1000000000);
            if (sem_clockwait(&flusher.wake, CLOCK_MONOTONIC, &t) != 0 && errno == ETIMEDOUT &&
                !atomic_load(&flusher.stop) && atomic_load(&dft_trace.active)) {
                dft_flush_aged_threads();
                /* again every ten intervals while nothing changes, as the clock pairs */
                dft_open_spans_tick((int64_t)(flusher.period * 2e6),
                                    (int64_t)(flusher.period * 2e6) * DFT_CLOCK_PAIR_EVERY, 0);
                dft_identity_clock_tick();
                dft_writer_tick(); /* kept lines (a header) no member carried */
                dft_mem_tick();    /* the resident memory: docs/memory.md */
            }
        } else {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            t.tv_sec += STACKS_POLL_S;
            sem_clockwait(&flusher.wake, CLOCK_MONOTONIC, &t);
        }
    }
    atomic_store(&flusher.alive, 0);
    return NULL;
}

/* Under life_lock (or single-threaded in a forked child); no GIL. */
void dft_flusher_start(void)
{
    if (flusher.started)
        return;
    if (!flusher.sem_ready) {
        if (sem_init(&flusher.wake, 0, 0) != 0) {
            dft_log(DFT_LOG_ERROR, "sem_init: %s; no time-based flush", strerror(errno));
            return;
        }
        flusher.sem_ready = 1;
    }
    dft_stacks_arm(dft_writer_path()); /* before the thread: it reads what this sets */
    double iv = dft_g.cfg.flush_interval;
    flusher.period = iv > 0 ? iv / 2 : 0;
    atomic_store(&flusher.stop, 0);
    atomic_store(&flusher.done, atomic_load(&flusher.req));
    atomic_store(&flusher.alive, 1);
    int e = pthread_create(&flusher.thread, NULL, flusher_main, NULL);
    if (e != 0) {
        atomic_store(&flusher.alive, 0);
        dft_log(DFT_LOG_ERROR, "cannot start the flusher thread: %s; no time-based flush",
                strerror(e));
        return;
    }
    flusher.started = 1;
}

/* Under life_lock; no GIL.  On the flusher itself (its finalize for a
 * signal) it only tells the loop to end: the thread detaches. */
pid_t dft_flusher_stop(void)
{
    if (!flusher.started)
        return 0;
    atomic_store(&flusher.stop, 1);
    if (pthread_equal(pthread_self(), flusher.thread)) {
        pthread_detach(flusher.thread);
        flusher.started = 0;
        return atomic_load(&flusher.tid);
    }
    sem_post(&flusher.wake);
    pthread_join(flusher.thread, NULL);
    flusher.started = 0;
    atomic_store(&flusher.alive, 0);
    return atomic_load(&flusher.tid);
}

/* Single-threaded. */
void dft_flusher_after_fork_child(void)
{
    flusher.started = 0;
    atomic_store(&flusher.alive, 0);
    if (flusher.sem_ready)
        sem_init(&flusher.wake, 0, 0);
}

/* Async-signal-safe. */
void dft_flusher_wake(void)
{
    if (flusher.sem_ready)
        sem_post(&flusher.wake);
}

/* Async-signal-safe. */
int dft_flusher_alive(void) { return atomic_load(&flusher.alive); }

/* Async-signal-safe. */
int dft_flusher_stopping(void) { return atomic_load(&flusher.stop); }

/* Any thread, no GIL. */
void dft_flusher_set_finalize(int (*finalize)(long long deadline_ns, int sig))
{
    atomic_store(&flusher.finalize, finalize);
}

/* Async-signal context. */
int dft_flusher_flush_for_signal(long long deadline_ns, int final_sig)
{
    if (!atomic_load(&flusher.alive))
        return 0;
    if (final_sig > 0) {
        atomic_store(&flusher.final_deadline_ns, deadline_ns);
        /* never cleared: the process is ending (by the first such signal) */
        int none = 0;
        atomic_compare_exchange_strong(&flusher.final, &none, final_sig);
    }
    unsigned mine = atomic_fetch_add(&flusher.req, 1) + 1;
    sem_post(&flusher.wake);
    while ((int)(atomic_load(&flusher.done) - mine) < 0 && atomic_load(&flusher.alive) &&
           dft_signal_clock_ns() < deadline_ns)
        dft_signal_nap_1ms();
    return (int)(atomic_load(&flusher.done) - mine) >= 0;
}
