/* core/buffer.c: per-thread record buffers and the event hot path.
 *
 * Each thread appends records to its own chunk and publishes them by storing
 * the new end offset with release order; no lock is taken.  The per-thread
 * mutex is used only on the slow path (handing a full chunk to the writer) and
 * by other threads taking a snapshot of committed records (finalize, fork,
 * flush), so a snapshot never sees a half-written record. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/sigmask.h"
#include "core/writer.h"
#include "format/grow.h"

#define ID_BLOCK 4096

#ifdef DFT_TESTING
_Atomic int dft_test_handoff_delay_us;
#endif

static __thread dft_tstate *tls_state __attribute__((tls_model("initial-exec")));
static pthread_key_t tstate_key;
static pthread_once_t tstate_key_once = PTHREAD_ONCE_INIT;

static void tstate_destroy(void *p);

static void make_key(void)
{
    if (pthread_key_create(&tstate_key, tstate_destroy) != 0)
        dft_log(DFT_LOG_ERROR, "pthread_key_create failed; events of exiting threads may be lost");
}

/* Any thread, no GIL. */
static void registry_add(dft_tstate *ts)
{
    pthread_mutex_lock(&dft_g.registry_lock);
    ts->next = dft_g.threads;
    ts->prev = NULL;
    if (dft_g.threads)
        dft_g.threads->prev = ts;
    dft_g.threads = ts;
    pthread_mutex_unlock(&dft_g.registry_lock);
}

static void registry_remove_locked(dft_tstate *ts)
{
    if (ts->prev)
        ts->prev->next = ts->next;
    else if (dft_g.threads == ts)
        dft_g.threads = ts->next;
    if (ts->next)
        ts->next->prev = ts->prev;
    ts->prev = ts->next = NULL;
}

/* Any thread, no GIL.  Returns NULL when out of memory. */
dft_tstate *dft_tstate_get(void)
{
    dft_tstate *ts = tls_state;
    if (ts)
        return ts;
    pthread_once(&tstate_key_once, make_key);
    ts = calloc(1, sizeof *ts);
    if (!ts)
        return NULL;
    sigset_t saved;
    dft_signals_hold(&saved);
    ts->cur = dft_chunk_new_first();
    if (!ts->cur) {
        dft_signals_release(&saved);
        free(ts);
        return NULL;
    }
    if (pthread_mutex_init(&ts->lock, NULL) != 0) {
        dft_chunk_free(ts->cur);
        dft_signals_release(&saved);
        free(ts);
        return NULL;
    }
    ts->tid = (int64_t)syscall(SYS_gettid);
    ts->ident = (unsigned long)pthread_self();
    ts->gen = 0; /* announce to the current file on the first event */
    tls_state = ts;
    pthread_setspecific(tstate_key, ts);
    registry_add(ts);
    dft_signals_release(&saved);
    return ts;
}

/* Hands data[flushed, pos) of ts's chunk to the writer and gives ts a fresh
 * chunk.  Called by the owner (slow path) or, with snapshot=1, by any thread:
 * then the records are copied and the owner keeps its chunk.
 * Takes ts->lock; any thread, no GIL. */
static void tstate_handoff_held(dft_tstate *ts, int snapshot);

static void tstate_handoff(dft_tstate *ts, int snapshot)
{
    sigset_t saved;
    dft_signals_hold(&saved);
    tstate_handoff_held(ts, snapshot);
    dft_signals_release(&saved);
}

/* tstate_handoff with SIGTERM/SIGINT held on this thread. */
static void tstate_handoff_held(dft_tstate *ts, int snapshot)
{
    pthread_mutex_lock(&ts->lock);
    size_t pos = atomic_load_explicit(&ts->pos, memory_order_acquire);
    if (pos <= ts->flushed) {
        pthread_mutex_unlock(&ts->lock);
        return;
    }
    uint64_t gen = ts->gen; /* the file the records belong to (see new_file) */
    dft_chunk *out = dft_chunk_new();
    if (!out) {
        pthread_mutex_unlock(&ts->lock);
        dft_log(DFT_LOG_ERROR, "out of memory: %zu bytes of events dropped", pos - ts->flushed);
        return;
    }
    if (snapshot) {
        memcpy(out->data, ts->cur->data + ts->flushed, pos - ts->flushed);
        out->start = 0;
        out->end = pos - ts->flushed;
        ts->flushed = pos;
    } else {
        dft_chunk *full = ts->cur;
        full->start = ts->flushed;
        full->end = pos;
        ts->cur = out;
        ts->flushed = 0;
        atomic_store_explicit(&ts->pos, 0, memory_order_release);
        out = full;
        ts->handoffs++;
    }
    out->gen = gen;
    dft_writer_handoff_begin(); /* a drain from now on waits for this chunk */
    pthread_mutex_unlock(&ts->lock);
#ifdef DFT_TESTING
    int delay = atomic_load_explicit(&dft_test_handoff_delay_us, memory_order_relaxed);
    if (delay > 0)
        usleep((useconds_t)delay);
#endif
    dft_writer_submit(out);
}

