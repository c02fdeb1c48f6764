/* format/grow.h: room for one more item in a doubling array, the one way the
 * C sources grow their arrays (header only; any layer may include it). */
#ifndef DFT_FORMAT_GROW_H
#define DFT_FORMAT_GROW_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* When n == *cap, reallocates the array at *arr (a pointer to the array's
 * pointer) of items of size bytes to twice its capacity (first when empty).
 * 0, or -1 when out of memory or too large (the array unchanged).  Pure;
 * any thread, no GIL. */
static inline int dft_grow(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : first;
    if (c <= *cap || c > SIZE_MAX / size)
        return -1;
    void *old;
    memcpy(&old, arr, sizeof old);
    void *p = realloc(old, c * size);
    if (!p)
        return -1;
    memcpy(arr, &p, sizeof p);
    *cap = c;
    return 0;
}

/* dft_grow for an array a (any pointer type) of n items in use, capacity cap
 * (a size_t lvalue). */
#define DFT_GROW(a, n, cap, first) dft_grow(&(a), &(cap), (n), sizeof *(a), (first))

#endif
