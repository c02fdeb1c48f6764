/* reader/classify.h: what an event is, by its (cat, name): the one
 * definition of the event classes, step kinds and I/O direction that every
 * reader uses (`summary --ranks`, `top`, `report`; docs/cli.md, "Event
 * classes").  reader/classify.c; its Python face is _core._classify. */
#ifndef DFT_READER_CLASSIFY_H
#define DFT_READER_CLASSIFY_H

#include <stddef.h>

/* The classes a rank's time is split into (docs/cli.md, "Event classes"). */
enum { DFT_CLS_COMPUTE, DFT_CLS_DATA, DFT_CLS_IO, DFT_CLS_COMM, DFT_CLS_CHECKPOINT,
       DFT_CLS_OTHER, DFT_CLS_N };
#define DFT_CLS_NAMES {"compute", "data", "io", "comm", "checkpoint", "other"}

/* Flags of dft_cls_flags. */
enum {
    DFT_CLS_CONTAINER = 1, /* spans other events (a step, a loop body): time inside it is
                              its children's; its own self time is `other` */
    DFT_CLS_TRACER = 2,    /* the tracer's own start/end: no class at all */
};

/* The kinds of events that are steps, by priority (lowest first); NAMED
 * (--step) is decided by the caller. */
enum { DFT_STEP_NONE, DFT_STEP_NAMED, DFT_STEP_ITERATION, DFT_STEP_PROFILER, DFT_STEP_TRAIN,
       DFT_STEP_ARGS, DFT_STEP_NKINDS };
#define DFT_STEP_NAMES {NULL, "named", "iteration", "profiler", "train", "args"}

/* How a POSIX/STDIO call's `ret` counts the data it moved, and its direction. */
enum { DFT_CLS_IO_READ = 1, DFT_CLS_IO_WRITE = 2, /* direction (both: sendfile, splice...) */
       DFT_CLS_IO_BYTES = 4, DFT_CLS_IO_ITEMS = 8, /* fread/fwrite: items of `size` bytes */
       DFT_CLS_IO_CHAR = 16,                   /* fgetc/fputc: one character */
       DFT_CLS_IO_STRING = 32 };               /* fputs: the string's length, in `count` */

/* The class of (cat, name) and its DFT_CLS_* flags in *flags (may be NULL).
 * Pure; runs without the GIL. */
int dft_cls_class(const char *cat, size_t cat_n, const char *name, size_t name_n, int *flags);

/* DFT_STEP_ITERATION, _PROFILER or _TRAIN when (cat, name) is a step event,
 * else DFT_STEP_NONE.  Pure; no GIL. */
int dft_cls_step_kind(const char *cat, size_t cat_n, const char *name, size_t name_n);

/* DFT_IO_* of a POSIX/STDIO call that moves file data; 0 for any other event.
 * Pure; no GIL. */
int dft_cls_io(const char *cat, size_t cat_n, const char *name, size_t name_n);

/* The Darshan counter a POSIX (OP_*) or STDIO (OP_S*) call feeds in the I/O
 * pass (reader/iostats_count.c); META/SMETA: plain metadata of its family. */
enum {
    DFT_IO_OP_META, DFT_IO_OP_OPEN, DFT_IO_OP_CLOSE, DFT_IO_OP_DUP, DFT_IO_OP_FCNTL,
    DFT_IO_OP_READ, DFT_IO_OP_PREAD, DFT_IO_OP_WRITE, DFT_IO_OP_PWRITE, DFT_IO_OP_XFER,
    DFT_IO_OP_SEEK, DFT_IO_OP_FSYNC, DFT_IO_OP_FDSYNC, DFT_IO_OP_STAT, DFT_IO_OP_MMAP,
    DFT_IO_OP_SMETA, DFT_IO_OP_SOPEN, DFT_IO_OP_SFDOPEN, DFT_IO_OP_SCLOSE, DFT_IO_OP_SFLUSH,
    DFT_IO_OP_STELL, DFT_IO_OP_SSEEK, DFT_IO_OP_SREAD, DFT_IO_OP_SWRITE, DFT_IO_OP_DPRINTF,
};

/* DFT_IO_OP_* of a POSIX/STDIO call (META for another POSIX call or event,
 * SMETA for another STDIO call).  Pure; no GIL. */
int dft_cls_io_op(const char *cat, size_t cat_n, const char *name, size_t name_n);

#endif
