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
    size_t len;
    enum kind kind;
} call;

#define C(NAME, KIND) {NAME, sizeof NAME - 1, KIND}

/* Sorted by name (strcmp) for the binary search below.  The last column of
 * docs/io-tracing.md's table says the same for every intercepted call, and
 * tests/io/test_io_bytes.py checks the two against each other. */
static const call calls[] = {
    C("_IO_fgets", K_BYTES),
    C("_IO_fputs", K_STRING),
    C("_IO_fread", K_ITEMS),
    C("_IO_fwrite", K_ITEMS),
    C("_IO_getc", K_CHAR),
    C("_IO_putc", K_CHAR),
    C("__fgets_chk", K_BYTES),
    C("__fgets_unlocked_chk", K_BYTES),
    C("__fprintf_chk", K_BYTES),
    C("__fread_chk", K_ITEMS),
    C("__fread_unlocked_chk", K_ITEMS),
    C("__getdelim", K_BYTES),
    C("__pread64", K_BYTES),
    C("__pread64_chk", K_BYTES),
    C("__pread_chk", K_BYTES),
    C("__pwrite64", K_BYTES),
    C("__read", K_BYTES),
    C("__read_chk", K_BYTES),
    C("__vfprintf_chk", K_BYTES),
    C("__write", K_BYTES),
    C("copy_file_range", K_BYTES),
    C("dprintf", K_BYTES),
    C("fgetc", K_CHAR),
    C("fgetc_unlocked", K_CHAR),
    C("fgets", K_BYTES),
    C("fgets_unlocked", K_BYTES),
    C("fprintf", K_BYTES),
    C("fputc", K_CHAR),
    C("fputc_unlocked", K_CHAR),
    C("fputs", K_STRING),
    C("fputs_unlocked", K_STRING),
    C("fread", K_ITEMS),
    C("fread_unlocked", K_ITEMS),
    C("fwrite", K_ITEMS),
    C("fwrite_unlocked", K_ITEMS),
    C("getc", K_CHAR),
    C("getc_unlocked", K_CHAR),
    C("getdelim", K_BYTES),
    C("getline", K_BYTES),
    C("pread", K_BYTES),
    C("pread64", K_BYTES),
    C("preadv", K_BYTES),
    C("preadv2", K_BYTES),
    C("preadv64", K_BYTES),
    C("preadv64v2", K_BYTES),
    C("putc", K_CHAR),
    C("putc_unlocked", K_CHAR),
    C("pwrite", K_BYTES),
    C("pwrite64", K_BYTES),
    C("pwritev", K_BYTES),
    C("pwritev2", K_BYTES),
    C("pwritev64", K_BYTES),
    C("pwritev64v2", K_BYTES),
    C("read", K_BYTES),
    C("readv", K_BYTES),
    C("sendfile", K_BYTES),
    C("sendfile64", K_BYTES),
    C("splice", K_BYTES),
    C("vdprintf", K_BYTES),
    C("vfprintf", K_BYTES),
    C("write", K_BYTES),
    C("writev", K_BYTES),
};

static enum kind kind_of(dft_sv name)
{
    size_t lo = 0, hi = sizeof calls / sizeof *calls;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *c = calls[mid].name;
        size_t cn = calls[mid].len;
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
