/* core/inflight.h: the flusher's side of the in-flight collectives
 * (core/inflight.c). */
#ifndef DFT_CORE_INFLIGHT_H
#define DFT_CORE_INFLIGHT_H

#include <stdint.h>

#include "core/state.h"

/* How many collectives can be in flight at once; more are counted
 * (dft_inflight_missed) and not shown. */
#define DFT_INFLIGHT_MAX 256

/* One in-flight collective as the flusher copies it. */
typedef struct dft_inflight_view {
    int64_t tid; /* the thread that launched it */
    dft_open_span span;
} dft_inflight_view;

/* Copies the live entries into out (at most DFT_INFLIGHT_MAX), oldest first;
 * returns how many.  Entries being written or ended meanwhile are skipped.
 * The flusher thread, no GIL. */
int dft_inflight_collect(dft_inflight_view *out);

/* Forgets every entry: a forked child has none of its parent's work.
 * Single-threaded (the fork child handler), no GIL. */
void dft_inflight_after_fork_child(void);

#endif
