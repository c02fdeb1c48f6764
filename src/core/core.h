/* core/core.h: the core as the integrations and module.c see it.
 *
 * Data flow: a traced thread appends compact binary records (format/record.h)
 * to its own buffer (core/buffer.c) without locking.  A full buffer is handed
 * to the writer queue (core/writer.c); writer threads turn records into JSON
 * lines (format/lines.c), deflate them into complete gzip members and append
 * each member with one write().  core/tracer.c starts and stops all of it.
 *
 * The core's state (core/state.h) is private to core/: what the layers above
 * need of it is here, as functions, and as static inline functions where a
 * hot path reads it (tests/test_layout.py holds that no file outside core/
 * names dft_g or dft_trace). */
#ifndef DFT_CORE_H
#define DFT_CORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/config.h"
#include "dftracer.h"

/* The version, from dftracer/_version.py (setup.py defines it). */
#ifndef DFT_VERSION
#error "DFT_VERSION is defined by setup.py from dftracer/_version.py"
#endif

/* ---- lifecycle (core/tracer.c; the hooks' table: core/state.c) ------------- */

enum { DFT_STATE_UNINIT = 0, DFT_STATE_DISABLED, DFT_STATE_ACTIVE, DFT_STATE_FINALIZED };

/* Starts tracing (explicit_init: from initialize_log; else lazily from the
 * environment).  Returns 0 when tracing, 1 when disabled, -1 with err set
 * (and errno).  Any thread, no GIL (initialize_log releases it). */
int dft_start(const char *log_file, const char *data_dir, int64_t process_id, int explicit_init,
              char *err, size_t errlen);
/* The hot path's fallback when tracing is not active: starts tracing from the
 * environment the first time (DFTRACER_ENABLE); 0 when tracing is active
 * afterwards, else 1.  Any thread, no GIL. */
int dft_lazy_start(void);
/* Writes everything buffered and the end event; later calls do nothing.
 * Any thread, no GIL. */
void dft_finalize(void);

/* Lifecycle hooks for integrations with state tied to the trace (I/O
 * interception, CUPTI), run in registration order on the thread doing the
 * transition, without the GIL:
 *   OPENED      under the lifecycle lock, right after the header is recorded
 *               and before any other thread can see tracing start;
 *   STARTED     after the lock is released (may be slow: dlopen, cuInit);
 *   FLUSH       before dft_flush() writes;
 *   FINALIZING  under the lifecycle lock before the end event, while events
 *               are still recorded;
 *   ABANDONED   under the lock, when a forked child cannot open its file;
 *   RECONFIGURED under the lock, when initialize_log takes over a trace that
 *               started by itself (its data_dir may differ).
 * Hooks called under the lock must not start or finalize tracing. */
typedef enum {
    DFT_HOOK_OPENED = 0,
    DFT_HOOK_STARTED,
    DFT_HOOK_FLUSH,
    DFT_HOOK_FINALIZING,
    DFT_HOOK_ABANDONED,
    DFT_HOOK_RECONFIGURED,
} dft_hook_event;
typedef void (*dft_lifecycle_hook)(dft_hook_event ev);
int dft_add_lifecycle_hook(dft_lifecycle_hook fn); /* 0, or -1 when the table is full */

/* ---- the trace's status: read inline on the hot paths --------------------- */

/* Written only by the lifecycle (core/tracer.c); core/state.c holds it.
 * Read it through the functions below. */
typedef struct dft_trace_status {
    _Atomic int active;   /* events are being recorded */
    _Atomic int state;    /* DFT_STATE_* */
    _Atomic uint64_t gen; /* bumped for each new trace file */
} dft_trace_status;
extern dft_trace_status dft_trace;

/* 1 while events are recorded.  One relaxed load; any thread. */
static inline int dft_trace_active(void)
{
    return atomic_load_explicit(&dft_trace.active, memory_order_relaxed);
}

