/* reader/identity.h: who wrote a trace file, as the passes read it
 * (reader/identity.c): host, process name, pid, ppid, and the rank rule of
 * docs/trace-format.md ("Rank", "Workers").  One reading for the ranks pass
 * (reader/ranks.c) and the I/O pass (reader/iostats.c); reader/pyreader.c
 * gives it to Python (dft_ident_add_to). */
#ifndef DFT_READER_IDENTITY_H
#define DFT_READER_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "reader/reader.h"

typedef struct dft_ident {
    char host[256], process_name[512], job_id[256], rank_source[64];
    int64_t pid, ppid, rank, local_rank, world_size; /* -1: unknown */
    int64_t worker, num_workers; /* the `worker` metadata event's; -1: unknown */
    int64_t loader;              /* its `loader`: the parent's loader number; -1: unknown */
    char dataset[128];           /* its `dataset` class name ("": unknown) */
    int have_pid;
} dft_ident;

/* Everything unknown.  Pure; no GIL. */
void dft_ident_init(dft_ident *id);

/* Reads what the parsed line l says of the file's
 * identity: the first pid of any event, the HH, process_name, rank (or
 * CM rank) and worker metadata events, the start event's ppid.  Returns 1
 * when l was a metadata event (nothing else to read in it), else 0.  Pure;
 * no GIL. */
int dft_ident_line(dft_ident *id, const dft_line *l);

/* dst (cap bytes) holds v's bytes, cut to cap - 1, NUL-terminated.  Pure. */
void dft_copy_sv(char *dst, size_t cap, dft_sv v);

#endif
