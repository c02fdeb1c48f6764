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
 * and the POSIX/STDIO calls: the ones that move file data with their
 * direction and what their `ret` counts (the last column of
 * docs/io-tracing.md's table; reader/iobytes.c turns it into bytes), and the
 * Darshan counter each call feeds (`summary --io`, reader/iostats_count.c).
 * Pure; runs without the GIL. */
#include "reader/classify.h"

#include "reader/reader.h"

#include <pthread.h>
#include <stdint.h>
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
    int io; /* direction | how `ret` counts; 0: moves no data */
    int op; /* DFT_IO_OP_*: the Darshan counter it feeds (summary --io) */
} call;

#define R DFT_CLS_IO_READ
#define W DFT_CLS_IO_WRITE
#define C(NAME, DIR, KIND, OP) {NAME, sizeof NAME - 1, (DIR) | (KIND), DFT_IO_OP_##OP}

/* Sorted by name (strcmp), for a reader of this list: every POSIX/STDIO
 * call that moves data or that Darshan counts apart from plain metadata.
 * docs/io-tracing.md's table says the same for every intercepted call, and
 * tests/io/test_io_bytes.py checks the two against each other.  A call not
 * here moves no data and is metadata of its family. */
static const call calls[] = {
    C("_IO_fgets", R, DFT_CLS_IO_BYTES, SREAD),
    C("_IO_fputs", W, DFT_CLS_IO_STRING, SWRITE),
    C("_IO_fread", R, DFT_CLS_IO_ITEMS, SREAD),
    C("_IO_fwrite", W, DFT_CLS_IO_ITEMS, SWRITE),
    C("_IO_getc", R, DFT_CLS_IO_CHAR, SREAD),
    C("_IO_putc", W, DFT_CLS_IO_CHAR, SWRITE),
    C("__fgets_chk", R, DFT_CLS_IO_BYTES, SREAD),
    C("__fgets_unlocked_chk", R, DFT_CLS_IO_BYTES, SREAD),
    C("__fprintf_chk", W, DFT_CLS_IO_BYTES, SWRITE),
    C("__fread_chk", R, DFT_CLS_IO_ITEMS, SREAD),
    C("__fread_unlocked_chk", R, DFT_CLS_IO_ITEMS, SREAD),
    C("__fxstat", 0, 0, STAT),
    C("__fxstat64", 0, 0, STAT),
    C("__fxstatat", 0, 0, STAT),
    C("__fxstatat64", 0, 0, STAT),
    C("__getdelim", R, DFT_CLS_IO_BYTES, SREAD),
    C("__lxstat", 0, 0, STAT),
    C("__lxstat64", 0, 0, STAT),
    C("__open64_2", 0, 0, OPEN),
    C("__open_2", 0, 0, OPEN),
    C("__openat64_2", 0, 0, OPEN),
    C("__openat_2", 0, 0, OPEN),
    C("__pread64", R, DFT_CLS_IO_BYTES, PREAD),
    C("__pread64_chk", R, DFT_CLS_IO_BYTES, PREAD),
    C("__pread_chk", R, DFT_CLS_IO_BYTES, PREAD),
    C("__pwrite64", W, DFT_CLS_IO_BYTES, PWRITE),
    C("__read", R, DFT_CLS_IO_BYTES, READ),
    C("__read_chk", R, DFT_CLS_IO_BYTES, READ),
    C("__vfprintf_chk", W, DFT_CLS_IO_BYTES, SWRITE),
    C("__write", W, DFT_CLS_IO_BYTES, WRITE),
    C("__xstat", 0, 0, STAT),
    C("__xstat64", 0, 0, STAT),
    C("close", 0, 0, CLOSE),
    C("copy_file_range", R | W, DFT_CLS_IO_BYTES, XFER),
    C("creat", 0, 0, OPEN),
    C("creat64", 0, 0, OPEN),
    C("dprintf", W, DFT_CLS_IO_BYTES, DPRINTF),
    C("dup", 0, 0, DUP),
    C("dup2", 0, 0, DUP),
    C("dup3", 0, 0, DUP),
    C("fclose", 0, 0, SCLOSE),
    C("fcntl", 0, 0, FCNTL),
    C("fcntl64", 0, 0, FCNTL),
    C("fdatasync", 0, 0, FDSYNC),
    C("fdopen", 0, 0, SFDOPEN),
    C("fflush", 0, 0, SFLUSH),
    C("fgetc", R, DFT_CLS_IO_CHAR, SREAD),
    C("fgetc_unlocked", R, DFT_CLS_IO_CHAR, SREAD),
    C("fgets", R, DFT_CLS_IO_BYTES, SREAD),
    C("fgets_unlocked", R, DFT_CLS_IO_BYTES, SREAD),
    C("fopen", 0, 0, SOPEN),
    C("fopen64", 0, 0, SOPEN),
    C("fprintf", W, DFT_CLS_IO_BYTES, SWRITE),
    C("fputc", W, DFT_CLS_IO_CHAR, SWRITE),
    C("fputc_unlocked", W, DFT_CLS_IO_CHAR, SWRITE),
    C("fputs", W, DFT_CLS_IO_STRING, SWRITE),
    C("fputs_unlocked", W, DFT_CLS_IO_STRING, SWRITE),
    C("fread", R, DFT_CLS_IO_ITEMS, SREAD),
    C("fread_unlocked", R, DFT_CLS_IO_ITEMS, SREAD),
    C("fseek", 0, 0, SSEEK),
    C("fseeko", 0, 0, SSEEK),
    C("fseeko64", 0, 0, SSEEK),
    C("fstat", 0, 0, STAT),
    C("fstat64", 0, 0, STAT),
    C("fstatat", 0, 0, STAT),
    C("fstatat64", 0, 0, STAT),
    C("fsync", 0, 0, FSYNC),
    C("ftell", 0, 0, STELL),
    C("ftello", 0, 0, STELL),
    C("ftello64", 0, 0, STELL),
    C("fwrite", W, DFT_CLS_IO_ITEMS, SWRITE),
    C("fwrite_unlocked", W, DFT_CLS_IO_ITEMS, SWRITE),
    C("getc", R, DFT_CLS_IO_CHAR, SREAD),
    C("getc_unlocked", R, DFT_CLS_IO_CHAR, SREAD),
    C("getdelim", R, DFT_CLS_IO_BYTES, SREAD),
    C("getline", R, DFT_CLS_IO_BYTES, SREAD),
    C("lseek", 0, 0, SEEK),
    C("lseek64", 0, 0, SEEK),
    C("lstat", 0, 0, STAT),
    C("lstat64", 0, 0, STAT),
    C("mmap", 0, 0, MMAP),
    C("mmap64", 0, 0, MMAP),
    C("open", 0, 0, OPEN),
    C("open64", 0, 0, OPEN),
    C("openat", 0, 0, OPEN),
    C("openat64", 0, 0, OPEN),
    C("pread", R, DFT_CLS_IO_BYTES, PREAD),
    C("pread64", R, DFT_CLS_IO_BYTES, PREAD),
    C("preadv", R, DFT_CLS_IO_BYTES, PREAD),
    C("preadv2", R, DFT_CLS_IO_BYTES, PREAD),
    C("preadv64", R, DFT_CLS_IO_BYTES, PREAD),
    C("preadv64v2", R, DFT_CLS_IO_BYTES, PREAD),
    C("putc", W, DFT_CLS_IO_CHAR, SWRITE),
    C("putc_unlocked", W, DFT_CLS_IO_CHAR, SWRITE),
    C("pwrite", W, DFT_CLS_IO_BYTES, PWRITE),
    C("pwrite64", W, DFT_CLS_IO_BYTES, PWRITE),
    C("pwritev", W, DFT_CLS_IO_BYTES, PWRITE),
    C("pwritev2", W, DFT_CLS_IO_BYTES, PWRITE),
    C("pwritev64", W, DFT_CLS_IO_BYTES, PWRITE),
    C("pwritev64v2", W, DFT_CLS_IO_BYTES, PWRITE),
    C("read", R, DFT_CLS_IO_BYTES, READ),
    C("readv", R, DFT_CLS_IO_BYTES, READ),
    C("sendfile", R | W, DFT_CLS_IO_BYTES, XFER),
    C("sendfile64", R | W, DFT_CLS_IO_BYTES, XFER),
    C("splice", R | W, DFT_CLS_IO_BYTES, XFER),
    C("stat", 0, 0, STAT),
    C("stat64", 0, 0, STAT),
    C("statx", 0, 0, STAT),
    C("vdprintf", W, DFT_CLS_IO_BYTES, DPRINTF),
    C("vfprintf", W, DFT_CLS_IO_BYTES, SWRITE),
    C("write", W, DFT_CLS_IO_BYTES, WRITE),
    C("writev", W, DFT_CLS_IO_BYTES, WRITE),
};

