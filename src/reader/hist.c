/* reader/hist.c: the duration histogram of one `summary` group.
 *
 * Log-linear bins (exact below 16 us, 16 per power of two above).  A group
 * holds (bin, count) pairs for the bins it uses and switches to the dense
 * array of DFT_HIST_BINS counts only when that is no more than a few times
 * larger, so a trace with many small groups (a name or thread per event)
 * costs a few dozen bytes per group, not the whole array.  dft_hist_add runs
 * without the GIL; dft_hist_dict needs it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/tools.h"
#include "format/grow.h"

#include <stdlib.h>
#include <string.h>

#define SPARSE_MAX 32 /* pairs: 256 bytes, against 4.7 KiB dense */
#define PAIR_BIN(p) ((int)((p) >> 48))
#define PAIR_COUNT_MAX ((1ull << 48) - 1)

int dft_hist_bin(int64_t v)
{
    if (v < 16)
        return v < 0 ? 0 : (int)v;
    int e = 63 - __builtin_clzll((unsigned long long)v); /* >= 4 */
    if (e > DFT_HIST_MAX_EXP)
        return DFT_HIST_BINS - 1;
    int sub = (int)((v >> (e - 4)) & 15);
    return 16 + (e - 4) * 16 + sub;
}

static int to_dense(dft_hist *h)
{
    uint64_t *d = calloc(DFT_HIST_BINS, sizeof *d);
    if (!d)
        return -1;
    for (uint32_t i = 0; i < h->npairs; i++)
        d[PAIR_BIN(h->pairs[i])] += h->pairs[i] & PAIR_COUNT_MAX;
    free(h->pairs);
    h->pairs = NULL;
    h->npairs = h->cap = 0;
    h->dense = d;
    return 0;
}

int dft_hist_add(dft_hist *h, int64_t v)
{
    int bin = dft_hist_bin(v);
    if (h->dense) {
        h->dense[bin]++;
        return 0;
    }
    for (uint32_t i = 0; i < h->npairs; i++) {
        if (PAIR_BIN(h->pairs[i]) != bin)
            continue;
        if ((h->pairs[i] & PAIR_COUNT_MAX) == PAIR_COUNT_MAX) {
            if (to_dense(h) < 0)
                return -1;
            h->dense[bin]++;
            return 0;
        }
        h->pairs[i]++;
        return 0;
    }
    if (h->npairs == h->cap) {
        if (h->cap >= SPARSE_MAX) {
            if (to_dense(h) < 0)
                return -1;
            h->dense[bin]++;
            return 0;
        }
        size_t cap = h->cap; /* uint32_t in the struct: one per group, kept small */
        if (DFT_GROW(h->pairs, h->npairs, cap, 4) != 0)
            return -1;
        h->cap = (uint32_t)cap;
    }
    h->pairs[h->npairs++] = ((uint64_t)bin << 48) | 1;
    return 0;
}

static int put(PyObject *d, int bin, uint64_t count)
{
    PyObject *k = PyLong_FromLong(bin), *v = PyLong_FromUnsignedLongLong(count);
    int rc = (k && v) ? PyDict_SetItem(d, k, v) : -1;
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

PyObject *dft_hist_dict(const dft_hist *h)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    int rc = 0;
    if (h->dense) {
        for (int i = 0; i < DFT_HIST_BINS && rc == 0; i++)
            if (h->dense[i])
                rc = put(d, i, h->dense[i]);
    } else {
        for (uint32_t i = 0; i < h->npairs && rc == 0; i++)
            rc = put(d, PAIR_BIN(h->pairs[i]), h->pairs[i] & PAIR_COUNT_MAX);
    }
    if (rc < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

void dft_hist_free(dft_hist *h)
{
    free(h->dense);
    free(h->pairs);
    memset(h, 0, sizeof *h);
}