/* DFT_STATE_*.  Any thread. */
static inline int dft_trace_state(void)
{
    return atomic_load_explicit(&dft_trace.state, memory_order_relaxed);
}

/* The trace file's generation: it changes whenever a new file starts (a new
 * trace, a forked child's file), so what was recorded "once per file" is
 * recorded again.  Any thread, async-signal-safe. */
static inline uint64_t dft_trace_gen(void)
{
    return atomic_load_explicit(&dft_trace.gen, memory_order_acquire);
}

/* ---- what the trace is (core/tracer.c; dft_trace_pid: core/state.c) -------- */

/* 1 when tracing is active or has just started lazily (dft_lazy_start):
 * the status read inline, then tracer.c's start, among tracer.c's calls.
 * Any thread, no GIL. */
static inline int dft_trace_ready(void)
{
    return dft_trace_active() || dft_lazy_start() == 0;
}

/* The pid written in events (initialize_log's process_id, else getpid()). */
int64_t dft_trace_pid(void);
/* The trace file: the file written (its fallback name when the configured
 * path was refused: docs/configuration.md, "The trace file"), else the
 * configured path; NULL before any trace.  Any thread. */
const char *dft_trace_path(void);
/* 1 when the current trace was started by initialize_log, not lazily. */
int dft_trace_explicit(void);
/* The settings the current (or last) trace started with.  Read-only; valid
 * until the next start. */
const dft_config *dft_trace_config(void);

/* Set once by the Python module (module.c): release_gil/restore_gil wrap the
 * writer's waits; thread_name writes the calling thread's Python name
 * (threading.current_thread().name) to buf (NUL-terminated, at most cap
 * bytes) and returns its length, 0 when the thread has none, -1 when it
 * cannot tell now (no GIL); it runs no Python code. */
void dft_set_python_hooks(void *(*release_gil)(void), void (*restore_gil)(void *),
                          int (*thread_name)(char *buf, size_t cap));

/* ---- recording (core/buffer.c, core/intern.c) ----------------------------- */

/* Nesting (level/p_idx, docs/trace-format.md).  Each thread keeps a stack of
 * open scopes; a scope reserves an id when it opens.  An event either IS a
 * scope's event (it takes the scope's id, level and parent) or happens INSIDE
 * the innermost scope (a fresh id, level + 1, p_idx = the scope's id).
 *
 * A scope opened with a token (dft_scope_open: decorators, `with` blocks,
 * loops, torch spans) is owned: only the event recorded with that token takes
 * its id, whatever else is recorded first, so a call's event is the parent of
 * everything recorded during the call.  A scope opened without one
 * (dft_enter_scope: enter_event, the C API) is taken by the first event the
 * program logs while it is innermost (dft_emit_logged). */
typedef struct dft_scope_tok {
    struct dft_tstate *ts; /* NULL: no scope opened */
    int depth;             /* its place when opened (scopes below may close first) */
    int64_t id;            /* its id: tells it from a later scope at that place */
} dft_scope_tok;

/* Opens an owned scope on the calling thread; tracing must be active.  t
 * stays empty when none could be opened (out of memory).  Any thread, no GIL. */
void dft_scope_open(dft_scope_tok *t);
/* Closes t's scope if it is open on the calling thread (wherever it is in
 * the stack: scopes opened after it stay open), and empties t.  Any thread,
 * no GIL. */
void dft_scope_close(dft_scope_tok *t);
/* dft_scope_close for a scope opened on this thread in the same C call. */
void dft_scope_close_here(dft_scope_tok *t);

/* Records ev on the calling thread for callers that know tracing is active
 * (dft_trace_ready): as own's event when own is open on this thread and no
 * event took it yet, else (own NULL or closed) inside the innermost scope.
 * 0, or -1 when it could not be recorded.  Any thread, no GIL. */
