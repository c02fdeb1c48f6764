/* core/identity.c: the `rank`, `worker` and `clock` metadata events.
 *
 * `rank`: the process's place in a distributed job, from what launchers put
 * in the environment (torchrun, SLURM, Open MPI, PMI), so that every rank's
 * trace says which rank it is without the program calling anything.  A rank
 * learnt later (torch.distributed's init_process_group in a process started
 * without RANK) comes through dft_identity_emit_rank.
 *
 * `worker`: which worker of a pool (a DataLoader's) this process is, so
 * that readers can tell worker 0 of one epoch's pool and worker 0 of the
 * next as the same worker although they are two processes.
 *
 * `clock`: a (trace clock, wall clock) pair.  The trace clock is the wall
 * clock read once at start-up, advanced by CLOCK_MONOTONIC (core/clock.h);
 * pairs taken at start, at every flush(), every DFT_CLOCK_PAIR_EVERY flush
 * intervals from the flusher and at finalize show how far NTP moved the wall
 * clock since. */
#include "core/identity.h"
#include "core/memory.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/state.h"
#include "core/writer.h"
#include "format/record.h"

/* The variables each launcher sets, in the order they are looked for: the
 * first rank variable set to a usable value names the family. */
static const struct {
    const char *rank, *local_rank, *world_size, *job_id;
} launchers[] = {
    /* torchrun, DeepSpeed, Accelerate */
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_ID"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_MCA_ess_base_jobid"},
    {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", NULL},          /* MPICH, Intel MPI */
};
#define NLAUNCHERS (sizeof launchers / sizeof *launchers)

/* Where the job id comes from when the launcher's own variable is unset. */
static const char *const job_vars[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID",
                                       "LSB_JOBID", "FLUX_JOB_ID"};

/* A non-negative integer from var, or -1 (unset, or not such a number: then
 * one warning line naming it, at most once per variable). */
static int64_t env_index(const char *var, unsigned warn_bit)
{
    static _Atomic unsigned warned;
    const char *v = var ? getenv(var) : NULL;
    if (!v || !*v)
        return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end == '\0' && x >= 0)
        return (int64_t)x;
    if (!(atomic_fetch_or(&warned, 1u << warn_bit) & (1u << warn_bit)))
        dft_warn_config("%s='%s' is not a non-negative integer; ignored for the rank metadata",
                        var, v);
    return -1;
}

/* A job id: set, and not torchrun's "none" (no rendezvous id given). */
static int usable_job(const char *v) { return v && *v && strcmp(v, "none") != 0; }

static const char *env_job_id(const char *first)
{
    const char *v = first ? getenv(first) : NULL;
    for (size_t i = 0; !usable_job(v) && i < sizeof job_vars / sizeof *job_vars; i++)
        v = getenv(job_vars[i]);
    return usable_job(v) ? v : NULL;
}

/* Fills ri from the environment; returns 1 when a rank was found. */
static int rank_from_env(dft_rank_info *ri)
{
    for (size_t i = 0; i < NLAUNCHERS; i++) {
        int64_t r = env_index(launchers[i].rank, (unsigned)(3 * i));
        if (r < 0)
            continue;
        ri->rank = r;
        ri->local_rank = env_index(launchers[i].local_rank, (unsigned)(3 * i + 1));
        ri->world_size = env_index(launchers[i].world_size, (unsigned)(3 * i + 2));
        ri->job_id = env_job_id(launchers[i].job_id);
        ri->source = launchers[i].rank;
        return 1;
    }
    return 0;
}

/* Any thread, no GIL. */
int64_t dft_identity_env_rank(void)
{
    dft_rank_info ri;
    return rank_from_env(&ri) ? ri.rank : -1;
}

/* Any thread, no GIL. */
int dft_identity_emit_rank(const dft_rank_info *ri)
{
    dft_arg args[6] = {{.key = "name", .type = DFT_ARG_STR, .v.s = {"rank", 4}},
                       {.key = "value", .type = DFT_ARG_INT, .v.i = ri->rank}};
    unsigned n = 2;
    if (ri->local_rank >= 0)
        args[n++] = (dft_arg){.key = "local_rank", .type = DFT_ARG_INT, .v.i = ri->local_rank};
    if (ri->world_size >= 0)
        args[n++] = (dft_arg){.key = "world_size", .type = DFT_ARG_INT, .v.i = ri->world_size};
    if (ri->job_id)
        args[n++] = (dft_arg){.key = "job_id", .type = DFT_ARG_STR,
                              .v.s = {ri->job_id, strlen(ri->job_id)}};
    if (ri->source)
        args[n++] = (dft_arg){.key = "source", .type = DFT_ARG_STR,
                              .v.s = {ri->source, strlen(ri->source)}};
    dft_event ev = {.name = "rank", .name_len = 4, .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .args = args, .nargs = n};
    return dft_emit_logged(&ev);
}

/* The rank learnt after start-up (torch.distributed's), kept for the
 * headers of this process's later files and of its forked children: a
 * DataLoader worker of a rank whose launcher set no RANK (Lightning's own,
 * mp.spawn) is a worker of that rank.  busy guards the copy; writers hold the
 * GIL, readers (a header) run under life_lock or single-threaded in a child. */
