/* reader/iostats_pass.h: what the I/O pass's three files share
 * (reader/iostats.c: reading a file, its epochs and identity;
 * reader/iostats_count.c: counting each call as Darshan does;
 * reader/iostats_tables.c: its args, files, descriptors and streams).  Calls
 * go one way: iostats.c to the other two, iostats_count.c to the tables.
 * For those files alone.  No GIL, no Python. */
#ifndef DFT_READER_IOSTATS_PASS_H
#define DFT_READER_IOSTATS_PASS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reader/iostats_result.h"
#include "reader/ivset.h"
#include "reader/reader.h"

#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

/* ---- args -------------------------------------------------------------- */

enum { A_FD = 1, A_OUT_FD = 2, A_RET = 4, A_OFFSET = 8, A_OUT_OFFSET = 16, A_WHENCE = 32,
       A_CMD = 64, A_FLAGS = 128, A_EPOCH = 256, A_PPID = 512, A_VALUE = 1024,
       A_FHASH = 2048, A_OUT_FHASH = 4096, A_FILE = 8192, A_OUT_FILE = 16384, A_MODE = 32768,
       A_NUM_WORKERS = 65536 };

typedef struct io_args {
    unsigned have;
    int64_t fd, out_fd, ret, offset, out_offset, whence, cmd, flags, epoch, ppid, value,
        num_workers;
    dft_sv fhash, out_fhash, file, out_file, mode;
} io_args;

typedef struct ofd {  /* an open file description: what dup'd descriptors share */
    int64_t file;     /* index into r->files */
    int64_t pos;      /* -1: not known */
    int refs;         /* descriptors and streams on it; 0: free */
    dft_ivset seen;   /* bytes read through it (each counted once) */
} ofd;

typedef struct stream {
    int64_t ofd, pos; /* pos -1: not known */
    int used;
} stream;

typedef struct pass {
    dft_io_result *r;
    const char *epoch_from;
    size_t epoch_from_len;
    const int64_t *bounds;
    size_t nbounds;
    dft_u64map fmap;   /* file key -> index + 1 */
    size_t files_cap;
    dft_u64map paths;  /* fhash -> malloc'd "len:path" (FH lines) */
    dft_u64map fds;    /* descriptor -> ofd index + 1 */
    ofd *ofds;
    size_t nofds, ofds_cap;
    dft_u64map smap;   /* descriptor -> stream index + 1 */
    stream *streams;
    size_t nstreams, streams_cap;
    size_t marks_cap, last_mark;
    int64_t named_seen, pipeline_seen;
} pass;

/* The members of the args object of a line that parsed as an event. */
int dft_io_scan_args(const dft_line *l, io_args *a);

/* The file an event names (fhash token, or a path string): its index, -1
 * out of memory, -2 none. */
int64_t dft_io_file_of(pass *ps, const dft_sv *hash, const dft_sv *path);
/* The descriptors and streams followed (reader/iostats_tables.c). */
uint64_t dft_io_fd_key(const dft_line *l, int64_t fd);
int64_t dft_io_ofd_new(pass *ps, int64_t file, int64_t pos);
void dft_io_ofd_unref(pass *ps, int64_t o);
void dft_io_fd_drop(pass *ps, uint64_t key);
int dft_io_fd_bind(pass *ps, uint64_t key, int64_t o);
int64_t dft_io_fd_ofd(pass *ps, uint64_t key, int64_t file);
stream *dft_io_stream_of(pass *ps, uint64_t key, int create);
void dft_io_stream_drop(pass *ps, uint64_t key);

/* Counts one POSIX/STDIO event (reader/iostats_count.c); 0, or -1 out of
 * memory. */
int dft_io_event(pass *ps, const dft_line *l);

#endif
