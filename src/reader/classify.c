/* reader/classify.c: what an event is, by its (cat, name) — the one
 * definition behind every reader (docs/cli.md, "Event classes"):
 *
 *   comm                               comm
 *   dataloader, data                   data (a `*.block` loop body: other)
 *   pipeline `*.iter`                  data (waiting for a loop's next item)
 *   pipeline, others                   container (iteration, train.block, ...)
 *   POSIX, STDIO                       io
 *   checkpoint                         checkpoint
 *   compute, dynamo, compile           compute (torch.compile's time is compute)
 *   PP (torch.profiler)                `enumerate(DataLoader)...`: data;
 *                                      `ProfilerStep#N`: container;
 *                                      `[memory]` and the like: other; ops: compute
 *   dftracer                           the tracer's own (no class)
 *   anything else                      other
 *
 * and the POSIX/STDIO calls that move file data, with their direction and
 * what their `ret` counts (the last column of docs/io-tracing.md's table;
 * reader/iobytes.c turns it into bytes).  Pure; runs without the GIL. */
#include "reader/classify.h"

#include <string.h>

static int is(const char *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && memcmp(p, lit, l) == 0;
}

static int prefix(const char *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && memcmp(p, lit, l) == 0;
}

static int suffix(const char *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && memcmp(p + n - l, lit, l) == 0;
}

/* ProfilerStep#N, N digits */
static int profiler_step(const char *name, size_t n)
{
    if (!prefix(name, n, "ProfilerStep#") || n == 13)
        return 0;
    for (size_t i = 13; i < n; i++)
        if (name[i] < '0' || name[i] > '9')
            return 0;
    return 1;
}

int dft_cls_class(const char *cat, size_t cn, const char *name, size_t nn, int *flags)
{
    int f = 0, c = DFT_CLS_OTHER;
    if (is(cat, cn, "comm"))
        c = DFT_CLS_COMM;
    else if (is(cat, cn, "dataloader") || is(cat, cn, "data"))
        c = suffix(name, nn, ".block") ? DFT_CLS_OTHER : DFT_CLS_DATA;
    else if (is(cat, cn, "pipeline")) {
        if (suffix(name, nn, ".iter"))
            c = DFT_CLS_DATA;
        else
            f = DFT_CLS_CONTAINER;
    } else if (is(cat, cn, "POSIX") || is(cat, cn, "STDIO"))
        c = DFT_CLS_IO;
    else if (is(cat, cn, "checkpoint"))
        c = DFT_CLS_CHECKPOINT;
    else if (is(cat, cn, "compute") || is(cat, cn, "dynamo") || is(cat, cn, "compile"))
        c = DFT_CLS_COMPUTE;
    else if (is(cat, cn, "dftracer"))
        f = DFT_CLS_TRACER;
    else if (is(cat, cn, "PP")) { /* torch.profiler */
        if (prefix(name, nn, "enumerate(DataLoader)"))
            c = DFT_CLS_DATA;
        else if (prefix(name, nn, "["))
            c = DFT_CLS_OTHER;
        else if (!profiler_step(name, nn))
            c = DFT_CLS_COMPUTE;
    }
    if (profiler_step(name, nn) && !(f & DFT_CLS_TRACER)) {
        f |= DFT_CLS_CONTAINER;
        c = DFT_CLS_OTHER;
    }
    if (flags)
        *flags = f;
    return c;
}

int dft_cls_step_kind(const char *cat, size_t cn, const char *name, size_t nn)
{
    if (is(cat, cn, "pipeline") && is(name, nn, "iteration"))
        return DFT_STEP_ITERATION;
    if (profiler_step(name, nn))
        return DFT_STEP_PROFILER;
    if (is(cat, cn, "pipeline") && is(name, nn, "train.block"))
        return DFT_STEP_TRAIN;
    return DFT_STEP_NONE;
}

typedef struct call {
    const char *name;
    size_t len;
    int io;
} call;

#define R DFT_CLS_IO_READ
#define W DFT_CLS_IO_WRITE
#define C(NAME, DIR, KIND) {NAME, sizeof NAME - 1, (DIR) | (KIND)}

/* Sorted by name (strcmp) for the binary search below.  docs/io-tracing.md's
 * table says the same for every intercepted call, and
 * tests/io/test_io_bytes.py checks the two against each other. */
