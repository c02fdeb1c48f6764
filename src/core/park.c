/* core/park.c: the tracer's threads are absent whenever the program forks.
 *
 * CPython 3.12+ warns in os.fork() ("This process (pid=...) is
 * multi-threaded, use of fork() may lead to deadlocks in the child.") when
 * the parent has more than one thread after fork() returns: it reads the
 * count from /proc/self/stat (3.12 right after fork(), 3.13 after the
 * after-fork hooks, later versions before them).  A traced program must not
 * warn where the same program untraced does not, so before fork() the
 * flusher and the writer threads write everything they hold and exit, and
 * the fork waits until the kernel has let go of them (pthread_join returns
 * before the kernel drops an exiting thread from the count).  Nothing starts
 * them in the after-fork handlers: the writers start again at the next
 * chunk handed to them (core/writer.c), the flusher at the next event
 * recorded (dft_threads_resume, from the hot path while dft_threads_parked
 * is set), or from the program's after-fork hook in the parent where the
 * interpreter has counted by then (dft_threads_resume_after_fork: every
 * CPython but 3.13, which counts after the hooks).  A forked child starts its
 * flusher for its header (core/tracer.c).
 *
 * Events the forking thread records in the first PARK_GRACE_NS after fork()
 * (its own after-fork hooks, or CPython's read of /proc/self/stat itself when
 * DFTRACER_DATA_DIR covers /proc) do not restart the flusher: they are still
 * inside os.fork(), before the count.  Events of other threads restart it at
 * once: a program with threads of its own gets the warning anyway. */
#include "core/park.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/flusher.h"
#include "core/sigmask.h"
#include "core/state.h"
#include "core/writer.h"

#define PARK_GRACE_NS 10000000LL   /* 10 ms */
#define RELEASE_WAIT_NS 50000000LL /* at most 50 ms for the kernel to drop a thread */
#define MAX_PARKED 17              /* the flusher and up to 16 writers */


/* The forking thread and the end of its grace period; written before the
 * fork returns, read by the hot path's slow branch. */
static _Atomic int64_t forker_tid;
static _Atomic long long grace_end_ns;

/* Waits until none of tids is a thread of this process any more (tgkill with
 * signal 0 fails with ESRCH once the kernel has released it), at most
 * RELEASE_WAIT_NS in all. */
static void wait_released(const pid_t *tids, int n)
{
    pid_t self = getpid();
    long long deadline = dft_signal_clock_ns() + RELEASE_WAIT_NS;
    for (int i = 0; i < n; i++) {
        if (tids[i] <= 0)
            continue;
        while (syscall(SYS_tgkill, self, tids[i], 0) == 0 && dft_signal_clock_ns() < deadline)
            sched_yield();
    }
}

/* pthread_atfork prepare, under life_lock, SIGTERM held, GIL held and never
 * released (dft_no_gil_release).  Writes every buffer and the queue, and stops
 * the threads. */
void dft_threads_park(void)
{
    pid_t tids[MAX_PARKED];
    int n = 0;
    pid_t f = dft_flusher_stop(); /* first: it could hand off after the flush below */
    if (f > 0)
        tids[n++] = f;
    if (atomic_load(&dft_trace.active))
        dft_flush_all_threads(1);
    n += dft_writer_stop_threads(tids + n, MAX_PARKED - n);
    if (atomic_load(&dft_trace.state) == DFT_STATE_ACTIVE) {
        atomic_store(&dft_g.resume_threads, dft_threads_resume);
        atomic_store(&dft_threads_parked, 1);
    }
    wait_released(tids, n);
}

/* Starts the flusher again.  Caller holds life_lock. */
static void resume_locked(void)
{
    if (!atomic_load(&dft_threads_parked))
        return;
    if (atomic_load(&dft_trace.state) == DFT_STATE_ACTIVE) {
        sigset_t saved;
        dft_signals_hold(&saved);
        dft_flusher_start();
        dft_signals_release(&saved);
    }
    atomic_store(&dft_threads_parked, 0);
}

/* pthread_atfork parent handler, in the forking thread, life_lock and
 * registry_lock held. */
void dft_threads_after_fork_parent(int64_t tid)
{
    if (!atomic_load(&dft_threads_parked))
        return;
    atomic_store(&forker_tid, tid);
    atomic_store(&grace_end_ns, dft_signal_clock_ns() + PARK_GRACE_NS);
    /* Another thread recorded events during the fork: they must not wait for
     * its next event, and the program is warned about anyway. */
    if (dft_other_threads_have_records_locked())
        resume_locked();
}

/* The hot path's slow branch while parked: the first event after a fork
 * starts the flusher again.  When life_lock is taken (a fork, start or
 * finalize in progress, or this thread recording under it), the next event
 * tries again.  Any thread, no GIL. */
void dft_threads_resume(int64_t tid)
{
    if (tid == atomic_load(&forker_tid) && dft_signal_clock_ns() < atomic_load(&grace_end_ns))
        return;
    if (pthread_mutex_trylock(&dft_g.life_lock) != 0)
        return;
    resume_locked();
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* The forking thread, GIL held (never released here: life_lock is only
 * tried, the next event retries when it is taken). */
void dft_threads_resume_after_fork(void)
{
    if (!atomic_load(&dft_threads_parked) || pthread_mutex_trylock(&dft_g.life_lock) != 0)
        return;
    resume_locked();
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* Start, finalize and a forked child manage the threads themselves. */
void dft_threads_unpark(void) { atomic_store(&dft_threads_parked, 0); }
