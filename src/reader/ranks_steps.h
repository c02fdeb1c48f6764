/* reader/ranks_steps.h: what the ranks pass keeps of a file (its keys,
 * steps, sync points, last collectives, identity and clocks: dft_rk_result,
 * which reader/ranks.c fills as it reads) and the steps built from its
 * events (reader/ranks_steps.c, the code this header declares).  No GIL, no
 * Python. */
#ifndef DFT_READER_RANKS_STEPS_H
#define DFT_READER_RANKS_STEPS_H

#include <stddef.h>
#include <stdint.h>

#include "reader/identity.h"
#include "reader/classify.h"
#include "reader/ranks_hang.h"

/* The classes a step's time is split into: reader/classify.h's. */
#define DFT_RK_COMPUTE DFT_CLS_COMPUTE
#define DFT_RK_COMM DFT_CLS_COMM
#define DFT_RK_OTHER DFT_CLS_OTHER
#define DFT_RK_CLASSES DFT_CLS_N
#define DFT_RK_CLASS_NAMES DFT_CLS_NAMES

/* Sync points kept per file: the collectives with the smallest key hashes, so
 * that every rank keeps (mostly) the same ones. */
#define DFT_RK_SYNC_MAX 4096

typedef struct dft_rk_key {
    char *cat, *name; /* raw (escapes as written), NUL-terminated */
    size_t cat_len, name_len;
    int cls;
    uint64_t count;
    int64_t total, self_all, self_steps, io_bytes;
} dft_rk_key;

typedef struct dft_rk_step {
    int64_t number, ts, dur;
    int64_t by_class[DFT_RK_CLASSES]; /* self time of the events in the step */
    int32_t top_key[DFT_RK_CLASSES];  /* index into keys, -1: none */
    int64_t top_us[DFT_RK_CLASSES];
    /* the step event's `cpu_us` and `wait_us` (its thread on a CPU, and
     * runnable waiting for one: docs/trace-format.md); -1 when not given */
    int64_t cpu_us, wait_us;
} dft_rk_step;

typedef struct dft_rk_sync {
    uint64_t key; /* hash of (group, seq, name) */
    int64_t end;  /* ts + dur */
} dft_rk_sync;

/* The newest sync point of each of at most DFT_RK_LAST_MAX groups (a new
 * group takes the place of the one whose newest end is oldest; a group named
 * in DFT_RK_GROUP_MAX bytes or more is not kept): the collectives a killed
 * rank's peers completed with it last (docs/hang.md, "After the job"). */
#define DFT_RK_LAST_MAX 8
#define DFT_RK_GROUP_MAX 256

typedef struct dft_rk_last {
    char group[DFT_RK_GROUP_MAX]; /* raw (escapes as written), NUL-terminated */
    size_t group_len;
    int64_t seq, end; /* the event's seq, and its ts + dur */
} dft_rk_last;

typedef struct dft_rk_result {
    int status; /* dft_rd_status that ended the file, or -1 (out of memory) */
    char err[256];
    uint64_t members, events, long_lines, first_long_line;
    dft_rd_bad bad;
    dft_ident who; /* who wrote the file (reader/identity.c) */
    int finalized, have_ts;
    int end_signal; /* the signal its `end` names (0: none): killed after it */
    int64_t ts_min, end_max;
    const char *step_kind; /* NULL: no steps */
    dft_rk_key *keys;
    size_t nkeys;
    dft_rk_step *steps;
    size_t nsteps;
    dft_rk_sync *sync;
    size_t nsync;
    dft_rk_last last[DFT_RK_LAST_MAX];
    size_t nlast;
    uint64_t clock_pairs;
    int64_t clock_first, clock_min, clock_max; /* trace clock minus wall clock, us */
    dft_hg hang; /* what the process was inside of when last seen (not with sync_only) */
} dft_rk_result;

/* The kinds of events that can be steps, by priority: reader/classify.h's. */
#define DFT_RK_KIND_NONE DFT_STEP_NONE
#define DFT_RK_KIND_NAMED DFT_STEP_NAMED
#define DFT_RK_KIND_ARGS DFT_STEP_ARGS
#define DFT_RK_KIND_ITERATION DFT_STEP_ITERATION
#define DFT_RK_NKINDS DFT_STEP_NKINDS
#define DFT_RK_NO_STEP INT32_MIN

/* One complete event as the pass keeps it. */
typedef struct dft_rk_ev {
    int64_t ts, dur;
    int32_t key, tid; /* indices: r->keys, the file's threads */
    int32_t step;     /* args.step (DFT_RK_NO_STEP) while reading; then its step's index */
    uint8_t kind;     /* DFT_RK_KIND_* of the event when it may be a step */
} dft_rk_ev;

/* Sorts ev, builds r->steps from the events of `kind` and fills in the self
 * times (reader/ranks_steps.c).  0, or -1 when out of memory. */
int dft_rk_steps(dft_rk_result *r, dft_rk_ev *ev, size_t nev, int kind);

#endif
