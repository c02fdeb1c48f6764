/* core/park.h: stopping the tracer's threads before fork() and starting them
 * again when next needed (core/park.c), so that a traced program has no more
 * threads at fork() than the same program untraced.  The table's face for
 * the helpers (dft_park_register) is in core/core.h. */
#ifndef DFT_CORE_PARK_H
#define DFT_CORE_PARK_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/state.h" /* dft_threads_parked */

/* Registers park.c's own pthread_atfork handlers, once; core/tracer.c calls
 * it before it registers its own (the order park.c relies on).  Any thread. */
void dft_park_install(void);

/* Before fork(): writes every thread's buffer and the queue, stops every
 * helper thread in the table, and waits until the kernel no longer counts
 * them.  Under life_lock (core/tracer.c's pthread_atfork prepare); no GIL
 * released. */
void dft_threads_park(void);

/* While dft_threads_parked is set, on thread tid: the hot path's first event
 * after a fork, or a helper's own call, starts the parked helpers again (the
 * forking thread's only once its after-fork hook ran or its wait is over).
 * Any thread, no GIL. */
void dft_threads_resume(int64_t tid);

/* Clears dft_threads_parked: start, finalize and a forked child start or
 * stop the flusher themselves; the other helpers resume.  Under life_lock
 * or single-threaded. */
void dft_threads_unpark(void);

#endif
