/* core/stacks.c: the Python stacks of every thread, written on request
 * (`dftracer stacks`, docs/hang.md) and at SIGTERM.
 *
 * The request is a real-time signal (DFT_STACKS_SIGNAL: SIGRTMAX - 3), whose
 * handler only counts the request and wakes the flusher (sem_post): nothing
 * runs in the interrupted thread, which may be blocked in C holding the GIL
 * or a lock.  The flusher then calls the dumper the stacks integration
 * registered (src/hang/stacks.c), which walks the interpreter's thread states
 * without the GIL as faulthandler does, and writes `stack` events straight
 * to the file (dft_write_meta_now).  Until a request comes this costs one
 * sigaction at start. */
#include "core/stacks.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "core/flusher.h"
#include "core/state.h"
#include "core/writer.h"

static void (*dumper)(const char *why, unsigned req);
static _Atomic unsigned requests, served;
static _Atomic int at_term; /* the pending request comes from SIGTERM */
static int installed;

void dft_set_stack_dumper(void (*dump)(const char *why, unsigned req)) { dumper = dump; }

int dft_stacks_signal(void) { return SIGRTMAX - 3; }

/* Signal handler: async-signal context, no GIL, no locks. */
static void on_request(int sig, siginfo_t *info, void *uctx)
{
    (void)sig, (void)info, (void)uctx;
    int saved_errno = errno;
    if ((pid_t)dft_g.real_pid == getpid()) {
        atomic_fetch_add(&requests, 1);
        dft_flusher_wake();
    }
    errno = saved_errno;
}

/* Under life_lock. */
void dft_stacks_install(void)
{
    if (installed)
        return;
    installed = 1;
    int sig = dft_stacks_signal();
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) != 0)
        return;
    if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) {
        dft_log(DFT_LOG_WARN, "signal %d (SIGRTMAX-3) has a handler already; "
                              "`dftracer stacks` cannot ask this process", sig);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_request;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0)
        dft_log(DFT_LOG_ERROR, "cannot bind signal %d for `dftracer stacks`: %s", sig,
                strerror(errno));
}

/* Async-signal-safe. */
void dft_stacks_request_from_signal(void)
{
    atomic_store(&at_term, 1);
    atomic_fetch_add(&requests, 1);
}

/* The flusher thread, no GIL. */
void dft_stacks_serve(void)
{
    unsigned r = atomic_load(&requests);
    if (r == atomic_load(&served))
        return;
    int term = atomic_exchange(&at_term, 0);
    if (dumper && atomic_load(&dft_trace.active))
        dumper(term ? "SIGTERM" : "request", r);
    atomic_store(&served, r);
}

/* Any thread beside the writers (the flusher), no GIL. */
void dft_write_meta_now(const dft_event *ev)
{
    dft_writer_write_now_shared(ev, atomic_fetch_add(&dft_g.next_id_block, 1));
}