int dft_emit_record(const dft_event *ev, const dft_scope_tok *own);
/* dft_emit_record (inside the innermost scope) for an event that belongs to
 * the trace file of generation gen (dft_trace_gen() when it began: its
 * hashes were defined there); not recorded (1) when another file has started
 * since.  Any thread, no GIL. */
int dft_emit_record_in(const dft_event *ev, uint64_t gen);
/* Records an event the program logged (log_event, dft_emit): it takes the
 * innermost scope when that scope has no owner and no event yet, else it is
 * recorded inside it.  Any thread, no GIL. */
int dft_emit_logged(const dft_event *ev);

static inline int dft_scope_opened(const dft_scope_tok *t) { return t->ts != 0; }

/* Open spans (core/open_spans.c; docs/trace-format.md, "Open spans"): what
 * a thread is inside of, for the flusher to write while it stays there. */
typedef struct dft_open_desc {
    const char *name;
    size_t name_len; /* kept: 47 bytes */
    const char *cat;
    size_t cat_len;  /* kept: 15 bytes */
    const char *group; /* a collective's group, or NULL */
    size_t group_len;  /* kept: 63 bytes */
    int64_t ts;      /* its start (dft_clock_us) */
    int64_t seq;     /* a collective's seq, or -1 */
    uint64_t fhash;  /* an I/O call's file (defined in the current file), or 0 */
} dft_open_desc;
/* Marks a span open on the calling thread; returns the token that closes
 * it (0 or -1: not kept).  Tracing must be active.  The owner thread, no GIL. */
int64_t dft_open_begin(const dft_open_desc *d);
/* Marks tok's span closed; a token of another thread is ignored.  No GIL. */
void dft_open_end(int64_t tok);
/* The same for an I/O call, cheaper: name and cat must be literals (kept by
 * pointer), and I/O calls never nest.  Returns what dft_open_io_end takes
 * (NULL: not kept).  The owner thread, no GIL. */
void *dft_open_io_begin(const char *name, size_t name_len, const char *cat, size_t cat_len,
                        int64_t ts, uint64_t fhash);
void dft_open_io_end(void *h);

/* In-flight collectives (core/inflight.c): one launched by the calling
 * thread and completed by whichever thread completes its work; shown among
 * the launching thread's open spans until then.  d as for dft_open_begin
 * (fhash unused); bucket: a DDP bucket's index, or -1.  Returns the token
 * that ends it (0: not kept: tracing off, or the table full).  Any thread,
 * no GIL. */
int64_t dft_inflight_begin(const dft_open_desc *d, int64_t bucket);
/* Ends tok's collective; a token already ended (or 0) is ignored.  Any
 * thread, no GIL. */
void dft_inflight_end(int64_t tok);
/* Collectives not shown because the table was full.  Any thread, no GIL. */
int64_t dft_inflight_missed(void);

/* Stacks on request (core/stacks.c): the dumper the stacks integration
 * sets, which the flusher calls with why ("request" or "SIGTERM") and the
 * request's number.  No GIL. */
void dft_set_stack_dumper(void (*dump)(const char *why, unsigned req));
/* Windows (torch/windows.c, docs/windows.md) through the same request file:
 * capture(steps) when a request's first line is "capture[ STEPS]" (steps
 * 0: the default), instead of the stacks; watch(now) at each flusher wake
 * (the stall check: a few loads when nothing fires), returning 1 when the
 * stacks should be written now too (why "stall").  The flusher, no GIL. */
void dft_set_window_hooks(void (*capture)(int steps), int (*watch)(int64_t now_us));
/* The handler now installed for sig (SIGTERM or SIGHUP) ends the process
 * when it runs, as torch's DataLoader worker handler does with _exit(): the
 * tracer's handler, bound again over it when needed, finalizes the trace
 * before chaining to it (core/signals.c).  0, or -1 for a signal the tracer
 * does not handle.  GIL held. */
int dft_signals_handler_ends_process(int sig);

/* ---- the tracer's helper threads at fork() (core/park.c) ------------------ */

