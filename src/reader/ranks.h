/* reader/ranks.h: the per-file pass behind `dftracer summary --ranks`, the
 * report's Ranks section and the clock alignment of merge (reader/ranks.c;
 * its Python face is reader/ranks_py.c). */
#ifndef DFT_READER_RANKS_H
#define DFT_READER_RANKS_H

#include "reader/ranks_steps.h"

/* Reads the trace at path.  step_name (NULL: none) names the events that are
 * steps (`name` or `cat/name`); with sync_only, only the identity, clock
 * pairs and sync points are collected (no steps, no keys).  Returns 0, or -1
 * with errno when the file cannot be opened; out-of-memory is status -1.
 * No GIL, no Python. */
int dft_rk_read(const char *path, const char *step_name, int sync_only, dft_rk_result *out);
void dft_rk_free(dft_rk_result *r);

#endif
