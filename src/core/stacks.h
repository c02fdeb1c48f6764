/* core/stacks.h: stacks on request, the core's side (core/stacks.c). */
#ifndef DFT_CORE_STACKS_H
#define DFT_CORE_STACKS_H

/* Installs the request signal's handler (once; left alone when the program
 * handles that signal itself).  Under life_lock. */
void dft_stacks_install(void);
/* Asks for the stacks from a signal handler (SIGTERM).  Async-signal-safe. */
void dft_stacks_request_from_signal(void);
/* Writes the stacks asked for since the last call.  The flusher, no GIL. */
void dft_stacks_serve(void);

#endif
