/* reader/identity.h: who wrote a trace file, as the passes read it
 * (reader/identity.c): host, process name, pid, ppid, and the rank rule of
 * docs/trace-format.md ("Rank", "Workers").  One reading for every pass
 * (summary, ranks, I/O, memory, validate's parent walk, the stacks tail);
 * reader/pyreader.c gives it to Python (dft_ident_add_to, with "own_rank":
 * the rule's rank). */
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
    int64_t name_rank;           /* the last process_name's rank, read whole; -1: none */
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

/* The rank of a process_name (docs/trace-format.md "Rank"): the name is
 * `rank <N>` or ends in ` rank <N>`, as the tracer writes `<exec> rank <N>`,
 * N at most INT32_MAX; -1 when it has none.  Pure; no GIL. */
int64_t dft_rank_of_process_name(dft_sv name);

/* The file's rank by the rule: the last valid rank event's, else its
 * process_name's; -1 when neither names one.  Pure; no GIL. */
int64_t dft_ident_own_rank(const dft_ident *id);

/* dst (cap bytes) holds v's bytes, cut to cap - 1, NUL-terminated.  Pure. */
void dft_copy_sv(char *dst, size_t cap, dft_sv v);

#endif
