/* core/intern.h: what a trace file defines once (core/intern.c): the hashes
 * of interned strings, whose FH/SH metadata event is written the first time
 * each appears in the current file (dft_intern), and the lanes named so far
 * (dft_name_lane_once, core/core.h). */
#ifndef DFT_CORE_INTERN_H
#define DFT_CORE_INTERN_H

#include <stddef.h>
#include <stdint.h>

/* Returns 1 if h was not yet recorded for the current trace file (and
 * records it), 0 if it was, -1 when out of memory.  Any thread, no GIL. */
int dft_intern_insert(uint64_t h);

/* In a forked child: the sets' locks may have been held by a thread that does
 * not exist there.  Single-threaded. */
void dft_intern_after_fork_child(void);

/* A metadata event (process_name, thread_name, ...) of lane (pid, tid)
 * (0, 0: this process's), its value a string or (value_is_hash) a hash.
 * Records only into an active trace.  Any thread, no GIL. */
int dft_emit_meta(const char *kind, int64_t pid, int64_t tid, const char *key, size_t key_len,
                  const char *value, size_t value_len, int value_is_hash, uint64_t hash);

#endif
