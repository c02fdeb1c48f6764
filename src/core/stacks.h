/* core/stacks.h: stacks on request, the core's side (core/stacks.c). */
#ifndef DFT_CORE_STACKS_H
#define DFT_CORE_STACKS_H

#include <stddef.h>

/* The request file of the trace file trace_path into out (cap bytes):
 * "<...>-stacks.req" for "<...>-app.pfw[.gz]".  0, or -1 when trace_path is
 * not a trace file's name or out is too short.  Pure: any thread. */
int dft_stacks_request_path(const char *trace_path, char *out, size_t cap);
/* Watches the request file of trace_path from now on (what is there now is
 * no request).  Under life_lock, the flusher not running; no GIL. */
void dft_stacks_arm(const char *trace_path);
/* Asks for the stacks from a signal handler (SIGTERM).  Async-signal-safe. */
void dft_stacks_request_from_signal(void);
/* Answers the requests made since the last call (the request file looked at
 * once).  The flusher, no GIL. */
void dft_stacks_serve(void);

#endif
