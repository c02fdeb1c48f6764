/* core/park.c: the tracer's threads are absent whenever the program forks.
 *
 * CPython 3.12+ warns in os.fork() ("This process (pid=...) is
 * multi-threaded, use of fork() may lead to deadlocks in the child.") when
 * the parent has more than one thread after fork() returns: it reads the
 * count from /proc/self/stat (3.12 right after fork(), 3.13 after the
 * after-fork hooks, later versions before them).  A traced program must not
 * warn where the same program untraced does not, so before fork() every
 * helper thread of the tracer's stops, and the fork waits until the kernel
 * has let go of them (a thread's exit is seen before the kernel drops it
 * from the count).
 *
 * The helpers are a table: the flusher and the writers (core/flusher.c,
 * core/writer.c, this file's first two entries) and those that register
 * (dft_park_register: hang/sampler.c's stack sampler, core/memory_watch.c's
 * MemoryTracker watcher).  Each entry has a stop (before fork(), on the
 * forking thread: the thread exits, its kernel id is returned), a parent and
 * a child (right after fork(): release what the stop held, start nothing)
 * and a resume (later, in the parent: start again if there is work).
 *
 * Nothing resumes in the after-fork handlers themselves.  The parked helpers
 * resume once the interpreter has counted and run the program's own
 * after-fork hooks (dft_threads_resume_after_fork): when os.fork() returns,
 * or from the after_in_parent hook for a fork that does not go through
 * os.fork (module.c installs both).  A fork that neither sees (a C
 * extension's fork()) resumes them at the next event recorded
 * (dft_threads_resume, from the hot path while dft_threads_parked is set)
 * or at a helper's own next call (a MemoryTracker block's start or end).
 * The writers start again at the next chunk handed to them
 * (core/writer.c).  A forked child starts its flusher for its header
 * (core/tracer.c); what the other helpers do in a child is theirs to say
 * (their child callbacks).
 *
 * Events the forking thread records between fork() and the count (its own
 * after-fork hooks, or CPython's read of /proc/self/stat itself when
 * DFTRACER_DATA_DIR covers /proc) must not resume anything: they wait for
 * the resume above, at most FORKER_WAIT_NS (a fork that no hook sees).
 * Events of other threads resume at once: a program with threads of its
 * own gets the warning anyway.
 *
 * Two pthread_atfork registrations run the table: core/tracer.c's, which
 * parks under the lifecycle lock before it takes the registry lock (the
 * buffers are written first), and this file's own, registered before the
 * tracer's (its prepare runs after the tracer's, its parent and child
 * before), which parks when the tracer's did not (no trace ever started:
 * MemoryTracker alone) and runs every entry's parent and child. */
#include "core/park.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/flusher.h"
#include "core/sigmask.h"
#include "core/state.h"
#include "core/writer.h"

/* The forking thread's events wait this long for the resume after the
 * count.  Measured on 2 cores beside two CPU burners and a build (3000
 * os.fork() on 3.13): from the first before-hook to os.fork()'s return,
 * p99 15.7 ms, p99.9 31.9 ms, max 78.8 ms. */
#define FORKER_WAIT_NS 1000000000LL /* 1 s */
/* At most this long for the kernel to drop a stopped thread.  Measured
 * (2000 joins beside two CPU burners): p99 3.8 ms, max 7.8 ms. */
#define RELEASE_WAIT_NS 1000000000LL /* 1 s */
#define MAX_HELPERS 8                /* registered ones, beside the flusher and the writers */
#define MAX_PARKED (1 + 16 + MAX_HELPERS)

/* ---- the table ------------------------------------------------------------ */

/* Appended under table_lock, published by the count's release store; the
 * forking thread reads it without a lock. */
static const dft_helper_thread *helpers[MAX_HELPERS];
static _Atomic int nhelpers;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static void own_prepare(void);
static void own_parent(void);
static void own_child(void);

/* Without these handlers nothing would release what a helper's stop holds:
 * then no helper registers (and none starts: the flusher and the writers
 * only). */
static int installed;

static void install_once(void)
{
    installed = pthread_atfork(own_prepare, own_parent, own_child) == 0;
    if (!installed)
        dft_log(DFT_LOG_ERROR,
                "pthread_atfork failed; the tracer's threads may be counted at fork");
}

void dft_park_install(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_once);
}

int dft_park_register(const dft_helper_thread *h)
{
    dft_park_install();
    if (!installed)
        return -1;
    pthread_mutex_lock(&table_lock);
    int n = atomic_load(&nhelpers), r = -1;
    for (int i = 0; i < n; i++)
        if (helpers[i] == h)
            r = 0;
    if (r != 0 && n < MAX_HELPERS) {
        helpers[n] = h;
        atomic_store_explicit(&nhelpers, n + 1, memory_order_release);
        r = 0;
    }
    pthread_mutex_unlock(&table_lock);
    if (r != 0)
        dft_log(DFT_LOG_ERROR, "no room to stop the %s thread at fork; it does not run", h->name);
    return r;
}

/* ---- before fork() -------------------------------------------------------- */

/* This thread's fork: the helpers are stopped (by the tracer's prepare or
 * by own_prepare), and whether the tracer's prepare did it (then life_lock
 * and registry_lock are held until its parent/child handlers). */
static __thread int parked_here, under_tracer_locks;
/* How many threads this thread's fork stopped. */
static __thread int stopped_here;

