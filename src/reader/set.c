/* reader/set.c: an open-addressing map from uint64 keys to pointers, used by
 * the readers for id pages and hash definitions.  Runs without the GIL. */
#include "reader/reader.h"

#include <stdlib.h>

static size_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

int dft_u64map_get(dft_u64map *s, uint64_t key, int create, size_t *slot)
{
    if (create && (s->used + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        void **nv = calloc(ncap, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->keys[i])
                continue;
            size_t j = mix(s->keys[i]) & (ncap - 1);
            while (nk[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = s->keys[i];
            nv[j] = s->vals[i];
        }
        free(s->keys);
        free(s->vals);
        s->keys = nk;
        s->vals = nv;
        s->cap = ncap;
    }
    if (!s->cap)
        return 0;
    uint64_t k = key + 1;
    if (k == 0)
        k = 1; /* UINT64_MAX shares a slot value with 0: harmless here */
    size_t j = mix(k) & (s->cap - 1);
    while (s->keys[j]) {
        if (s->keys[j] == k) {
            *slot = j;
            return 1;
        }
        j = (j + 1) & (s->cap - 1);
    }
    if (!create)
        return 0;
    s->keys[j] = k;
    s->used++;
    *slot = j;
    return 0;
}

void dft_u64map_free(dft_u64map *s, int free_vals)
{
    if (free_vals)
        for (size_t i = 0; i < s->cap; i++)
            free(s->vals[i]);
    free(s->keys);
    free(s->vals);
}