static struct {
    atomic_flag busy;
    int have;
    dft_rank_info ri;
    char job_id[128], source[64];
} learnt = {.busy = ATOMIC_FLAG_INIT};

static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Any thread, no GIL. */
int dft_identity_learn_rank(const dft_rank_info *ri, int emit)
{
    while (atomic_flag_test_and_set(&learnt.busy))
        ;
    learnt.ri = *ri;
    copy_text(learnt.job_id, sizeof learnt.job_id, ri->job_id);
    copy_text(learnt.source, sizeof learnt.source, ri->source);
    learnt.ri.job_id = ri->job_id ? learnt.job_id : NULL;
    learnt.ri.source = ri->source ? learnt.source : NULL;
    learnt.have = 1;
    atomic_flag_clear(&learnt.busy);
    return emit ? dft_identity_emit_rank(ri) : 0;
}

/* The learnt rank into ri (its strings: learnt's own); 1 when there is one. */
static int learnt_rank(dft_rank_info *ri)
{
    while (atomic_flag_test_and_set(&learnt.busy))
        ;
    int have = learnt.have;
    if (have)
        *ri = learnt.ri;
    atomic_flag_clear(&learnt.busy);
    return have;
}

/* Any thread, no GIL. */
int dft_identity_emit_worker(int64_t id, int64_t num_workers, int64_t loader,
                             const char *dataset, size_t dataset_len)
{
    dft_arg args[5] = {{.key = "name", .type = DFT_ARG_STR, .v.s = {"worker", 6}},
                       {.key = "value", .type = DFT_ARG_INT, .v.i = id}};
    unsigned n = 2;
    if (num_workers >= 0)
        args[n++] = (dft_arg){.key = "num_workers", .type = DFT_ARG_INT, .v.i = num_workers};
    if (loader >= 0)
        args[n++] = (dft_arg){.key = "loader", .type = DFT_ARG_INT, .v.i = loader};
    if (dataset && dataset_len)
        args[n++] = (dft_arg){.key = "dataset", .type = DFT_ARG_STR,
                              .v.s = {dataset, dataset_len}};
    dft_event ev = {.name = "worker", .name_len = 6, .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .args = args, .nargs = n};
    dft_mem_set_worker(id, num_workers); /* its batches are its steps (core/memory_counters.c) */
    return dft_emit_logged(&ev);
}

/* ---- clock pairs ------------------------------------------------------- */

static _Atomic int64_t last_pair_ns; /* trace clock of the latest pair */

/* A `clock` event in ev (args in args[4]): the trace clock and the wall
 * clock now, from the tightest of a few paired reads.  Any thread, no GIL. */
static void clock_pair(dft_event *ev, dft_arg args[4], const char *when)
{
    int64_t diff = dft_clock_minus_realtime_ns(); /* trace - wall */
    int64_t trace = dft_clock_ns();
    atomic_store(&last_pair_ns, trace);
    args[0] = (dft_arg){.key = "name", .type = DFT_ARG_STR, .v.s = {"clock", 5}};
    args[1] = (dft_arg){.key = "value", .type = DFT_ARG_INT, .v.i = trace / 1000};
    args[2] = (dft_arg){.key = "wall_us", .type = DFT_ARG_INT, .v.i = (trace - diff) / 1000};
    args[3] = (dft_arg){.key = "when", .type = DFT_ARG_STR, .v.s = {when, strlen(when)}};
    *ev = (dft_event){.name = "clock", .name_len = 5, .cat = "dftracer", .cat_len = 8,
                      .ph = DFT_PH_METADATA, .args = args, .nargs = 4};
}

static void emit_pair(const char *when)
{
    dft_event ev;
    dft_arg args[4];
    clock_pair(&ev, args, when);
    dft_emit_logged(&ev);
}

/* Lifecycle hook: on the thread that flushes or finalizes, no GIL. */
static void on_lifecycle(dft_hook_event ev)
{
    if (ev == DFT_HOOK_FLUSH)
        emit_pair("flush");
    else if (ev == DFT_HOOK_FINALIZING)
        emit_pair("end");
}

/* Under the lifecycle lock (or single-threaded in a forked child); no GIL. */
void dft_identity_emit_header(void)
{
    static int hooked;
    if (!hooked && dft_add_lifecycle_hook(on_lifecycle) == 0)
        hooked = 1;
    dft_rank_info ri;
    if (rank_from_env(&ri) || learnt_rank(&ri))
        dft_identity_emit_rank(&ri);
    emit_pair("start");
}

/* The flusher thread, no GIL. */
void dft_identity_clock_tick(void)
{
    int64_t last = atomic_load(&last_pair_ns);
    double every = DFT_CLOCK_PAIR_EVERY * dft_g.cfg.flush_interval;
    if (dft_clock_ns() - last < (int64_t)(every * 1e9))
        return;
    dft_event ev;
    dft_arg args[4];
    clock_pair(&ev, args, "tick");
    ev.tid = dft_g.real_pid;
    /* An id of its own: a block of one, as finalize takes for `end`. */
    dft_writer_write_now_shared(&ev, atomic_fetch_add(&dft_g.next_id_block, 1));
}