/* The pthread key destructor: a thread is exiting.  No GIL. */
static void tstate_destroy(void *p)
{
    dft_tstate *ts = p;
    sigset_t saved;
    dft_signals_hold(&saved);
    if (atomic_load(&dft_trace.active))
        tstate_handoff(ts, 0);
    pthread_mutex_lock(&dft_g.registry_lock);
    registry_remove_locked(ts);
    pthread_mutex_unlock(&dft_g.registry_lock);
    tls_state = NULL;
    /* Another thread may be taking a snapshot of ts right now. */
    pthread_mutex_lock(&ts->lock);
    pthread_mutex_unlock(&ts->lock);
    pthread_mutex_destroy(&ts->lock);
    dft_chunk_free(ts->cur);
    free(ts->scopes);
    free(ts);
    dft_signals_release(&saved);
}

/* Snapshots every thread's committed records into the writer; with wait,
 * returns once they are written.  Any thread, no GIL. */
void dft_flush_all_threads(int wait)
{
    sigset_t saved;
    dft_signals_hold(&saved);
    pthread_mutex_lock(&dft_g.registry_lock);
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next)
        tstate_handoff_held(ts, ts != tls_state);
    pthread_mutex_unlock(&dft_g.registry_lock);
    if (wait)
        dft_writer_drain();
    dft_signals_release(&saved);
}

/* 1 when a thread other than the caller has records not yet handed off.
 * Caller holds registry_lock. */
int dft_other_threads_have_records_locked(void)
{
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next)
        if (ts != tls_state && atomic_load_explicit(&ts->pos, memory_order_acquire) > ts->flushed)
            return 1;
    return 0;
}

/* Any thread, no GIL.  The newest entry matches first (registry_add puts
 * it at the head): an ident reused by a later thread names that thread. */
int dft_thread_name(int64_t *tid, unsigned long ident, char *buf, size_t cap)
{
    int found = 0;
    pthread_mutex_lock(&dft_g.registry_lock);
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next)
        if ((*tid > 0 ? ts->tid == *tid : ts->ident == ident) && ts->name[0]) {
            snprintf(buf, cap, "%s", ts->name);
            *tid = ts->tid;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&dft_g.registry_lock);
    return found;
}

/* Finalize, once tracing is no longer active: waits (at most wait_ns in all)
 * until no other thread is in the middle of recording an event, so that what
 * each one recorded is in its buffer for the last flush, or was refused and
 * counted (dft_dropped_take).  A thread stopped inside the hot path (a signal
 * handler waiting for finalize) is given up on at the deadline.  No GIL. */
void dft_wait_for_recorders(long long wait_ns)
{
    long long deadline = dft_signal_clock_ns() + wait_ns;
    pthread_mutex_lock(&dft_g.registry_lock);
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next)
        while (ts != tls_state && atomic_load(&ts->in_emit) && dft_signal_clock_ns() < deadline)
            sched_yield(); /* an event takes well under a microsecond to record */
    pthread_mutex_unlock(&dft_g.registry_lock);
}

/* Writes what it can without blocking: the committed records of every
 * thread whose lock is free.  A signal's fallback when the flusher cannot
 * serve (not running, or stuck behind a lock the interrupted thread holds).
 * Async-signal context. */
void dft_flush_threads_from_signal(void)
{
    if (pthread_mutex_trylock(&dft_g.registry_lock) != 0)
        return;
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next) {
        if (pthread_mutex_trylock(&ts->lock) != 0)
            continue;
        size_t pos = atomic_load_explicit(&ts->pos, memory_order_acquire);
        if (ts->gen != atomic_load(&dft_trace.gen))
            ts->flushed = pos; /* another file's (see new_file) */
        else if (pos > ts->flushed && dft_writer_emergency(ts->cur->data, ts->flushed, pos) == 0)
            ts->flushed = pos;
        pthread_mutex_unlock(&ts->lock);
    }
    pthread_mutex_unlock(&dft_g.registry_lock);
}

