/* core/park.h: stopping the tracer's threads before fork() and starting them
 * again when next needed (core/park.c), so that a traced program has no more
 * threads at fork() than the same program untraced. */
#ifndef DFT_CORE_PARK_H
#define DFT_CORE_PARK_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/state.h" /* dft_threads_parked */

/* Before fork(): writes every thread's buffer and the queue, stops the flusher
 * and the writers, and waits until the kernel no longer counts them.  Under
 * life_lock (pthread_atfork prepare); no GIL released. */
void dft_threads_park(void);

/* In the parent after fork(), on the forking thread (tid): starts nothing,
 * unless another thread recorded events during the fork.  Under life_lock
 * and registry_lock. */
void dft_threads_after_fork_parent(int64_t tid);

/* From the hot path while dft_threads_parked is set, on thread tid: starts the
 * flusher again.  Any thread, no GIL. */
void dft_threads_resume(int64_t tid);

/* From the program's after-fork hook in the parent (os.register_at_fork's
 * after_in_parent, dftracer/_lifecycle.py), where the interpreter no longer
 * counts threads: starts the flusher at once, so a parent that forks and then
 * blocks without an event still answers stacks requests and flushes on time.
 * The forking thread, GIL held. */
void dft_threads_resume_after_fork(void);

/* Clears dft_threads_parked: start, finalize and a forked child start or
 * stop the threads themselves.  Under life_lock or single-threaded. */
void dft_threads_unpark(void);

#endif
