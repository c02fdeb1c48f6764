/* reader/idset.c: the set of event ids `validate` checks for duplicates.
 *
 * Ids are grouped in ranges of 2^16.  A range starts as a sorted array of the
 * 16-bit offsets seen and becomes a bitmap (8 KiB) when the array would be
 * larger than 1 KiB, so memory follows the number of ids, never their values:
 * a file whose ids are 65,536 apart costs one small array per id, not one
 * bitmap page.  Runs without the GIL. */
#include "reader/reader.h"

#include <stdlib.h>
#include <string.h>

#define RANGE_BITS 16
#define RANGE_IDS (1u << RANGE_BITS)
#define SPARSE_MAX 512 /* offsets in an array: 1 KiB, then the bitmap */

typedef struct id_range {
    uint32_t n, cap;      /* offsets held, room; cap 0: bitmap mode */
    unsigned char *bits;  /* RANGE_IDS bits, in bitmap mode */
    uint16_t offs[];      /* sorted, in array mode */
} id_range;

static id_range *range_new(void)
{
    id_range *r = malloc(sizeof *r + 4 * sizeof(uint16_t));
    if (!r)
        return NULL;
    r->n = 0;
    r->cap = 4;
    r->bits = NULL;
    return r;
}

/* The array turned into a bitmap; returns the (smaller) range, or NULL. */
static id_range *range_to_bitmap(id_range *r)
{
    unsigned char *bits = calloc(RANGE_IDS / 8, 1);
    if (!bits)
        return NULL;
    for (uint32_t i = 0; i < r->n; i++)
        bits[r->offs[i] >> 3] |= (unsigned char)(1u << (r->offs[i] & 7));
    id_range *b = realloc(r, sizeof *r);
    if (!b)
        b = r; /* shrinking failed: keep the larger block */
    b->bits = bits;
    b->cap = 0;
    return b;
}

int dft_idset_add(dft_idset *s, uint64_t id)
{
    size_t slot;
    int found = dft_u64map_get(&s->ranges, id >> RANGE_BITS, 1, &slot);
    if (found < 0)
        return -1;
    if (!found && !(s->ranges.vals[slot] = range_new()))
        return -1;
    id_range *r = s->ranges.vals[slot];
    uint16_t off = (uint16_t)(id & (RANGE_IDS - 1));
    if (r->cap == 0) {
        unsigned char bit = (unsigned char)(1u << (off & 7));
        int seen = (r->bits[off >> 3] & bit) != 0;
        r->bits[off >> 3] |= bit;
        return seen;
    }
    uint32_t lo = 0, hi = r->n; /* first offset >= off */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r->offs[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < r->n && r->offs[lo] == off)
        return 1;
    if (r->n == r->cap) {
        if (r->cap >= SPARSE_MAX) {
            id_range *b = range_to_bitmap(r);
            if (!b)
                return -1;
            s->ranges.vals[slot] = b;
            b->bits[off >> 3] |= (unsigned char)(1u << (off & 7));
            return 0;
        }
        id_range *g = realloc(r, sizeof *r + 2 * r->cap * sizeof(uint16_t));
        if (!g)
            return -1;
        r = s->ranges.vals[slot] = g;
        r->cap *= 2;
    }
    memmove(&r->offs[lo + 1], &r->offs[lo], (r->n - lo) * sizeof(uint16_t));
    r->offs[lo] = off;
    r->n++;
    return 0;
}

void dft_idset_free(dft_idset *s)
{
    for (size_t i = 0; i < s->ranges.cap; i++) {
        id_range *r = s->ranges.keys[i] ? s->ranges.vals[i] : NULL;
        if (r)
            free(r->bits);
    }
    dft_u64map_free(&s->ranges, 1);
}