/* The time-based flush: a thread whose records at [flushed, tick_pos) were
 * already committed at the previous call, in the same chunk, and are still not
 * handed off has held them for at least one period, so its buffer is taken as
 * a snapshot.  Called every half DFTRACER_FLUSH_INTERVAL, an event waits at
 * most one interval.  Reads what the owner publishes (pos) and never touches
 * its hot path.  The flusher thread, no GIL. */
void dft_flush_aged_threads(void)
{
    pthread_mutex_lock(&dft_g.registry_lock);
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next) {
        pthread_mutex_lock(&ts->lock);
        size_t pos = atomic_load_explicit(&ts->pos, memory_order_acquire);
        int aged = ts->tick_handoffs == ts->handoffs && ts->tick_flushed == ts->flushed &&
                   ts->tick_pos > ts->flushed;
        ts->tick_handoffs = ts->handoffs;
        ts->tick_flushed = ts->flushed;
        ts->tick_pos = pos;
        pthread_mutex_unlock(&ts->lock);
        if (aged)
            tstate_handoff(ts, ts != tls_state);
    }
    pthread_mutex_unlock(&dft_g.registry_lock);
}

/* Hands the calling thread's committed records (a new trace's header) to
 * the writer's kept lines (dft_writer_keep), to be written before anything
 * else.  Any thread, no GIL. */
void dft_keep_own_thread_now(uint64_t gen)
{
    dft_tstate *ts = tls_state;
    if (!ts)
        return;
    sigset_t saved;
    dft_signals_hold(&saved);
    pthread_mutex_lock(&ts->lock);
    size_t pos = atomic_load_explicit(&ts->pos, memory_order_acquire);
    if (pos > ts->flushed) {
        dft_writer_keep(ts->cur->data, ts->flushed, pos, gen);
        ts->flushed = pos; /* kept, or dropped with the writer's one error line */
    }
    pthread_mutex_unlock(&ts->lock);
    dft_signals_release(&saved);
}

/* In a forked child only the forking thread exists: drop the state of the
 * others and the records this thread had not handed off (the parent writes
 * them).  Single-threaded at that point. */
void dft_tstate_forget_others(dft_tstate *keep)
{
    dft_tstate *ts = dft_g.threads;
    while (ts) {
        dft_tstate *next = ts->next;
        if (ts != keep) {
            dft_chunk_free(ts->cur);
            free(ts->scopes);
            free(ts);
        }
        ts = next;
    }
    dft_g.threads = NULL;
    if (keep) {
        pthread_mutex_init(&keep->lock, NULL);
        keep->prev = keep->next = NULL;
        dft_g.threads = keep;
        keep->tid = (int64_t)syscall(SYS_gettid);
        keep->ident = (unsigned long)pthread_self();
        keep->flushed = 0;
        keep->handoffs = keep->tick_handoffs = 0;
        keep->tick_pos = keep->tick_flushed = 0;
        keep->id_next = keep->id_end = 0;
        atomic_store(&keep->pos, 0);
        atomic_store(&keep->open_depth, 0); /* the parent's spans never end here */
        keep->open_over = keep->open_shown = 0;
    }
}

void dft_tstate_reset_current(void) { dft_tstate_forget_others(tls_state); }

/* ---- the hot path ------------------------------------------------------ */

static inline int64_t take_id(dft_tstate *ts)
{
    if (ts->id_next == ts->id_end) {
        ts->id_next = atomic_fetch_add(&dft_g.next_id_block, ID_BLOCK);
        ts->id_end = ts->id_next + ID_BLOCK;
    }
    return ts->id_next++;
}

static void announce_thread(dft_tstate *ts);
static void rename_thread(dft_tstate *ts);

/* Events refused while finalize runs (tracing no longer active, the trace
 * not yet finalized), for the end event. */
static _Atomic uint64_t dropped_in_finalize;

/* Any thread. */
uint64_t dft_dropped_take(void) { return atomic_exchange(&dropped_in_finalize, 0); }

/* Arguments left out of events that had more than fit (docs/trace-format.md,
 * "Start and end"): tracing never raises into the program for what it records. */
