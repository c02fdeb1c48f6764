/* core/signals.c: the signals the tracer handles.
 *
 * SIGTERM and SIGHUP are always handled while tracing (how pools, schedulers,
 * `kill` and a closed terminal end a process): the handler has the flusher
 * write every thread's committed records and drain the writer queue, waits
 * for it (at most SIGNAL_WAIT_NS), then does what the signal would have done
 * without dftracer: the program's own handler runs, or the default action (the
 * process dies by the signal, so its exit status is kept).  When what comes
 * next ends the process -- the default action of SIGTERM, SIGHUP or SIGINT, or
 * a handler known to end it (torch's DataLoader worker handler, which calls
 * _exit(): dft_signals_handler_ends_process) -- the flusher finalizes the
 * trace instead, and its `end` carries the signal (`"signal":15`), so that
 * readers tell a process asked to stop or killed (a hung job's ranks its
 * launcher ended: docs/hang.md) from one that finished.  A handler the
 * program installed may return and go on, so before one of those only the
 * flush runs.
 * DFTRACER_BIND_SIGNALS=1 adds SIGINT, SIGABRT and SIGSEGV (the last two are
 * only flushed: a crash may have broken the heap).  A signal ignored when
 * tracing starts is left alone (so exec'd children still inherit SIG_IGN). */
#include "core/signals.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/core.h"
#include "core/flusher.h"
#include "core/sigmask.h"
#include "core/stacks.h"
#include "core/state.h"
#include "core/writer.h"

_Atomic int dft_finalizing;

static const int bound_signals[] = {SIGTERM, SIGHUP, SIGINT, SIGABRT, SIGSEGV};
#define NSIG_BOUND (sizeof bound_signals / sizeof *bound_signals)
#define NSIG_ALWAYS 2 /* SIGTERM and SIGHUP; the rest with DFTRACER_BIND_SIGNALS */
#define SIGNAL_WAIT_NS 3000000000LL
static struct sigaction old_actions[NSIG_BOUND];
static int bound[NSIG_BOUND];

/* Handlers known to end the process when they run (their addresses), one per
 * signal slot: set before or after the trace binds the signal. */
static _Atomic(void *) ending_handler[NSIG_BOUND];

static int slot_of(int sig)
{
    for (size_t i = 0; i < NSIG_BOUND; i++)
        if (bound_signals[i] == sig)
            return (int)i;
    return -1;
}

static void *handler_address(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) ? (void *)sa->sa_sigaction : (void *)sa->sa_handler;
}

/* Whether the action chained to after the flush ends the process, so that
 * the trace can be finalized first.  Async-signal-safe. */
static int chained_ends_process(size_t i)
{
    const struct sigaction *old = &old_actions[i];
    void *h = handler_address(old);
    if (h && h == atomic_load(&ending_handler[i]))
        return 1;
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_DFL)
        return bound_signals[i] == SIGTERM || bound_signals[i] == SIGHUP ||
               bound_signals[i] == SIGINT;
    return 0;
}

/* Has the flusher write everything (finalize, when end_sig is the signal
 * that ends the process; 0: flush only) and waits for it; if finalize runs
 * on another thread, waits for it instead.  Async-signal context. */
static void flush_from_signal(int end_sig)
{
    long long deadline = dft_signal_clock_ns() + SIGNAL_WAIT_NS;
    if (atomic_load(&dft_trace.active) && dft_flusher_flush_for_signal(deadline, end_sig)) {
        /* flushed; a finalize another thread runs (a worker's own exit,
         * signals held there) writes the end: the default action waits */
        while (atomic_load(&dft_finalizing) && dft_signal_clock_ns() < deadline)
            dft_signal_nap_1ms();
        return;
    }
    if (atomic_load(&dft_finalizing)) {
        while (atomic_load(&dft_finalizing) && dft_signal_clock_ns() < deadline)
            dft_signal_nap_1ms();
        return;
    }
    if (atomic_load(&dft_trace.active)) {
        if (dft_flusher_alive()) {
            static const char msg[] = "dftracer: the flush for a signal did not finish in 3 s; "
                                      "writing what can be written without waiting\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
        }
        dft_flush_threads_from_signal(); /* no flusher, or it is stuck behind a lock */
    }
}

/* Signal handler: async-signal context, no GIL, no blocking locks. */
static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    int saved_errno = errno;
    int i = slot_of(sig);
    if (i < 0) {
        errno = saved_errno;
        return;
    }
    if ((atomic_load(&dft_trace.active) || atomic_load(&dft_finalizing)) &&
        (pid_t)dft_g.real_pid == getpid()) {
        if ((sig == SIGTERM || sig == SIGHUP) && atomic_load(&dft_trace.active))
            dft_stacks_request_from_signal(); /* where each thread was, before the flush */
        flush_from_signal(chained_ends_process((size_t)i) ? sig : 0);
    }
    struct sigaction *old = &old_actions[i];
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, info, uctx);
    } else if (old->sa_handler == SIG_IGN) {
        /* ignored before us: stay ignored */
    } else if (old->sa_handler == SIG_DFL) {
        /* Behave as without us: the default action, once this handler returns. */
        sigaction(sig, old, NULL);
        if (sig != SIGSEGV) /* a fault re-raises itself on return */
            raise(sig);
    } else {
        old->sa_handler(sig);
    }
    errno = saved_errno;
}

/* Binds slot i over the action it has now, chaining to it.  Caller holds
 * life_lock (or the GIL, with the signal held on this thread). */
static void bind_slot(size_t i)
{
    struct sigaction cur;
    if (sigaction(bound_signals[i], NULL, &cur) != 0) {
        dft_log(DFT_LOG_ERROR, "cannot read the action of signal %d: %s", bound_signals[i],
                strerror(errno));
        return;
    }
    bound[i] = 1;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)
        return; /* ignored by the program: leave it so */
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal)
        return; /* ours already */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* The old action is in place before ours can run. */
    old_actions[i] = cur;
    if (sigaction(bound_signals[i], &sa, NULL) != 0)
        dft_log(DFT_LOG_ERROR, "cannot bind signal %d: %s", bound_signals[i], strerror(errno));
}

/* Under life_lock. */
void dft_signals_install(int all)
{
    static int prepared;
    if (!prepared) {
        if (dft_writer_emergency_prepare() != 0)
            dft_log(DFT_LOG_ERROR, "out of memory; signals flush only through the flusher");
        prepared = 1;
    }
    for (size_t i = 0; i < NSIG_BOUND; i++)
        if (!bound[i] && (all || i < NSIG_ALWAYS))
            bind_slot(i);
}

/* The GIL held (Python calls it), never inside a signal handler. */
int dft_signals_handler_ends_process(int sig)
{
    int i = slot_of(sig);
    if (i < 0)
        return -1;
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) != 0)
        return -1;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal)
        return 0; /* still ours: what it chains to was bound before */
    void *h = handler_address(&cur);
    if (h == (void *)SIG_DFL || h == (void *)SIG_IGN)
        return 0;
    atomic_store(&ending_handler[i], h);
    if (bound[i]) {
        /* The program replaced dftracer's handler after tracing started: bind
         * again over the new one, with the signal held here so that ours
         * cannot run on this thread half set up. */
        sigset_t one, saved;
        sigemptyset(&one);
        sigaddset(&one, sig);
        if (pthread_sigmask(SIG_BLOCK, &one, &saved) != 0)
            return -1;
        bind_slot((size_t)i);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
    }
    return 0;
}
