/* core/buffer.h: per-thread record buffers and the event hot path
 * (core/buffer.c).  Every function may run on any thread without the GIL. */
#ifndef DFT_CORE_BUFFER_H
#define DFT_CORE_BUFFER_H

#include "core/state.h"

dft_tstate *dft_tstate_get(void);
void dft_tstate_forget_others(dft_tstate *keep); /* in a forked child */
void dft_flush_all_threads(int wait);
/* Writes, without blocking, the records of every thread whose lock is free
 * (a signal handler's fallback).  Async-signal context. */
void dft_flush_threads_from_signal(void);
/* Hands to the writer the buffers of threads whose records were already there
 * at the previous call (the time-based flush; see core/flusher.c). */
void dft_flush_aged_threads(void);
/* Writes the calling thread's committed records at once, bypassing the queue
 * (a new trace's header). */
void dft_flush_own_thread_now(void);
void dft_tstate_reset_current(void);
/* 1 when a thread other than the caller has records not handed off yet.
 * Caller holds dft_g.registry_lock. */
int dft_other_threads_have_records_locked(void);
/* Finalize: waits, at most wait_ns, until no other thread is recording. */
void dft_wait_for_recorders(long long wait_ns);
/* Events refused because finalize had begun, since the last call. */
uint64_t dft_dropped_take(void);
/* Opens/closes a nesting scope on the calling thread (dft_enter_scope,
 * dft_exit_scope; the scope tokens of core/core.h are built on them). */
void dft_scope_push(void);
void dft_scope_pop(void);

#endif
