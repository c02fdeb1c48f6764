/* core/intern.h: what a trace file defines once (core/intern.c): the hashes
 * of interned strings, whose FH/SH metadata event is written the first time
 * each appears in the current file (dft_intern), and the lanes named so far
 * (dft_name_lane_once, core/core.h). */
#ifndef DFT_CORE_INTERN_H
#define DFT_CORE_INTERN_H

#include <stdint.h>

/* Returns 1 if h was not yet recorded for the current trace file (and
 * records it), 0 if it was, -1 when out of memory.  Any thread, no GIL. */
int dft_intern_insert(uint64_t h);

/* In a forked child: the sets' locks may have been held by a thread that does
 * not exist there.  Single-threaded. */
void dft_intern_after_fork_child(void);

#endif