static _Atomic uint64_t args_dropped;

/* Any thread. */
void dft_note_args_dropped(uint64_t n) { atomic_fetch_add(&args_dropped, n); }

/* Any thread. */
uint64_t dft_args_dropped_take(void) { return atomic_exchange(&args_dropped, 0); }

/* How an event without an owned scope of its own is placed. */
enum { PLACE_INSIDE, PLACE_LOGGED, PLACE_TOP };

/* The index of t's scope in ts's stack, or -1 when it is closed.  Scopes
 * only move down (one below closed first), so the search starts where t's
 * was opened; it is the innermost one almost always.  Owner's thread. */
static inline int scope_index(const dft_tstate *ts, const dft_scope_tok *t)
{
    int k = t->depth <= ts->depth ? t->depth - 1 : ts->depth - 1;
    for (; k >= 0; k--)
        if (ts->scopes[k].id == t->id)
            return k;
    return -1;
}

/* Where ev goes (docs/trace-format.md, "Nesting"): see core/core.h. */
static inline void place_event(dft_tstate *ts, const dft_event *ev, const dft_scope_tok *own,
                               int how, dft_rec_place *at)
{
    if (ev->ph == DFT_PH_COUNTER || ev->ph == DFT_PH_METADATA || (ev->flags & DFT_EV_NO_NESTING)) {
        at->id = take_id(ts);
        at->level = 0;
        at->p_idx = -1;
        return;
    }
    dft_scope *s = NULL;
    if (own) {
        int k = own->ts == ts ? scope_index(ts, own) : -1;
        s = k >= 0 && !ts->scopes[k].taken ? &ts->scopes[k] : NULL;
    } else if (how == PLACE_LOGGED && ts->depth > 0) {
        s = &ts->scopes[ts->depth - 1];
        s = !s->owned && !s->taken ? s : NULL;
    }
    if (s) { /* the scope's own event */
        s->taken = 1;
        at->id = s->id;
        at->level = s->level;
        at->p_idx = s->parent;
    } else if (ts->depth > 0 && how != PLACE_TOP) { /* inside the innermost scope */
        const dft_scope *in = &ts->scopes[ts->depth - 1];
        at->id = take_id(ts);
        at->level = in->level + 1;
        at->p_idx = in->id;
    } else {
        at->id = take_id(ts);
        at->level = 1;
        at->p_idx = -1;
    }
}

/* The thread's first event in a new file: records still in its buffer were
 * committed after their file's last flush (an event that began before
 * finalize() and ended after it) and are dropped, never written to the new
 * file; the buffer's records belong to gen from now on (a hand-off labels
 * its chunk with ts->gen, and the writer skips chunks of another file).
 * Called with ts->in_emit set; owner's thread, no GIL. */
static void new_file(dft_tstate *ts, uint64_t gen)
{
    sigset_t saved;
    dft_signals_hold(&saved);
    pthread_mutex_lock(&ts->lock);
    ts->flushed = atomic_load_explicit(&ts->pos, memory_order_relaxed);
    ts->gen = gen;
    pthread_mutex_unlock(&ts->lock);
    dft_signals_release(&saved);
    announce_thread(ts);
}

/* The hot path.  expect: the file generation the event belongs to (its
 * hashes were defined there), 0 for the current one; an event of another
 * is not recorded (returns 1).  One copy, the entry points tail-call it, so
 * that the record encoder stays inlined here.  Any thread, no GIL. */
