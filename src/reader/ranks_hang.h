/* reader/ranks_hang.h: what a trace file says its process was inside of
 * when it was last seen (docs/hang.md, "After the job"), kept by the ranks
 * pass as it reads the file (reader/ranks_hang.c): the newest `open`
 * snapshot of each thread, the newest `stack` answer, the FH names of the
 * files those name, the newest time the process was seen alive, and
 * whether it wrote SIGTERM stacks.  Bounded whatever the file holds. */
#ifndef DFT_READER_RANKS_HANG_H
#define DFT_READER_RANKS_HANG_H

#include <stddef.h>
#include <stdint.h>

#include "reader/reader.h"

/* The caps (docs/hang.md): past them, spans, threads and files are not kept
 * (counted in dropped) and strings are cut. */
#define DFT_HG_THREADS 64          /* threads whose newest snapshot is kept */
#define DFT_HG_SPANS 16            /* spans of a snapshot (the tracer writes at most 16) */
#define DFT_HG_STACKS 64           /* threads of the newest stack answer */
#define DFT_HG_FRAMES 8192         /* bytes of a thread's frames, its innermost end */
#define DFT_HG_FILES 4096          /* FH definitions kept: the newest 2048 to 4096 */
#define DFT_HG_PATH 1024           /* bytes of a file's path */
#define DFT_HG_NAME 64             /* a span's name, category; a stack's why */
#define DFT_HG_GROUP 256           /* a collective's group; a thread's name */
#define DFT_HG_MEM_STEPS 64        /* the newest step-boundary memory samples kept */

/* dft_hg_span.have bits */
enum { DFT_HG_DEPTH = 1, DFT_HG_SINCE = 2, DFT_HG_SEQ = 4, DFT_HG_STEP = 8, DFT_HG_FHASH = 16,
       DFT_HG_GROUP_SET = 32, DFT_HG_CAT = 64, DFT_HG_BUCKET = 128 };

/* Strings are kept as written in the trace (JSON escapes included), cut at
 * their cap, NUL-terminated. */
typedef struct dft_hg_span {
    unsigned have;
    int64_t depth, since, seq, step, bucket;
    uint64_t fhash;
    char value[DFT_HG_NAME], cat[DFT_HG_NAME], group[DFT_HG_GROUP];
} dft_hg_span;

typedef struct dft_hg_thread {
    int64_t tid, at;
    size_t nspans;
    dft_hg_span spans[DFT_HG_SPANS];
} dft_hg_thread;

typedef struct dft_hg_stack {
    int64_t tid; /* -1: none given */
    char name[DFT_HG_GROUP], why[DFT_HG_NAME];
    char *frames; /* malloc'd, NUL-terminated; NULL: none */
} dft_hg_stack;

typedef struct dft_hg {
    dft_hg_thread *threads;
    size_t nthreads, threads_cap;
    dft_hg_stack stacks[DFT_HG_STACKS];
    size_t nstacks;
    int have_stack, sigterm, have_last;
    int64_t stack_at, stack_req, last_at;
    /* FH hash -> malloc'd path, in two generations: when the newer holds
     * DFT_HG_FILES / 2, the older is dropped and the newer takes its place
     * (an open I/O call's file is among the newest opened, and a process
     * that opened 100k files before it hung still names it) */
    dft_u64map files, older_files;
    size_t nfiles, nolder_files;
    uint64_t dropped; /* spans, threads, stacks, files not kept (caps, out of memory) */
    /* the `memory` counter samples (docs/trace-format.md, "Memory"): the
     * newest resident bytes, and the newest samples taken at a step's end */
    int have_rss;
    int64_t rss;
    int64_t mem_step[DFT_HG_MEM_STEPS], mem_rss[DFT_HG_MEM_STEPS];
    size_t nmem; /* samples seen at step ends; the newest DFT_HG_MEM_STEPS kept (a ring) */
} dft_hg;

/* Reads one metadata line of category dftracer (open, stack, FH) into
 * hg (zero-initialised at first).  Never fails: what does not fit or cannot
 * be allocated is counted in hg->dropped.  No GIL. */
void dft_hg_line(dft_hg *hg, const dft_line *l);

/* Reads one `memory` counter sample ("ph":"C") into hg.  No GIL. */
void dft_hg_memory(dft_hg *hg, const dft_line *l);

/* The process was seen alive at trace-clock time at (a `clock` pair's, an
 * event's end).  No GIL. */
void dft_hg_seen(dft_hg *hg, int64_t at);

/* The path of FH hash h, or NULL.  No GIL. */
const char *dft_hg_file(const dft_hg *hg, uint64_t h);

void dft_hg_free(dft_hg *hg);

#endif
