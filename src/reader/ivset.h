/* reader/ivset.h: a set of byte ranges [start, end) kept sorted and merged
 * (reader/ivset.c), for the unique and re-read bytes of `summary --io`. */
#ifndef DFT_READER_IVSET_H
#define DFT_READER_IVSET_H

#include <stddef.h>
#include <stdint.h>

/* Past this many disjoint ranges a set merges its two closest neighbours
 * (the gap between them counts as covered, and `approx` is set): memory stays
 * bounded whatever the access pattern. */
#define DFT_IVSET_MAX 4096

typedef struct dft_ivset {
    int64_t *v; /* start0, end0, start1, end1, ... sorted, disjoint, not touching */
    size_t n, cap; /* ranges used, allocated */
    int approx;
} dft_ivset;

/* Adds [start, end): the number of bytes it newly covers (0..end-start), or
 * -1 out of memory.  Runs without the GIL. */
int64_t dft_ivset_add(dft_ivset *s, int64_t start, int64_t end);
void dft_ivset_free(dft_ivset *s);

#endif
