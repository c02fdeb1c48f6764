/* core/stacks.h: stacks on request, the core's side (core/stacks.c). */
#ifndef DFT_CORE_STACKS_H
#define DFT_CORE_STACKS_H

/* Watches the request file of trace_path from now on (what is there now is
 * no request).  Under life_lock, the flusher not running; no GIL. */
void dft_stacks_arm(const char *trace_path);
/* Asks for the stacks from a signal handler (SIGTERM).  Async-signal-safe. */
void dft_stacks_request_from_signal(void);
/* Answers the requests made since the last call (the request file looked at
 * once).  The flusher, no GIL. */
void dft_stacks_serve(void);

#endif