static const call calls[] = {
    C("_IO_fgets", R, DFT_CLS_IO_BYTES),
    C("_IO_fputs", W, DFT_CLS_IO_STRING),
    C("_IO_fread", R, DFT_CLS_IO_ITEMS),
    C("_IO_fwrite", W, DFT_CLS_IO_ITEMS),
    C("_IO_getc", R, DFT_CLS_IO_CHAR),
    C("_IO_putc", W, DFT_CLS_IO_CHAR),
    C("__fgets_chk", R, DFT_CLS_IO_BYTES),
    C("__fgets_unlocked_chk", R, DFT_CLS_IO_BYTES),
    C("__fprintf_chk", W, DFT_CLS_IO_BYTES),
    C("__fread_chk", R, DFT_CLS_IO_ITEMS),
    C("__fread_unlocked_chk", R, DFT_CLS_IO_ITEMS),
    C("__getdelim", R, DFT_CLS_IO_BYTES),
    C("__pread64", R, DFT_CLS_IO_BYTES),
    C("__pread64_chk", R, DFT_CLS_IO_BYTES),
    C("__pread_chk", R, DFT_CLS_IO_BYTES),
    C("__pwrite64", W, DFT_CLS_IO_BYTES),
    C("__read", R, DFT_CLS_IO_BYTES),
    C("__read_chk", R, DFT_CLS_IO_BYTES),
    C("__vfprintf_chk", W, DFT_CLS_IO_BYTES),
    C("__write", W, DFT_CLS_IO_BYTES),
    C("copy_file_range", R | W, DFT_CLS_IO_BYTES),
    C("dprintf", W, DFT_CLS_IO_BYTES),
    C("fgetc", R, DFT_CLS_IO_CHAR),
    C("fgetc_unlocked", R, DFT_CLS_IO_CHAR),
    C("fgets", R, DFT_CLS_IO_BYTES),
    C("fgets_unlocked", R, DFT_CLS_IO_BYTES),
    C("fprintf", W, DFT_CLS_IO_BYTES),
    C("fputc", W, DFT_CLS_IO_CHAR),
    C("fputc_unlocked", W, DFT_CLS_IO_CHAR),
    C("fputs", W, DFT_CLS_IO_STRING),
    C("fputs_unlocked", W, DFT_CLS_IO_STRING),
    C("fread", R, DFT_CLS_IO_ITEMS),
    C("fread_unlocked", R, DFT_CLS_IO_ITEMS),
    C("fwrite", W, DFT_CLS_IO_ITEMS),
    C("fwrite_unlocked", W, DFT_CLS_IO_ITEMS),
    C("getc", R, DFT_CLS_IO_CHAR),
    C("getc_unlocked", R, DFT_CLS_IO_CHAR),
    C("getdelim", R, DFT_CLS_IO_BYTES),
    C("getline", R, DFT_CLS_IO_BYTES),
    C("pread", R, DFT_CLS_IO_BYTES),
    C("pread64", R, DFT_CLS_IO_BYTES),
    C("preadv", R, DFT_CLS_IO_BYTES),
    C("preadv2", R, DFT_CLS_IO_BYTES),
    C("preadv64", R, DFT_CLS_IO_BYTES),
    C("preadv64v2", R, DFT_CLS_IO_BYTES),
    C("putc", W, DFT_CLS_IO_CHAR),
    C("putc_unlocked", W, DFT_CLS_IO_CHAR),
    C("pwrite", W, DFT_CLS_IO_BYTES),
    C("pwrite64", W, DFT_CLS_IO_BYTES),
    C("pwritev", W, DFT_CLS_IO_BYTES),
    C("pwritev2", W, DFT_CLS_IO_BYTES),
    C("pwritev64", W, DFT_CLS_IO_BYTES),
    C("pwritev64v2", W, DFT_CLS_IO_BYTES),
    C("read", R, DFT_CLS_IO_BYTES),
    C("readv", R, DFT_CLS_IO_BYTES),
    C("sendfile", R | W, DFT_CLS_IO_BYTES),
    C("sendfile64", R | W, DFT_CLS_IO_BYTES),
    C("splice", R | W, DFT_CLS_IO_BYTES),
    C("vdprintf", W, DFT_CLS_IO_BYTES),
    C("vfprintf", W, DFT_CLS_IO_BYTES),
    C("write", W, DFT_CLS_IO_BYTES),
    C("writev", W, DFT_CLS_IO_BYTES),
};

int dft_cls_io(const char *cat, size_t cn, const char *name, size_t nn)
{
    if (!is(cat, cn, "POSIX") && !is(cat, cn, "STDIO"))
        return 0;
    size_t lo = 0, hi = sizeof calls / sizeof *calls;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        size_t cl = calls[mid].len;
        int d = memcmp(name, calls[mid].name, nn < cl ? nn : cl);
        if (d == 0)
            d = nn < cl ? -1 : nn > cl;
        if (d == 0)
            return calls[mid].io;
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return 0;
}