/* The calls by name: an open-addressed table of indexes into calls, built
 * once by whichever pass thread asks first (a binary search by memcmp was a
 * tenth of a pass that classifies every line). */
#define CALL_SLOTS 512
_Static_assert(sizeof calls / sizeof *calls < CALL_SLOTS / 2, "calls outgrew their table");
static unsigned char call_slot[CALL_SLOTS]; /* index + 1; 0: empty */
static pthread_once_t call_slots_once = PTHREAD_ONCE_INIT;

/* A name's home slot from its length and three of its bytes, the top bits
 * of a multiplicative hash: a few multiplies, where a hash of every byte
 * cost more than the search (at most 5 probes for these names). */
static size_t name_slot(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    uint32_t h = (uint32_t)n * 0x9e3779b1u + (unsigned char)p[0] * 0x85ebca77u +
                 (unsigned char)p[n - 1] * 0xc2b2ae3du + (unsigned char)p[n / 2] * 0x27d4eb2fu;
    return (h * 0x9e3779b1u) >> 23; /* 9 bits: CALL_SLOTS */
}

static void build_call_slots(void)
{
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        size_t j = name_slot(calls[i].name, calls[i].len);
        while (call_slot[j])
            j = (j + 1) & (CALL_SLOTS - 1);
        call_slot[j] = (unsigned char)(i + 1);
    }
}

