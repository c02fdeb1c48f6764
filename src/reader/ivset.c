/* reader/ivset.c: sorted, merged byte ranges (reader/ivset.h).  Pure C, no
 * GIL, no Python. */
#include "reader/ivset.h"

#include <stdlib.h>
#include <string.h>

/* The index of the first range whose end is >= start (ranges touching start
 * merge with it). */
static size_t first_at(const dft_ivset *s, int64_t start)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->v[2 * mid + 1] < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Merges the two neighbours with the smallest gap (the set is full). */
static void merge_closest(dft_ivset *s)
{
    size_t best = 0;
    int64_t gap = INT64_MAX;
    for (size_t i = 0; i + 1 < s->n; i++) {
        int64_t g = s->v[2 * i + 2] - s->v[2 * i + 1];
        if (g < gap) {
            gap = g;
            best = i;
        }
    }
    s->v[2 * best + 1] = s->v[2 * best + 3];
    memmove(&s->v[2 * best + 2], &s->v[2 * best + 4], (s->n - best - 2) * 2 * sizeof *s->v);
    s->n--;
    s->approx = 1;
}

int64_t dft_ivset_add(dft_ivset *s, int64_t start, int64_t end)
{
    if (end <= start)
        return 0;
    size_t i = first_at(s, start);
    size_t j = i; /* ranges i..j-1 overlap or touch [start, end) */
    int64_t covered = 0;
    while (j < s->n && s->v[2 * j] <= end) {
        int64_t a = s->v[2 * j] > start ? s->v[2 * j] : start;
        int64_t b = s->v[2 * j + 1] < end ? s->v[2 * j + 1] : end;
        if (b > a)
            covered += b - a;
        j++;
    }
    if (j > i) { /* merge i..j-1 with the new range into slot i */
        int64_t ns = s->v[2 * i] < start ? s->v[2 * i] : start;
        int64_t ne = s->v[2 * (j - 1) + 1] > end ? s->v[2 * (j - 1) + 1] : end;
        s->v[2 * i] = ns;
        s->v[2 * i + 1] = ne;
        memmove(&s->v[2 * i + 2], &s->v[2 * j], (s->n - j) * 2 * sizeof *s->v);
        s->n -= j - i - 1;
        return (end - start) - covered;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        if (cap > DFT_IVSET_MAX)
            cap = DFT_IVSET_MAX;
        if (s->n == cap) { /* full: make room, then place the range again */
            merge_closest(s);
            return dft_ivset_add(s, start, end);
        }
        int64_t *v = realloc(s->v, cap * 2 * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    memmove(&s->v[2 * i + 2], &s->v[2 * i], (s->n - i) * 2 * sizeof *s->v);
    s->v[2 * i] = start;
    s->v[2 * i + 1] = end;
    s->n++;
    return end - start;
}

void dft_ivset_free(dft_ivset *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}
