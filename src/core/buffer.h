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
/* Hands the calling thread's committed records (a new trace's header) to
 * the lines the writer keeps for the head of its next member
 * (dft_writer_keep). */
void dft_keep_own_thread_now(uint64_t gen);
/* Records ev -- a line the file of generation gen cannot be valid without, a
 * hash definition -- among the writer's kept lines, written before any
 * member that may use it (dft_writer_keep's return).  Any thread, no GIL. */
int dft_emit_essential(const dft_event *ev, uint64_t gen);
void dft_tstate_reset_current(void);
/* 1 when a thread other than the caller has records not handed off yet.
 * Caller holds dft_g.registry_lock. */
int dft_other_threads_have_records_locked(void);
/* Finalize: waits, at most wait_ns, until no other thread is recording. */
void dft_wait_for_recorders(long long wait_ns);
/* Events refused because finalize had begun, since the last call. */
uint64_t dft_dropped_take(void);
/* Event arguments left out (dft_note_args_dropped), since the last call. */
uint64_t dft_args_dropped_take(void);
/* Opens a scope without an owner on the calling thread / closes the
 * innermost one (dft_enter_scope, dft_exit_scope; core/core.h, "Nesting"). */
void dft_scope_push(void);
void dft_scope_pop(void);
/* Records ev at the top level (level 1, no parent) whatever scopes are open:
 * the trace's own start event. */
int dft_emit_top(const dft_event *ev);

#endif
