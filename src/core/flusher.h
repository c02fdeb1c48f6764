/* core/flusher.h: the flusher thread (core/flusher.c), which writes idle
 * buffers every half DFTRACER_FLUSH_INTERVAL and serves the flush a signal
 * handler asks for. */
#ifndef DFT_CORE_FLUSHER_H
#define DFT_CORE_FLUSHER_H

#include <sys/types.h>

/* Starts the flusher for the current trace.  Under life_lock (or
 * single-threaded in a forked child); no GIL. */
void dft_flusher_start(void);

/* Stops it, waiting for a flush in progress to end.  Returns the kernel's id
 * of the thread stopped, 0 when none ran.  Under life_lock; no GIL. */
pid_t dft_flusher_stop(void);

/* In a forked child the thread does not exist and its semaphore may be in
 * any state.  Single-threaded. */
void dft_flusher_after_fork_child(void);

/* Wakes the flusher (a stacks request).  Async-signal-safe. */
void dft_flusher_wake(void);

/* 1 while the thread runs and serves requests.  Async-signal-safe. */
int dft_flusher_alive(void);

/* 1 once the thread was asked to stop (a finalize or a fork waits to join
 * it, holding life_lock).  Async-signal-safe. */
int dft_flusher_stopping(void);

/* From a signal handler: has the flusher write every thread's committed
 * records and drain the writer queue -- with final_sig (the signal after
 * whose handler the process ends; 0: none), finalize the trace through the
 * function set below, its `end` carrying that signal -- and
 * waits for it until deadline_ns (CLOCK_MONOTONIC).  1 when it was done in
 * time; 0 when the flusher is not running or did not finish.  Uses only
 * atomics, sem_post, clock_gettime and nanosleep: async-signal-safe. */
int dft_flusher_flush_for_signal(long long deadline_ns, int final_sig);

/* The finalize a final request runs on the flusher (core/tracer.c's), given
 * the request's signal: 1 when it finalized, 0 when it could not by
 * deadline_ns (the flush runs instead).  Any thread, no GIL. */
void dft_flusher_set_finalize(int (*finalize)(long long deadline_ns, int sig));

#endif
