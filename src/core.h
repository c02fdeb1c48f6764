/* core.h: internals shared by the buffer, writer and lifecycle files.
 *
 * Data flow: a traced thread appends compact binary records (dft_rec) to its own
 * buffer (a dft_chunk) without locking.  A full buffer is handed to the writer
 * queue; writer threads turn records into JSON lines, deflate them into complete
 * gzip members and append each member with one write(). */
#ifndef DFT_CORE_H
#define DFT_CORE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dftracer.h"

/* The version, from dftracer/_version.py (setup.py defines it). */
#ifndef DFT_VERSION
#error "DFT_VERSION is defined by setup.py from dftracer/_version.py"
#endif

/* ---- records ---------------------------------------------------------- */

#define DFT_NAME_MAX 4096     /* longer names are truncated */
#define DFT_CAT_MAX 255
#define DFT_KEY_MAX 255
#define DFT_ARGS_MAX 64
#define DFT_STR_BUDGET 49152  /* bytes of string argument values per record */
#define DFT_REC_MAX (96 * 1024) /* upper bound of one encoded record */

#define DFT_PH_METADATA 'M'

/* Record header, 8-byte aligned, followed by name, cat, then the args:
 *   u8 type, u8 key_len, key bytes, then an 8-byte value (int64/double/hash)
 *   or a u32 length and the string bytes. */
typedef struct dft_rec {
    uint32_t size; /* whole record, a multiple of 8 */
    uint8_t ph;
    uint8_t nargs;
    uint16_t name_len;
    uint8_t cat_len;
    uint8_t flags; /* DFT_EV_* */
    uint16_t reserved;
    int32_t level;
    int64_t id;
    int64_t p_idx;
    int64_t ts;
    int64_t dur;
    int64_t tid;
    int64_t pid; /* 0: the file's pid */
} dft_rec;

/* ---- chunks and per-thread state --------------------------------------- */

typedef struct dft_chunk {
    struct dft_chunk *next;
    char *data;
    size_t cap;
    size_t start, end; /* the records to write: data[start, end) */
    uint64_t gen;      /* file generation the records belong to */
} dft_chunk;

typedef struct dft_scope {
    int64_t id;
    int claimed; /* an event already took this scope's id */
} dft_scope;

typedef struct dft_tstate {
    dft_chunk *cur;        /* owned by the thread; replaced under lock */
    _Atomic size_t pos;    /* end of committed records (release by owner) */
    size_t flushed;        /* start of records not yet handed off; under lock */
    pthread_mutex_t lock;  /* slow path only: hand-off and snapshots */
    int64_t tid;
    uint64_t gen;          /* file generation this thread announced itself to */
    int64_t id_next, id_end;
    dft_scope *scopes;
    int depth, scopes_cap;
    volatile sig_atomic_t in_emit; /* guards against re-entry from signals */
    struct dft_tstate *prev, *next; /* registry, under dft_g.registry_lock */
} dft_tstate;

/* ---- global state ------------------------------------------------------ */

enum { DFT_STATE_UNINIT = 0, DFT_STATE_DISABLED, DFT_STATE_ACTIVE, DFT_STATE_FINALIZED };

typedef struct dft_globals {
    _Atomic int active;          /* the hot-path flag */
    _Atomic int state;           /* DFT_STATE_* */
    _Atomic uint64_t gen;        /* bumped for each new trace file */
    _Atomic int64_t next_id_block;
    int explicit_init;           /* started by initialize_log, not lazily */
    pthread_mutex_t life_lock;   /* init/finalize/fork, never on the hot path */
    pthread_mutex_t registry_lock;
    dft_tstate *threads;
    dft_config cfg;
    size_t flush_threshold;      /* bytes of records that trigger a hand-off */
    size_t chunk_cap;
    int64_t pid;                 /* pid written in events */
    int64_t real_pid;            /* getpid() of the process owning the file */
    uint64_t hhash;
    char hostname[256];
    char *path;                  /* the trace file */
    /* Hooks set by the Python module to release the GIL while waiting. */
    void *(*before_wait)(void);
    void (*after_wait)(void *);
} dft_globals;

extern dft_globals dft_g;

/* buffer.c */
dft_tstate *dft_tstate_get(void);
void dft_tstate_forget_others(dft_tstate *keep); /* in a forked child */
void dft_flush_all_threads(int wait);
void dft_tstate_reset_current(void);
int dft_emit_record(const dft_event *ev, int64_t id_override);

/* writer.c */
typedef struct dft_writer_opts {
    const char *path;
    int compression;
    int inc_metadata;
    int nthreads;
    int64_t pid;
    uint64_t hhash;
} dft_writer_opts;

int dft_writer_open(const dft_writer_opts *o, int open_now); /* 0, or -1 with errno */
extern __thread int dft_no_gil_release;
dft_chunk *dft_chunk_new(void);                 /* NULL when out of memory */
void dft_chunk_free(dft_chunk *c);
void dft_writer_submit(dft_chunk *c);           /* takes ownership; may wait */
void dft_writer_drain(void);
/* Formats and writes one record synchronously (used for the end event). */
void dft_writer_write_now(const dft_event *ev, int64_t id);
uint64_t dft_writer_lines(void);
void dft_writer_close(void);
void dft_writer_atfork_prepare(void);
void dft_writer_atfork_parent(void);
void dft_writer_atfork_child(void);
/* Best effort from a signal handler: writes chunk data without taking locks
 * that might be held (returns -1 if it could not). */
int dft_writer_emergency(const char *data, size_t start, size_t end);
int dft_writer_emergency_prepare(void);

/* tracer.c */
int dft_start(const char *log_file, const char *data_dir, int64_t process_id, int explicit_init,
              char *err, size_t errlen);
int dft_lazy_start(void);
void dft_finalize(void);
int dft_is_enabled_env(void);

/* Lifecycle hooks for integrations with state tied to the trace (I/O
 * interception, CUPTI), run in registration order on the thread doing the
 * transition, without the GIL:
 *   OPENED      under the lifecycle lock, right after the header is recorded
 *               and before any other thread can see tracing start;
 *   STARTED     after the lock is released (may be slow: dlopen, cuInit);
 *   FLUSH       before dft_flush() writes;
 *   FINALIZING  under the lifecycle lock before the end event, while events
 *               are still recorded;
 *   ABANDONED   under the lock, when a forked child cannot open its file.
 * Hooks called under the lock must not start or finalize tracing. */
typedef enum {
    DFT_HOOK_OPENED = 0,
    DFT_HOOK_STARTED,
    DFT_HOOK_FLUSH,
    DFT_HOOK_FINALIZING,
    DFT_HOOK_ABANDONED,
} dft_hook_event;
typedef void (*dft_lifecycle_hook)(dft_hook_event ev);
int dft_add_lifecycle_hook(dft_lifecycle_hook fn); /* 0, or -1 when the table is full */

/* Internal test hooks: records encoded size. */
size_t dft_record_size(const dft_event *ev);

#endif
