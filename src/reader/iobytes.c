/* reader/iobytes.c: the bytes an event moved, for `summary` and `report`
 * (docs/cli.md, "I/O bytes").
 *
 * A POSIX or STDIO event counts by what its call returns: bytes for read,
 * write, sendfile and the like, items for fread/fwrite (bytes = size x ret),
 * one character for fgetc/fputc, the string's length for fputs.  Calls that
 * move no data (open, stat, lseek, ftruncate, mmap, fsync, ...) count none.
 * Any other event counts a `size` (else `image_size`) argument, as the
 * application declared it.  Which calls move data, and how their `ret`
 * counts: reader/classify.c's table.  Pure; runs without the GIL. */
#include "reader/reader.h"

#include "reader/classify.h"

#include <string.h>

static int sv_is(dft_sv v, const char *lit)
{
    size_t n = strlen(lit);
    return v.n == n && memcmp(v.p, lit, n) == 0;
}

/* A call returning bytes; an event that does not say what was done (no
 * ret: another tool's, or one logged by hand) counts what was asked. */
static int byte_call(const dft_io_args *a, int64_t ret, int64_t *bytes)
{
    *bytes = (a->have & DFT_IO_RET) ? ret
             : (a->have & DFT_IO_SIZE) ? a->size
             : (a->have & DFT_IO_COUNT) ? a->count : -1;
    return *bytes >= 0;
}

int dft_io_bytes(dft_sv cat, dft_sv name, const dft_io_args *a, int64_t *bytes)
{
    if (!sv_is(cat, "POSIX") && !sv_is(cat, "STDIO")) {
        if (a->have & DFT_IO_SIZE) {
            *bytes = a->size;
            return a->size >= 0;
        }
        if (a->have & DFT_IO_IMAGE_SIZE) {
            *bytes = a->image_size;
            return a->image_size >= 0;
        }
        return 0;
    }
    int64_t ret = a->ret < 0 ? 0 : a->ret; /* a failed call moved nothing */
    int io = dft_cls_io(cat.p, cat.n, name.p, name.n);
    switch (io & (DFT_CLS_IO_BYTES | DFT_CLS_IO_ITEMS | DFT_CLS_IO_CHAR | DFT_CLS_IO_STRING)) {
    default:
        return 0;
    case DFT_CLS_IO_ITEMS:
        if (a->have & DFT_IO_SIZE) {
            if (a->have & DFT_IO_RET) {
                *bytes = a->size * ret;
                return 1;
            }
            if (a->have & DFT_IO_COUNT) {
                *bytes = a->size * a->count;
                return 1;
            }
        }
        return byte_call(a, ret, bytes); /* without a size */
    case DFT_CLS_IO_BYTES:
        return byte_call(a, ret, bytes);
    case DFT_CLS_IO_CHAR:
        *bytes = (a->have & DFT_IO_RET) && a->ret >= 0;
        return (a->have & DFT_IO_RET) != 0;
    case DFT_CLS_IO_STRING:
        if (!(a->have & DFT_IO_COUNT))
            return 0;
        *bytes = (a->have & DFT_IO_RET) && a->ret < 0 ? 0 : a->count;
        return 1;
    }
    return 0;
}
