/* core/identity.h: who this process is in a distributed job, and how its
 * trace clock stands against the wall clock (core/identity.c).  Both are
 * written as metadata events (docs/trace-format.md, "Ranks and clocks"). */
#ifndef DFT_CORE_IDENTITY_H
#define DFT_CORE_IDENTITY_H

#include <stdint.h>

#include "core/core.h" /* dft_rank_info, dft_identity_emit_rank, dft_identity_env_rank */

/* The rest of a trace's header: the `rank` event when the environment names
 * one, and the first `clock` pair.  Registers (once) the lifecycle hook that
 * writes a clock pair at each flush() and at finalize.  Called where the
 * header is written; any thread, no GIL. */
void dft_identity_emit_header(void);

/* The flusher's tick: a clock pair when the last one is DFT_CLOCK_PAIR_EVERY
 * flush intervals old (10 s by default), written straight to the file (no
 * thread buffer, so the flusher thread never appears in the trace).  The
 * flusher thread, no GIL. */
#define DFT_CLOCK_PAIR_EVERY 10
void dft_identity_clock_tick(void);

#endif
