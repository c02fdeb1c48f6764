/* core/open_spans.h: the flusher's side of the open spans (core/open_spans.c). */
#ifndef DFT_CORE_OPEN_SPANS_H
#define DFT_CORE_OPEN_SPANS_H

#include <stdint.h>

/* Writes an `open` snapshot for each thread whose innermost open span has
 * been open for at least age_us -- when its spans changed since the last
 * one, when that is repeat_us old, or always with force (a SIGTERM's flush)
 * -- and an empty one for a thread whose earlier snapshot no longer stands.
 * The flusher thread, no GIL. */
void dft_open_spans_tick(int64_t age_us, int64_t repeat_us, int force);

#endif
