/* core/signals.h: the signals the tracer handles (core/signals.c).  The mask
 * the slow paths hold is core/sigmask.h. */
#ifndef DFT_CORE_SIGNALS_H
#define DFT_CORE_SIGNALS_H

#include <stdatomic.h>

/* Binds SIGTERM and SIGHUP (with all, DFTRACER_BIND_SIGNALS: SIGINT, SIGABRT
 * and SIGSEGV too), each once per process, chaining to the action it had
 * then.  Under life_lock. */
void dft_signals_install(int all);

/* dft_signals_handler_ends_process: core/core.h. */

/* Set while finalize runs: a signal that comes then waits for it instead of
 * cutting the end of the trace. */
extern _Atomic int dft_finalizing;

#endif
