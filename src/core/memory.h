/* core/memory.h: what the core itself calls of the memory counters
 * (core/memory_*.c; the rest of their face is in core/core.h, "Memory"). */
#ifndef DFT_CORE_MEMORY_H
#define DFT_CORE_MEMORY_H

#include <stdint.h>

#include "core/core.h"

/* The flusher's tick: a `memory` counter sample (and, once per file, the
 * `memory` metadata event with the limit).  The flusher thread, no GIL. */
void dft_mem_tick(void);

/* This process is DataLoader worker id of num_workers (-1: unknown), from
 * its `worker` event: dft_mem_batch samples from now on.  Any thread. */
void dft_mem_set_worker(int64_t id, int64_t num_workers);

/* Closes the statm descriptor this process opened (finalize: the tracer
 * holds no descriptor past its trace; a later read opens it again).  A
 * reader racing with it reads -1 once.  Any thread, no GIL. */
void dft_mem_statm_close(void);

#endif
