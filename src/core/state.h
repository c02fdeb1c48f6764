/* core/state.h: the tracer's global state and the per-thread buffers it
 * keeps, shared by the buffer, the writer and the lifecycle (core/state.c
 * holds the one instance).  Private to core/: the layers above see the
 * core through core/core.h. */
#ifndef DFT_CORE_STATE_H
#define DFT_CORE_STATE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/core.h"
#include "format/record.h"

typedef struct dft_chunk {
    struct dft_chunk *next;
    char *data;
    size_t cap;
    size_t limit;      /* records reaching this far are handed off: the write buffer size, at most cap - DFT_REC_MAX */
    size_t start, end; /* the records to write: data[start, end) */
    uint64_t gen;      /* file generation the records belong to */
} dft_chunk;

/* One open nesting scope.  Its event's place is fixed when it opens: the
 * id reserved for it, and the level and parent of the scope it opened in, so
 * an event and the events nested in it always agree (level = parent's + 1)
 * even when scopes close out of order. */
typedef struct dft_scope {
    int64_t id;     /* reserved for the scope's own event */
    int64_t parent; /* the enclosing scope's id when it opened, or -1 */
    int32_t level;  /* its event's level: the enclosing scope's + 1 */
    uint8_t owned;  /* opened with a token: only the owner's event takes id */
    uint8_t taken;  /* an event took id */
} dft_scope;

/* One span open on a thread, as the flusher reads it (core/open_spans.c):
 * written by the owning thread under a sequence lock (seq odd while it
 * writes), copied by the flusher without a lock.  Strings are copied in,
 * cut at their size. */
#define DFT_OPEN_MAX 16
typedef struct dft_open_span {
    _Atomic uint32_t seq;
    uint32_t serial;   /* tells this span from a later one in the slot; 0: closed */
    int64_t ts;        /* its start (tracer clock, us) */
    int64_t seq_arg;   /* a collective's seq, or -1 */
    uint64_t fhash;    /* the file of an I/O call, or 0 */
    uint64_t gen;      /* the trace file fhash is defined in */
    int64_t bucket;    /* an in-flight DDP bucket's index, or -1 (core/inflight.c) */
    uint8_t inflight;  /* 1: launched by the thread, completing on another */
    uint8_t name_len, cat_len, group_len;
    char name[48], cat[16], group[64];
} dft_open_span;

/* The thread's I/O call in progress (core/open_spans.c): I/O calls never
 * nest, and their names are literals, so one slot of pointers suffices. */
typedef struct dft_open_io {
    _Atomic uint32_t seq; /* odd while written; the call is open while active */
    int active;
    const char *name, *cat; /* literals: readable by any thread at any time */
    size_t name_len, cat_len;
    int64_t ts;
    uint64_t fhash, gen;
} dft_open_io;

typedef struct dft_tstate {
    dft_chunk *cur;        /* owned by the thread; replaced under lock */
    _Atomic size_t pos;    /* end of committed records (release by owner) */
    size_t flushed;        /* start of records not yet handed off; under lock */
    pthread_mutex_t lock;  /* slow path only: hand-off and snapshots */
    int64_t tid;
    unsigned long ident;   /* pthread_self(): Python's thread ident (a stack's
                            * thread found by it where CPython keeps no tid) */
    uint64_t gen;          /* file generation this thread announced itself to */
    int name_final;        /* the thread_name written is the Python thread's */
    char name[128];        /* the thread_name written to the current file */
    int64_t id_next, id_end;
    dft_scope *scopes;
    int depth;
    size_t scopes_cap;
    _Atomic int in_emit;   /* recording now: guards against re-entry from signals,
                              and finalize waits for it (relaxed; lock-free) */
    /* The time-based flush (dft_flush_aged_threads), all under lock: hand-offs
     * so far, and what the previous tick saw. */
    uint64_t handoffs, tick_handoffs;
    size_t tick_pos, tick_flushed;
    /* The spans open on the thread (core/open_spans.c): slots [0, open_depth)
     * (release by owner); deeper ones are counted in open_over only. */
    dft_open_span spans[DFT_OPEN_MAX];
    _Atomic int open_depth;
    dft_open_io open_io;
    int open_over;
    uint32_t open_serial;
    int open_shown;        /* flusher only: an `open` snapshot with spans stands, */
    uint64_t open_sig;     /* which spans it listed, */
    int64_t open_shown_us; /* and when it was written */
    struct dft_tstate *prev, *next; /* registry, under dft_g.registry_lock */
} dft_tstate;

/* ---- global state ------------------------------------------------------ */

/* The rest of the state: active, state and gen are in dft_trace (core/core.h). */
typedef struct dft_globals {
    _Atomic int64_t next_id_block;
    int explicit_init;           /* started by initialize_log, not lazily */
    pthread_mutex_t life_lock;   /* init/finalize/fork, never on the hot path */
    pthread_mutex_t registry_lock;
    dft_tstate *threads;
    dft_config cfg;
    size_t flush_threshold;      /* bytes of records that trigger a hand-off */
    size_t chunk_cap;
    int64_t pid;                 /* pid written in events: the OS pid, as the
                                  * reference writes it (a fork child's ppid
                                  * then names its parent's events) */
    int64_t name_id;             /* the id in the file's name: initialize_log's
                                  * process_id, else the pid */
    int64_t real_pid;            /* getpid() of the process owning the file */
    uint64_t hhash;
    char hostname[256];
    char *path;                  /* the trace file */
    /* Hooks set by the Python module (dft_set_python_hooks) to release the GIL
     * while waiting. */
    void *(*before_wait)(void);
    void (*after_wait)(void *);
    /* The calling thread's Python name (see dft_set_python_hooks). */
    int (*thread_name)(char *buf, size_t cap);
    /* Set by core/park.c when it parks the tracer's threads at a fork: the
     * hot path (buffer.c, open_spans.c) restarts them through it at the
     * first event after, without calling up into park.c. */
    _Atomic(void (*)(int64_t tid)) resume_threads;
} dft_globals;

extern dft_globals dft_g;

/* Calls every hook dft_add_lifecycle_hook registered (core/state.c).  The
 * thread that starts, flushes, forks or finalizes the trace. */
void dft_run_lifecycle_hooks(dft_hook_event ev);

/* 1 from a fork until the flusher is started again (core/park.c).  Read by
 * the hot path. */
extern _Atomic int dft_threads_parked;

/* The first event after a fork on thread tid: the parked threads start again
 * (dft_g.resume_threads).  Any thread, no GIL. */
static inline void dft_threads_resume_hook(int64_t tid)
{
    void (*fn)(int64_t) = atomic_load(&dft_g.resume_threads);
    if (fn)
        fn(tid); /* else set a moment later: the next event tries again */
}

#endif
