/* reader/iostats_result.h: what the I/O pass keeps of a file (its counters
 * per process and file, its epochs' reads, its marks: dft_io_result), the
 * types reader/iostats.c fills and the pass's other files count into; types
 * only, no code (reader/iostats.h declares the pass, iostats_pass.h its
 * parts).  No GIL, no Python. */
#ifndef DFT_READER_IOSTATS_RESULT_H
#define DFT_READER_IOSTATS_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "reader/identity.h"
#include "reader/ivset.h"

/* The counters kept per (process, file): Darshan's POSIX_* and STDIO_* (same
 * names, same meanings: docs/cli.md, "I/O"), times in microseconds, then
 * dftracer's own (IO_X_*).  DFT_IO_COUNTER_NAMES spells them in this order. */
#define DFT_IO_BUCKETS 10
enum {
    IO_POSIX_OPENS, IO_POSIX_READS, IO_POSIX_WRITES, IO_POSIX_SEEKS, IO_POSIX_STATS,
    IO_POSIX_MMAPS, IO_POSIX_FSYNCS, IO_POSIX_FDSYNCS, IO_POSIX_DUPS, IO_POSIX_BYTES_READ,
    IO_POSIX_BYTES_WRITTEN, IO_POSIX_MAX_BYTE_READ, IO_POSIX_MAX_BYTE_WRITTEN,
    IO_POSIX_CONSEC_READS, IO_POSIX_CONSEC_WRITES, IO_POSIX_SEQ_READS, IO_POSIX_SEQ_WRITES,
    IO_POSIX_RW_SWITCHES,
    IO_POSIX_SIZE_READ_0, /* ... 10 buckets */
    IO_POSIX_SIZE_WRITE_0 = IO_POSIX_SIZE_READ_0 + DFT_IO_BUCKETS,
    IO_POSIX_F_READ_TIME = IO_POSIX_SIZE_WRITE_0 + DFT_IO_BUCKETS,
    IO_POSIX_F_WRITE_TIME, IO_POSIX_F_META_TIME,
    IO_STDIO_OPENS, IO_STDIO_FDOPENS, IO_STDIO_READS, IO_STDIO_WRITES, IO_STDIO_SEEKS,
    IO_STDIO_FLUSHES, IO_STDIO_BYTES_READ, IO_STDIO_BYTES_WRITTEN, IO_STDIO_MAX_BYTE_READ,
    IO_STDIO_MAX_BYTE_WRITTEN, IO_STDIO_F_READ_TIME, IO_STDIO_F_WRITE_TIME,
    IO_STDIO_F_META_TIME,
    IO_X_META_OPS,      /* calls that move no data (open, stat, seek, close, mmap, ...) */
    IO_X_BYTES_READ,    /* bytes read, each byte once per open (see iostats.c) */
    IO_X_BYTES_WRITTEN, /* bytes written (POSIX and STDIO) */
    IO_X_UNPLACED_READS, /* reads whose file offset is not known */
    IO_X_SIZE_READ_0,   /* reads of both families by size: 10 buckets */
    IO_X_SIZE_WRITE_0 = IO_X_SIZE_READ_0 + DFT_IO_BUCKETS,
    IO_NCOUNTERS = IO_X_SIZE_WRITE_0 + DFT_IO_BUCKETS,
};

/* One epoch's reads of one file by one process. */
typedef struct dft_io_slot {
    int64_t epoch;  /* INT64_MIN: not split by epoch (no boundaries given) */
    int64_t bytes;  /* bytes read (once per open) */
    int64_t unplaced; /* of which at an unknown offset (not in iv) */
    dft_ivset iv;   /* the byte ranges read */
} dft_io_slot;

typedef struct dft_io_file {
    uint64_t key;   /* fhash, or a hash of the path string */
    char *path;     /* NULL until its FH line is seen */
    size_t path_len;
    int64_t c[IO_NCOUNTERS];
    /* Darshan's per-file state */
    int64_t last_byte_read, last_byte_written, s_last_byte_read, s_last_byte_written;
    int last_io; /* 1 read, 2 write */
    int64_t last_end[6]; /* no-overlap timers: POSIX read, write, meta, STDIO ... */
    dft_io_slot *slots;
    size_t nslots;
} dft_io_file;

/* The marks epochs are taken from (docs/cli.md, "I/O", per epoch). */
enum { DFT_IO_MARK_NAMED, DFT_IO_MARK_ITERATION, DFT_IO_MARK_PIPELINE, DFT_IO_MARK_LOADER,
       DFT_IO_MARK_KINDS };

typedef struct dft_io_mark {
    int kind;
    int64_t epoch, ts; /* the epoch's first event start */
} dft_io_mark;

typedef struct dft_io_result {
    int status; /* dft_rd_status that ended the file, or -1 (out of memory) */
    char err[256];
    uint64_t members, events, io_events, long_lines;
    dft_rd_bad bad;
    dft_ident who; /* who wrote the file (reader/identity.c) */
    int64_t read_ts_min, read_ts_max; /* of the reads (read_ts_min > max: none) */
    dft_io_file *files;
    size_t nfiles;
    dft_io_mark *marks;
    size_t nmarks;
} dft_io_result;

#endif