/* A thread of the tracer's own that must be absent at every fork(), so that
 * CPython (3.12+) counts the threads the program has untraced.  park.c's
 * table holds the flusher and the writers; other helpers register (the
 * stack sampler, hang/sampler.c; MemoryTracker's watcher, memory_watch.c).
 *   stop    before fork(), on the forking thread (GIL held, never released;
 *           SIGTERM held): ends the thread (it may still be exiting) and
 *           writes its kernel id to tids (at most cap); returns how many.
 *           It may keep a lock of its own held through the fork.
 *   parent  right after fork() in the parent (may be NULL): releases what
 *           stop held; starts nothing (the interpreter has not counted yet).
 *   child   right after fork() in the child, single-threaded (may be NULL):
 *           the helper's state as the child starts it (no thread of the
 *           parent's runs there).
 *   resume  later in the parent, under the lifecycle lock, once the count
 *           is done: starts the thread again if it has work.  Idempotent.
 * None of them may start or finalize tracing. */
typedef struct dft_helper_thread {
    const char *name;
    int (*stop)(pid_t *tids, int cap);
    void (*parent)(void);
    void (*child)(void);
    void (*resume)(void);
} dft_helper_thread;
/* Adds h (static storage) to the table, once.  0, or -1 when the table is
 * full (with one error line).  Any thread. */
int dft_park_register(const dft_helper_thread *h);
/* In the parent once the interpreter has counted threads for its fork
 * warning (module.c: os.fork()'s after_in_parent hook, or os.fork()'s
 * return on 3.13, which counts after the hooks): starts the parked helpers
 * at once, so a parent that forks and then blocks still flushes, answers
 * stacks requests and samples its open MemoryTracker blocks.  The forking
 * thread, GIL held. */
void dft_threads_resume_after_fork(void);
/* Writes one event (its tid set) straight to the file, with an id of its
 * own: the flusher's `open` and `stack` events.  The flusher, no GIL. */
void dft_write_meta_now(const dft_event *ev);
/* The name the tracer knows for thread *tid into buf (its registry,
 * core/buffer.c); 0 when none.  With
 * *tid <= 0 (CPython 3.10 keeps no tid) the thread is found by its ident
 * (pthread_self()) and *tid set. */
int dft_thread_name(int64_t *tid, unsigned long ident, char *buf, size_t cap);

/* Names the lane (pid, tid) (a GPU stream, a device) with a thread_name
 * event the first time it appears in the current trace file, and, when
 * process_name is not NULL and pid is new in the file too, names pid with a
 * process_name event.  Returns 1 when it wrote the names now.  Any thread,
 * no GIL. */
int dft_name_lane_once(int64_t pid, int64_t tid, const char *thread_name,
                       const char *process_name);

/* Who this process is in a distributed job (core/identity.c). */
typedef struct dft_rank_info {
    int64_t rank, local_rank, world_size; /* -1: unknown */
    const char *job_id;                   /* NULL: unknown */
    const char *source;                   /* where the rank came from */
} dft_rank_info;

/* A `rank` event for a rank learnt later (torch.distributed's
 * init_process_group).  Returns dft_emit's result.  Any thread, no GIL. */
int dft_identity_emit_rank(const dft_rank_info *ri);
/* The same, remembered (with emit 0: only remembered, no trace yet): the
 * headers of this process's later files and of its forked children (its
 * DataLoader workers) name that rank too, when the launcher's environment
 * names none.  Any thread, no GIL. */
int dft_identity_learn_rank(const dft_rank_info *ri, int emit);

/* The rank the launcher's environment gives (RANK, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, PMI_RANK, first found), or -1.  Any thread, no GIL. */
int64_t dft_identity_env_rank(void);

/* A `worker` event: this process is worker `id` of `num_workers` (-1:
 * unknown) of a pool such as a DataLoader's, the loader its parent numbered
 * `loader` (-1: unknown) over a dataset of class `dataset` (NULL: unknown).
 * Returns dft_emit's result.  Any thread, no GIL. */
