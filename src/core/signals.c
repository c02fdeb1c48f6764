/* core/signals.c: the signals the tracer handles.
 *
 * SIGTERM is always handled while tracing (how pools, schedulers and
 * `kill` end a process): the handler has the flusher write every thread's
 * committed records and drain the writer queue, waits for it (at most
 * SIGNAL_WAIT_NS), then does what the signal would have done without dftracer:
 * the program's own handler runs, or the default action (the process dies by
 * the signal, so its exit status is kept).  DFTRACER_BIND_SIGNALS=1 adds
 * SIGINT, SIGABRT and SIGSEGV.  A signal ignored when tracing starts is left
 * alone (so exec'd children still inherit SIG_IGN). */
#include "core/signals.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/flusher.h"
#include "core/sigmask.h"
#include "core/stacks.h"
#include "core/state.h"
#include "core/writer.h"

_Atomic int dft_finalizing;

static const int bound_signals[] = {SIGTERM, SIGINT, SIGABRT, SIGSEGV};
#define NSIG_BOUND (sizeof bound_signals / sizeof *bound_signals)
#define SIGNAL_WAIT_NS 3000000000LL
static struct sigaction old_actions[NSIG_BOUND];
static int bound[NSIG_BOUND];

/* Has the flusher write everything and waits for it; if finalize runs on
 * another thread, waits for it instead.  Async-signal context. */
static void flush_from_signal(void)
{
    long long deadline = dft_signal_clock_ns() + SIGNAL_WAIT_NS;
    if (atomic_load(&dft_trace.active) && dft_flusher_flush_for_signal(deadline))
        return;
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
    if ((atomic_load(&dft_trace.active) || atomic_load(&dft_finalizing)) &&
        (pid_t)dft_g.real_pid == getpid()) {
        if (sig == SIGTERM && atomic_load(&dft_trace.active))
            dft_stacks_request_from_signal(); /* where each thread was, before the flush */
        flush_from_signal();
    }
    for (size_t i = 0; i < NSIG_BOUND; i++) {
        if (bound_signals[i] != sig)
            continue;
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
    }
    errno = saved_errno;
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
    for (size_t i = 0; i < NSIG_BOUND; i++) {
        if (bound[i] || (!all && bound_signals[i] != SIGTERM))
            continue;
        struct sigaction cur;
        if (sigaction(bound_signals[i], NULL, &cur) != 0)
            continue;
        bound[i] = 1;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)
            continue; /* ignored by the program: leave it so */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(bound_signals[i], &sa, &old_actions[i]) != 0)
            dft_log(DFT_LOG_ERROR, "cannot bind signal %d: %s", bound_signals[i], strerror(errno));
    }
}
