/* core/memory_counters.c: the `memory` counter events (docs/trace-format.md,
 * "Memory"): the flusher samples the resident memory of the process at each
 * tick, the step boundaries of the zero-code torch hooks sample it once per
 * step, and the first of either in a file writes the memory limit that applies.
 * A sample is written only when the resident memory moved by DFT_MEM_MOVE
 * since the last one, or after ten unchanged ones, so a flat process writes
 * little; nothing here runs per event. */
#include "core/memory.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/core.h"

/* The samples' category: `sys`, the one dftracer-utils (and so DFAnalyzer)
 * keeps for system counters, apart from the pre-aggregated I/O profiles
 * that every other counter category is counted as (docs/trace-format.md,
 * "What other readers make of these records"). Perfetto draws a counter
 * track whatever the category. */
#define DFT_MEM_CAT "sys"
#define DFT_MEM_MOVE (64 * 1024)
#define DFT_MEM_QUIET 10 /* unchanged samples before one is written anyway */

/* The last sample written by one writer (the flusher's, the steps'); each
 * is only touched by its thread (the steps': by the thread holding the GIL
 * while it steps), atomics only for a forked child's view. */
typedef struct mem_last {
    _Atomic int64_t rss;
    _Atomic uint64_t gen;
    _Atomic int quiet;
} mem_last;
static mem_last ticks = {.rss = -1}, steps = {.rss = -1};
static _Atomic uint64_t limit_gen;

/* 1 when rss should be written (and marks it written). */
static int moved(int64_t rss, mem_last *l)
{
    uint64_t gen = dft_trace_gen();
    int64_t last = atomic_load(&l->rss);
    int64_t d = rss - last;
    if (atomic_load(&l->gen) == gen && last >= 0 && d < DFT_MEM_MOVE && d > -DFT_MEM_MOVE &&
        atomic_fetch_add(&l->quiet, 1) + 1 < DFT_MEM_QUIET)
        return 0;
    atomic_store(&l->quiet, 0);
    atomic_store(&l->rss, rss);
    atomic_store(&l->gen, gen);
    return 1;
}

/* The `memory` metadata event, once per file: the limit (0: none) and where
 * it came from; now: straight to the file (the flusher), else through the
 * calling thread's buffer.  No GIL needed. */
static void write_limit(int now)
{
    uint64_t gen = dft_trace_gen();
    if (atomic_exchange(&limit_gen, gen) == gen)
        return;
    const char *source;
    int64_t limit = dft_mem_limit(&source);
    size_t slen = 0;
    while (source[slen])
        slen++;
    dft_arg a[4] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {"memory", 6}},
        {.key = "value", .type = DFT_ARG_STR, .v.s = {"limit", 5}},
        {.key = "limit_bytes", .type = DFT_ARG_INT, .v.i = limit},
        {.key = "source", .type = DFT_ARG_STR, .v.s = {source, slen}},
    };
    dft_event ev = {.name = "memory", .name_len = 6, .cat = "dftracer", .cat_len = 8,
                    .ph = 'M', .tid = dft_trace_pid(), .args = a, .nargs = 4};
    if (now)
        dft_write_meta_now(&ev);
    else
        dft_emit_logged(&ev);
}

/* DFTRACER_MEMORY, a boolean by the core's one rule (on by default; a value
 * that is not a boolean is on, with one warning line); read once.  Any
 * thread (two first readers read the same). */
static int counters_on(void)
{
    static _Atomic int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        v = dft_config_flag("DFTRACER_MEMORY", 1);
        atomic_store(&on, v);
    }
    return v;
}

/* A `memory` counter sample of these values, taken now; no GIL needed. */
static dft_event sample_event(const dft_arg *a, unsigned nargs)
{
    return (dft_event){.name = "memory", .name_len = 6, .cat = DFT_MEM_CAT,
                       .cat_len = sizeof DFT_MEM_CAT - 1, .ts = dft_clock_us(),
                       .ph = DFT_PH_COUNTER, .flags = DFT_EV_NO_NESTING, .tid = dft_trace_pid(),
                       .args = a, .nargs = nargs};
}

/* The flusher thread, no GIL. */
void dft_mem_tick(void)
{
    if (!counters_on())
        return;
    write_limit(1);
    int64_t rss = dft_mem_rss();
    if (rss < 0 || !moved(rss, &ticks))
        return;
    dft_arg a = {.key = "rss_bytes", .type = DFT_ARG_INT, .v.i = rss};
    dft_event ev = sample_event(&a, 1);
    dft_write_meta_now(&ev);
}

/* The stepping thread, GIL or not. */
void dft_mem_step(int64_t step)
{
    if (!dft_trace_active() || !counters_on())
        return;
    write_limit(0);
    int64_t rss = dft_mem_rss();
    if (rss < 0 || !moved(rss, &steps))
        return;
    dft_arg a[2] = {{.key = "rss_bytes", .type = DFT_ARG_INT, .v.i = rss},
                    {.key = "step", .type = DFT_ARG_INT, .v.i = step}};
    dft_event ev = sample_event(a, 2);
    dft_emit_logged(&ev);
}

/* The stepping thread, GIL held (its figures come from torch). */
void dft_mem_cuda_step(int64_t step, int64_t device, const int64_t fig[4])
{
    if (!dft_trace_active() || !counters_on() || device < 0 || device > 99)
        return;
    char keys[4][40];
    static const char *const what[4] = {"allocated", "reserved", "peak_allocated",
                                        "peak_reserved"};
    dft_arg a[5];
    for (int i = 0; i < 4; i++) {
        int n = snprintf(keys[i], sizeof keys[i], "cuda%d_%s_bytes", (int)device, what[i]);
        if (n < 0 || (size_t)n >= sizeof keys[i])
            return;
        a[i] = (dft_arg){.key = keys[i], .key_len = (size_t)n, .type = DFT_ARG_INT, .v.i = fig[i]};
    }
    a[4] = (dft_arg){.key = "step", .type = DFT_ARG_INT, .v.i = step};
    dft_event ev = sample_event(a, 5);
    dft_emit_logged(&ev);
}

int dft_mem_counters_on(void) { return counters_on(); }

/* This process as a DataLoader worker, and its batches in the current file:
 * atomics, as any thread may call (a worker fetches on one thread; the
 * numbering of two at once is then theirs to share). */
static _Atomic int64_t worker_id = -1, worker_count = 1;
static _Atomic uint64_t batch_gen;
static _Atomic int64_t batches;

/* Any thread, no GIL. */
void dft_mem_set_worker(int64_t id, int64_t num_workers)
{
    int64_t me = id >= 0 ? id : 0;
    atomic_store(&worker_count, num_workers > me ? num_workers : 1);
    atomic_store(&worker_id, me);
}

/* The fetching thread, any thread, no GIL. */
void dft_mem_batch(void)
{
    int64_t me = atomic_load(&worker_id);
    if (me < 0)
        return;
    uint64_t gen = dft_trace_gen();
    uint64_t seen = atomic_load(&batch_gen);
    if (gen != seen && atomic_compare_exchange_strong(&batch_gen, &seen, gen))
        atomic_store(&batches, 0); /* a new file: a forked child counts its own */
    dft_mem_step(atomic_fetch_add(&batches, 1) * atomic_load(&worker_count) + me);
}