int dft_identity_emit_worker(int64_t id, int64_t num_workers, int64_t loader,
                             const char *dataset, size_t dataset_len);

/* Memory (core/memory_read.c, memory_counters.c, memory_watch.c;
 * docs/memory.md): the process's resident memory and its limit read from
 * /proc and the cgroup files, the `memory` counter samples, and the peak
 * sampler of MemoryTracker. */
/* Resident bytes of this process (/proc/self/statm, field 2): one pread on
 * a descriptor kept open (reopened in a forked child), no allocation.
 * -1 when it cannot be read.  Any thread, no GIL. */
int64_t dft_mem_rss(void);

/* The kernel's high-water mark of resident bytes (VmHWM in
 * /proc/self/status), -1 when unknown.  Any thread, no GIL. */
int64_t dft_mem_hwm(void);

/* The memory limit of this process's cgroup (v2 memory.max, else v1
 * memory.limit_in_bytes), 0 when none applies, -1 when unknown; *source is
 * set to "cgroup2", "cgroup1" or "". Any thread, no GIL. */
int64_t dft_mem_limit(const char **source);

/* A step boundary: a counter sample with `step` = step when the resident
 * memory moved since the last one written (or every tenth step).  The
 * calling (traced) thread, GIL or not. */
void dft_mem_step(int64_t step);

/* A step boundary's CUDA allocator figures of device (`cuda<d>_allocated_bytes`,
 * `_reserved_bytes`, `_peak_allocated_bytes`, `_peak_reserved_bytes` in
 * that order in fig), as a `memory` counter sample with `step`; written at
 * every step (torch/memory_py.c reads them).  The stepping thread, GIL held. */
void dft_mem_cuda_step(int64_t step, int64_t device, const int64_t fig[4]);

/* Whether the memory counters are on (DFTRACER_MEMORY).  Any thread. */
int dft_mem_counters_on(void);

/* Peak sampling for MemoryTracker (core/memory_watch.c): one open block,
 * in the caller's storage (zeroed before its first begin), as many as the
 * program opens, nested or overlapping, in any thread.  begin links it and
 * reads the resident bytes; the watcher thread raises its peak every
 * DFT_MEM_WATCH_US until end, which unlinks it and returns the peak seen (at
 * least the resident bytes at end).  end is harmless on a block already
 * ended (it returns the larger of its peak and the bytes now).  Any thread,
 * no GIL. */
#define DFT_MEM_WATCH_US 2000
typedef struct dft_mem_watch {
    struct dft_mem_watch *prev, *next; /* the open blocks (memory_watch.c's lock) */
    int64_t peak;
    uint64_t epoch; /* the process that linked it (a forked child's blocks are its own) */
    int open;
} dft_mem_watch;
void dft_mem_watch_begin(dft_mem_watch *b);
int64_t dft_mem_watch_end(dft_mem_watch *b);

/* In a DataLoader worker (core/identity.c tells it so with the `worker`
 * event): at the end of each batch its fetcher read, a sample whose `step`
 * is the loader's index of that batch, k x num_workers + id for the
 * worker's k-th batch (torch hands batches to its workers in turn); nothing
 * in other processes.  The fetching thread, GIL held. */
void dft_mem_batch(void);

#ifdef DFT_TESTING
/* ---- test hooks: only in the test extension (src/testing/) ------------------ */

/* Microseconds a thread sleeps between handing a full buffer off and queuing
 * it, to make that window wide (core/buffer.c). */
extern _Atomic int dft_test_handoff_delay_us;

/* Microseconds the writer sleeps after finding that the program closed the
 * trace file's descriptor, before opening the file again: the window in which
 * other threads hand chunks to the writer (core/writer_file.c). */
extern _Atomic int dft_test_reclaim_delay_us;
#endif

#endif