static int same_name(const call *c, const char *name, size_t nn)
{
    return c->len == nn && dft_bytes_eq(c->name, name, nn);
}

static const call *find(const char *cat, size_t cn, const char *name, size_t nn)
{
    if (!is(cat, cn, "POSIX") && !is(cat, cn, "STDIO"))
        return NULL;
    /* a pass meets one call name line after line: the thread's last answer
     * first */
    static _Thread_local const call *last;
    if (last && same_name(last, name, nn))
        return last;
    if (pthread_once(&call_slots_once, build_call_slots) != 0) {
        /* pthread_once fails only on a bad argument: read the table through */
        for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
            if (same_name(&calls[i], name, nn))
                return &calls[i];
        return NULL;
    }
    for (size_t j = name_slot(name, nn); call_slot[j]; j = (j + 1) & (CALL_SLOTS - 1))
        if (same_name(&calls[call_slot[j] - 1], name, nn))
            return last = &calls[call_slot[j] - 1];
    return NULL;
}

int dft_cls_io(const char *cat, size_t cn, const char *name, size_t nn)
{
    const call *c = find(cat, cn, name, nn);
    return c ? c->io : 0;
}

int dft_cls_io_op(const char *cat, size_t cn, const char *name, size_t nn)
{
    const call *c = find(cat, cn, name, nn);
    if (c)
        return c->op;
    return is(cat, cn, "STDIO") ? DFT_IO_OP_SMETA : DFT_IO_OP_META;
}
