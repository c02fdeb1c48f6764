/* reader/memory.h: the memory pass (reader/memory.c): one trace's resident
 * memory samples, its memory limit, how it ended and where its time went,
 * for `dftracer summary --memory` (dftracer/tools/memory.py). */
#ifndef DFT_READER_MEMORY_H
#define DFT_READER_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "reader/identity.h"
#include "reader/reader.h"

#define DFT_MP_SAMPLES_MAX ((size_t)1 << 22) /* later samples are counted, not kept */
#define DFT_MP_SPANS 8                      /* the spans kept, by total time */

typedef struct dft_mp_sample {
    int64_t ts, rss, step; /* step: -1 for the flusher's samples */
} dft_mp_sample;

typedef struct dft_mp_span {
    char *cat, *name;
    size_t cat_len, name_len;
    uint64_t count;
    int64_t total; /* us */
} dft_mp_span;

typedef struct dft_mp_result {
    int status; /* dft_rd_status, or -1 out of memory */
    char err[256];
    uint64_t events, members, long_lines;
    dft_rd_bad bad;
    dft_ident who;
    int finalized, sigterm, have_ts, have_limit;
    int end_signal; /* the signal its `end` names (0: none): killed after it */
    int64_t ts_min, ts_max; /* over every event with a ts (ends of complete events) */
    int64_t limit;          /* the `memory` metadata event's limit_bytes */
    char limit_source[16];
    dft_mp_sample *samples;
    size_t nsamples, dropped;
    dft_mp_span spans[DFT_MP_SPANS];
    size_t nspans;
} dft_mp_result;

/* Reads path.  0 (r->status says how the stream ended), or -1 with errno
 * when it cannot be opened.  No GIL. */
int dft_mp_read(const char *path, dft_mp_result *r);
void dft_mp_free(dft_mp_result *r);

#endif