static __attribute__((noinline)) int emit_at(const dft_event *ev, const dft_scope_tok *own,
                                             int how, uint64_t expect)
{
    dft_tstate *ts = tls_state;
    if (__builtin_expect(!ts, 0)) {
        ts = dft_tstate_get();
        if (!ts)
            return -1;
    }
    uint64_t gen = atomic_load_explicit(&dft_trace.gen, memory_order_acquire);
    if (__builtin_expect(expect != 0 && expect != gen, 0))
        return 1;
    if (atomic_load_explicit(&ts->in_emit, memory_order_relaxed))
        return -1; /* re-entered from a signal handler on this thread */
    atomic_store_explicit(&ts->in_emit, 1, memory_order_relaxed);
    int active = atomic_load_explicit(&dft_trace.active, memory_order_relaxed);
    int parked = atomic_load_explicit(&dft_threads_parked, memory_order_relaxed);
    if (__builtin_expect((!active) | parked, 0)) {
        if (!active) {
            /* finalize began after the caller's check: the end event counts it */
            if (atomic_load(&dft_trace.state) == DFT_STATE_ACTIVE)
                atomic_fetch_add(&dropped_in_finalize, 1);
            atomic_store_explicit(&ts->in_emit, 0, memory_order_relaxed);
            return -1;
        }
        dft_threads_resume_hook(ts->tid); /* the first event after a fork */
    }
    if (__builtin_expect(ts->gen != gen, 0)) {
        new_file(ts, gen);
    } else if (__builtin_expect(!ts->name_final, 0)) {
        rename_thread(ts);
    }
    size_t size = dft_record_size(ev);
    size_t pos = atomic_load_explicit(&ts->pos, memory_order_relaxed);
    if (__builtin_expect(pos + size > ts->cur->cap, 0)) {
        tstate_handoff(ts, 0);
        pos = atomic_load_explicit(&ts->pos, memory_order_relaxed);
        if (pos + size > ts->cur->cap) {
            atomic_store_explicit(&ts->in_emit, 0, memory_order_relaxed);
            return -1;
        }
    }
    dft_rec_place at;
    place_event(ts, ev, own, how, &at);
    at.tid = ev->tid ? ev->tid : ts->tid;
    dft_record_encode(ts->cur->data + pos, ev, size, &at);
    atomic_store_explicit(&ts->pos, pos + size, memory_order_release);
    if (__builtin_expect(pos + size >= ts->cur->limit, 0))
        tstate_handoff(ts, 0);
    atomic_store_explicit(&ts->in_emit, 0, memory_order_relaxed);
    return 0;
}

/* Any thread, no GIL. */
int dft_emit_record(const dft_event *ev, const dft_scope_tok *own)
{
    return emit_at(ev, own, PLACE_INSIDE, 0);
}

/* Any thread, no GIL. */
int dft_emit_record_in(const dft_event *ev, uint64_t gen)
{
    return emit_at(ev, NULL, PLACE_INSIDE, gen);
}

/* Any thread, no GIL. */
int dft_emit_essential(const dft_event *ev, uint64_t gen)
{
    dft_tstate *ts = tls_state;
    if (__builtin_expect(!ts, 0) && !(ts = dft_tstate_get()))
        return -1;
    if (atomic_load_explicit(&ts->in_emit, memory_order_relaxed))
        return -1; /* re-entered from a signal handler on this thread */
    size_t size = dft_record_size(ev);
    char small[1024];
    char *rec = size <= sizeof small ? small : malloc(size);
    if (!rec)
        return -1;
    atomic_store_explicit(&ts->in_emit, 1, memory_order_relaxed); /* take_id is not atomic */
    dft_rec_place at = {.id = take_id(ts), .level = 0, .p_idx = -1, .tid = ev->tid ? ev->tid : ts->tid};
    atomic_store_explicit(&ts->in_emit, 0, memory_order_relaxed);
    dft_record_encode(rec, ev, size, &at);
    int rc = dft_writer_keep(rec, 0, size, gen);
    if (rec != small)
        free(rec);
    return rc;
}

/* Any thread, no GIL. */
int dft_emit_logged(const dft_event *ev) { return emit_at(ev, NULL, PLACE_LOGGED, 0); }

/* Any thread, no GIL. */
int dft_emit_top(const dft_event *ev) { return emit_at(ev, NULL, PLACE_TOP, 0); }

/* Writes a thread_name metadata event for this thread with ts->name.
 * Called with ts->in_emit set; any thread, no GIL. */
static void write_thread_name(dft_tstate *ts)
{
    dft_arg args[2] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {ts->name, strlen(ts->name)}},
        {.key = "value", .type = DFT_ARG_STR, .v.s = {"thread_name", 11}},
    };
    dft_event ev = {.name = "thread_name", .name_len = 11, .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .args = args, .nargs = 2};
    atomic_store_explicit(&ts->in_emit, 0, memory_order_relaxed);
    dft_emit_record(&ev, NULL);
    atomic_store_explicit(&ts->in_emit, 1, memory_order_relaxed);
}

/* The name a thread shows in the viewer: its Python name when the hook can
 * read it now (final), else "MainThread" for the process's main thread and
 * the tid for others (not final: replaced once the Python name is known).
 * Any thread, no GIL needed. */
