/* reader/iobytes.c: the bytes an event moved, for `summary` and `report`
 * (docs/cli.md, "I/O bytes").
 *
 * A POSIX or STDIO event counts by what its call returns: bytes for read,
 * write, sendfile and the like, items for fread/fwrite (bytes = size x ret),
 * one character for fgetc/fputc, the string's length for fputs.  Calls that
 * move no data (open, stat, lseek, ftruncate, mmap, fsync, ...) count none.
 * Any other event counts a `size` (else `image_size`) argument, as the
 * application declared it.  Pure; runs without the GIL. */
#include "reader/reader.h"

#include <string.h>

enum kind { K_NONE, K_BYTES, K_ITEMS, K_CHAR, K_STRING };

typedef struct call {
    const char *name;
    enum kind kind;
} call;

/* Sorted by name (strcmp) for the binary search below; the test
 * tests/io/test_io_bytes.py checks that every data call dftracer intercepts
 * is here. */
static const call calls[] = {
    {"_IO_fgets", K_BYTES},
    {"_IO_fputs", K_STRING},
    {"_IO_fread", K_ITEMS},
    {"_IO_fwrite", K_ITEMS},
    {"_IO_getc", K_CHAR},
    {"_IO_putc", K_CHAR},
    {"__fgets_chk", K_BYTES},
    {"__fgets_unlocked_chk", K_BYTES},
    {"__fprintf_chk", K_BYTES},
    {"__fread_chk", K_ITEMS},
    {"__fread_unlocked_chk", K_ITEMS},
    {"__getdelim", K_BYTES},
    {"__pread64", K_BYTES},
    {"__pread64_chk", K_BYTES},
    {"__pread_chk", K_BYTES},
    {"__pwrite64", K_BYTES},
    {"__read", K_BYTES},
    {"__read_chk", K_BYTES},
    {"__vfprintf_chk", K_BYTES},
    {"__write", K_BYTES},
    {"copy_file_range", K_BYTES},
    {"dprintf", K_BYTES},
    {"fgetc", K_CHAR},
    {"fgetc_unlocked", K_CHAR},
    {"fgets", K_BYTES},
    {"fgets_unlocked", K_BYTES},
    {"fprintf", K_BYTES},
    {"fputc", K_CHAR},
    {"fputc_unlocked", K_CHAR},
    {"fputs", K_STRING},
    {"fputs_unlocked", K_STRING},
    {"fread", K_ITEMS},
    {"fread_unlocked", K_ITEMS},
    {"fwrite", K_ITEMS},
    {"fwrite_unlocked", K_ITEMS},
    {"getc", K_CHAR},
    {"getc_unlocked", K_CHAR},
    {"getdelim", K_BYTES},
    {"getline", K_BYTES},
    {"pread", K_BYTES},
    {"pread64", K_BYTES},
    {"preadv", K_BYTES},
    {"preadv2", K_BYTES},
    {"preadv64", K_BYTES},
    {"preadv64v2", K_BYTES},
    {"putc", K_CHAR},
    {"putc_unlocked", K_CHAR},
    {"pwrite", K_BYTES},
    {"pwrite64", K_BYTES},
    {"pwritev", K_BYTES},
    {"pwritev2", K_BYTES},
    {"pwritev64", K_BYTES},
    {"pwritev64v2", K_BYTES},
    {"read", K_BYTES},
    {"readv", K_BYTES},
    {"sendfile", K_BYTES},
    {"sendfile64", K_BYTES},
    {"splice", K_BYTES},
    {"vdprintf", K_BYTES},
    {"vfprintf", K_BYTES},
    {"write", K_BYTES},
    {"writev", K_BYTES},
};

static enum kind kind_of(dft_sv name)
{
    size_t lo = 0, hi = sizeof calls / sizeof *calls;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *c = calls[mid].name;
        size_t cn = strlen(c);
        int d = memcmp(name.p, c, name.n < cn ? name.n : cn);
        if (d == 0)
            d = name.n < cn ? -1 : name.n > cn;
        if (d == 0)
            return calls[mid].kind;
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return K_NONE;
}

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
    switch (kind_of(name)) {
    case K_NONE:
        return 0;
    case K_ITEMS:
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
    case K_BYTES:
        return byte_call(a, ret, bytes);
    case K_CHAR:
        *bytes = (a->have & DFT_IO_RET) && a->ret >= 0;
        return (a->have & DFT_IO_RET) != 0;
    case K_STRING:
        if (!(a->have & DFT_IO_COUNT))
            return 0;
        *bytes = (a->have & DFT_IO_RET) && a->ret < 0 ? 0 : a->count;
        return 1;
    }
    return 0;
}