/* The forking thread and what its events wait for; written before the fork
 * returns, read by the hot path's slow branch. */
static _Atomic int64_t forker_tid;
static _Atomic long long forked_ns;
static _Atomic int counted; /* the resume after the count came since the fork */

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

/* Stops every entry: the flusher first (it could hand off after the flush
 * below), every buffer and the queue written, the writers (only under the
 * tracer's locks: without them no trace ever started), then the registered
 * helpers.  The forking thread, no GIL released. */
static void park_all(int tracer)
{
    pid_t tids[MAX_PARKED];
    int n = 0;
    if (tracer) {
        pid_t f = dft_flusher_stop();
        if (f > 0)
            tids[n++] = f;
        if (atomic_load(&dft_trace.active))
            dft_flush_all_threads(1);
        n += dft_writer_stop_threads(tids + n, MAX_PARKED - n);
    }
    int nh = atomic_load_explicit(&nhelpers, memory_order_acquire);
    for (int i = 0; i < nh; i++)
        n += helpers[i]->stop(tids + n, MAX_PARKED - n);
    parked_here = 1;
    stopped_here = n;
    wait_released(tids, n);
}

/* pthread_atfork prepare (core/tracer.c's), under life_lock, SIGTERM held,
 * GIL held and never released (dft_no_gil_release). */
void dft_threads_park(void)
{
    under_tracer_locks = 1;
    park_all(1);
}

/* This file's pthread_atfork prepare: runs after the tracer's, if any. */
static void own_prepare(void)
{
    if (!parked_here)
        park_all(0);
}

/* ---- after fork() --------------------------------------------------------- */

static void resume_locked(void);

/* This file's pthread_atfork parent handler, before the tracer's: every
 * entry's parent, and what the helpers wait for.  Starts nothing, unless
 * another thread recorded events during the fork. */
static void own_parent(void)
{
    int nh = atomic_load_explicit(&nhelpers, memory_order_acquire);
    for (int i = 0; i < nh; i++)
        if (helpers[i]->parent)
            helpers[i]->parent();
    int traced = atomic_load(&dft_trace.state) == DFT_STATE_ACTIVE;
    if (stopped_here > 0 || traced || atomic_load(&dft_threads_parked)) {
        atomic_store(&forker_tid, (int64_t)syscall(SYS_gettid));
        atomic_store(&forked_ns, dft_signal_clock_ns());
        atomic_store(&counted, 0);
        atomic_store(&dft_g.resume_threads, dft_threads_resume);
        atomic_store(&dft_threads_parked, 1);
        /* Another thread recorded events during the fork: they must not wait
         * for its next event, and the program is warned about anyway.  The
         * tracer's prepare still holds life_lock and registry_lock. */
        if (traced && under_tracer_locks && dft_other_threads_have_records_locked())
            resume_locked();
    }
    parked_here = under_tracer_locks = stopped_here = 0;
}

/* This file's pthread_atfork child handler, before the tracer's; the child
 * is single-threaded. */
static void own_child(void)
{
    int nh = atomic_load_explicit(&nhelpers, memory_order_acquire);
    for (int i = 0; i < nh; i++)
        if (helpers[i]->child)
            helpers[i]->child();
    pthread_mutex_init(&table_lock, NULL);
    atomic_store(&dft_threads_parked, 0); /* the tracer's fork_child starts its flusher */
    parked_here = under_tracer_locks = stopped_here = 0;
}

/* Starts the helpers again.  Caller holds life_lock. */
static void resume_locked(void)
{
    if (!atomic_load(&dft_threads_parked))
        return;
    atomic_store(&dft_threads_parked, 0);
    if (atomic_load(&dft_trace.state) == DFT_STATE_ACTIVE) {
        sigset_t saved;
        dft_signals_hold(&saved);
        dft_flusher_start();
        dft_signals_release(&saved);
    }
    int nh = atomic_load_explicit(&nhelpers, memory_order_acquire);
    for (int i = 0; i < nh; i++)
        helpers[i]->resume();
}

/* The hot path's slow branch while parked, and a helper's own calls: the
 * first event after a fork starts the helpers again.  When life_lock is
 * taken (a fork, start or finalize in progress, or this thread recording
 * under it), the next event tries again.  Any thread, no GIL. */
void dft_threads_resume(int64_t tid)
{
    if (tid == atomic_load(&forker_tid) && !atomic_load(&counted) &&
        dft_signal_clock_ns() - atomic_load(&forked_ns) < FORKER_WAIT_NS)
        return;
    if (pthread_mutex_trylock(&dft_g.life_lock) != 0)
        return;
    resume_locked();
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* The forking thread, GIL held (never released here: life_lock is only
 * tried, the next event or helper call retries when it is taken). */
void dft_threads_resume_after_fork(void)
{
    if (!atomic_load(&dft_threads_parked))
        return;
    atomic_store(&counted, 1);
    if (pthread_mutex_trylock(&dft_g.life_lock) != 0)
        return;
    resume_locked();
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* Start and finalize manage the flusher themselves; the other helpers
 * resume (no fork's count is pending at a start or a finalize).  Under
 * life_lock. */
void dft_threads_unpark(void)
{
    if (!atomic_exchange(&dft_threads_parked, 0))
        return;
    int nh = atomic_load_explicit(&nhelpers, memory_order_acquire);
    for (int i = 0; i < nh; i++)
        helpers[i]->resume();
}