static void current_name(dft_tstate *ts, char *buf, size_t cap, int *final)
{
    int n = dft_g.thread_name ? dft_g.thread_name(buf, cap) : 0;
    *final = n >= 0;
    if (n > 0)
        return;
    if (ts->tid == dft_g.real_pid)
        snprintf(buf, cap, "MainThread");
    else
        snprintf(buf, cap, "%lld", (long long)ts->tid);
}

/* Writes this thread's thread_name metadata into the current file.
 * Called with ts->in_emit set; any thread, no GIL. */
static void announce_thread(dft_tstate *ts)
{
    current_name(ts, ts->name, sizeof ts->name, &ts->name_final);
    write_thread_name(ts);
}

/* A thread announced without its Python name (its first event was recorded
 * without the GIL): once the name can be read, writes it if it differs.
 * Perfetto shows the last thread_name of a thread.  Called with ts->in_emit
 * set; any thread, no GIL needed. */
static void rename_thread(dft_tstate *ts)
{
    char name[sizeof ts->name];
    int final;
    if (dft_g.thread_name && dft_g.thread_name(name, sizeof name) < 0)
        return; /* still no GIL: cheap to ask again at the next event */
    current_name(ts, name, sizeof name, &final);
    if (!final)
        return;
    ts->name_final = 1;
    if (strcmp(name, ts->name) != 0) {
        memcpy(ts->name, name, sizeof name);
        write_thread_name(ts);
    }
}

/* ---- scopes ------------------------------------------------------------ */

/* Pushes a scope on ts's stack; NULL when out of memory (events then nest
 * one level less).  Owner's thread, no GIL. */
static dft_scope *scope_push(dft_tstate *ts, int owned)
{
    if (DFT_GROW(ts->scopes, (size_t)ts->depth, ts->scopes_cap, 16) != 0)
        return NULL;
    dft_scope *s = &ts->scopes[ts->depth];
    if (ts->depth > 0) {
        s->parent = s[-1].id;
        s->level = s[-1].level + 1;
    } else {
        s->parent = -1;
        s->level = 1;
    }
    s->id = take_id(ts);
    s->owned = (uint8_t)owned;
    s->taken = 0;
    ts->depth++;
    return s;
}

/* Removes the scope at index k; those above it move down one place.
 * Owner's thread, no GIL. */
static void scope_remove(dft_tstate *ts, int k)
{
    ts->depth--;
    if (k < ts->depth)
        memmove(&ts->scopes[k], &ts->scopes[k + 1], (size_t)(ts->depth - k) * sizeof *ts->scopes);
}

/* dft_enter_scope: a scope without an owner.  Any thread, no GIL. */
void dft_scope_push(void)
{
    dft_tstate *ts = dft_tstate_get();
    if (ts)
        scope_push(ts, 0);
}

/* dft_exit_scope: closes the innermost scope without an owner; owned scopes
 * (a decorated call, a `with` block) are closed by their owners only.  Any
 * thread, no GIL. */
void dft_scope_pop(void)
{
    dft_tstate *ts = tls_state;
    if (!ts)
        return;
    for (int k = ts->depth - 1; k >= 0; k--)
        if (!ts->scopes[k].owned) {
            scope_remove(ts, k);
            return;
        }
}

/* ---- scope tokens ------------------------------------------------------- */

/* Callers have checked that tracing is active (dft_trace_ready).  Any
 * thread, no GIL. */
void dft_scope_open(dft_scope_tok *t)
{
    t->ts = NULL;
    dft_tstate *ts = tls_state;
    if (__builtin_expect(!ts, 0) && !(ts = dft_tstate_get()))
        return;
    const dft_scope *s = scope_push(ts, 1);
    if (s) {
        t->ts = ts;
        t->depth = ts->depth;
        t->id = s->id;
    }
}

/* Any thread, no GIL. */
void dft_scope_close(dft_scope_tok *t)
{
    if (t->ts == tls_state)
        dft_scope_close_here(t);
    t->ts = NULL;
}

/* The calling thread's t (or an empty one).  Any thread, no GIL. */
void dft_scope_close_here(dft_scope_tok *t)
{
    dft_tstate *ts = t->ts;
    if (!ts)
        return;
    if (__builtin_expect(ts->depth == t->depth && ts->scopes[t->depth - 1].id == t->id, 1)) {
        ts->depth--;
        return;
    }
    int k = scope_index(ts, t);
    if (k >= 0)
        scope_remove(ts, k);
}
