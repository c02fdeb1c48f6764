/* core/open_spans.c: what each thread is inside of, for readers of a hung
 * process (docs/trace-format.md, "Open spans").
 *
 * The complete event of a span is written when it ends, so a thread blocked
 * in a collective or a read leaves nothing in its trace.  The integrations
 * that know what a thread is doing -- a collective, an iteration, a forward,
 * an I/O call -- mark the span open on the thread (dft_open_begin) and
 * closed again (dft_open_end).  Each thread keeps its open spans in a fixed
 * array of slots in its own state, written only by itself under a sequence
 * lock per slot, so marking costs a few stores and no lock; the flusher
 * copies them (retrying nothing: a slot being written is skipped this tick)
 * and writes an `open` metadata event per span once the innermost has been
 * open for a whole flush interval.  The collectives a thread launched and
 * another completes (core/inflight.c) are shown among its spans, at their
 * launch time. */
#include "core/open_spans.h"

#include <string.h>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/inflight.h"
#include "core/state.h"
#include "core/writer.h"

/* After a fork the flusher waits for the next event to start again; a span
 * marked open must be seen even if the thread then blocks without one.
 * The owner thread, no GIL. */
static inline void resume_after_fork(const dft_tstate *t)
{
    if (__builtin_expect(atomic_load_explicit(&dft_threads_parked, memory_order_relaxed), 0))
        dft_threads_resume_hook(t->tid);
}

/* s[0, n) into dst, cut to cap - 1 bytes.  Any thread, no GIL. */
static void put_str(char *dst, uint8_t *len, size_t cap, const char *s, size_t n)
{
    if (n >= cap) { /* cut before the character that crosses cap - 1 */
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    if (n)
        memcpy(dst, s, n);
    *len = (uint8_t)n;
}

/* The owner thread, no GIL. */
int64_t dft_open_begin(const dft_open_desc *d)
{
    dft_tstate *ts = dft_tstate_get();
    if (!ts)
        return 0;
    int depth = atomic_load_explicit(&ts->open_depth, memory_order_relaxed);
    if (depth >= DFT_OPEN_MAX) {
        ts->open_over++;
        return -1;
    }
    dft_open_span *sp = &ts->spans[depth];
    uint32_t s = atomic_load_explicit(&sp->seq, memory_order_relaxed);
    atomic_store_explicit(&sp->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint32_t serial = ++ts->open_serial;
    if (!serial)
        serial = ++ts->open_serial;
    sp->serial = serial;
    sp->ts = d->ts;
    sp->seq_arg = d->seq;
    sp->fhash = d->fhash;
    sp->gen = d->fhash ? dft_trace_gen() : 0;
    put_str(sp->name, &sp->name_len, sizeof sp->name, d->name, d->name_len);
    put_str(sp->cat, &sp->cat_len, sizeof sp->cat, d->cat, d->cat_len);
    put_str(sp->group, &sp->group_len, sizeof sp->group, d->group, d->group ? d->group_len : 0);
    atomic_store_explicit(&sp->seq, s + 2, memory_order_release);
    atomic_store_explicit(&ts->open_depth, depth + 1, memory_order_release);
    resume_after_fork(ts);
    return ((int64_t)serial << 8) | depth;
}

/* The owner thread (a token from another thread is ignored), no GIL. */
void dft_open_end(int64_t tok)
{
    dft_tstate *ts = dft_tstate_get();
    if (!ts || !tok)
        return;
    if (tok < 0) {
        if (ts->open_over > 0)
            ts->open_over--;
        return;
    }
    int k = (int)(tok & 0xff);
    uint32_t serial = (uint32_t)(tok >> 8);
    int depth = atomic_load_explicit(&ts->open_depth, memory_order_relaxed);
    if (k >= depth || ts->spans[k].serial != serial)
        return;
    dft_open_span *sp = &ts->spans[k];
    uint32_t s = atomic_load_explicit(&sp->seq, memory_order_relaxed);
    atomic_store_explicit(&sp->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    sp->serial = 0;
    atomic_store_explicit(&sp->seq, s + 2, memory_order_release);
    /* spans closed out of order (a generator) leave the stack when the ones
     * above them have left too */
    while (depth > 0 && ts->spans[depth - 1].serial == 0)
        depth--;
    atomic_store_explicit(&ts->open_depth, depth, memory_order_release);
}

/* The owner thread, no GIL. */
void *dft_open_io_begin(const char *name, size_t name_len, const char *cat, size_t cat_len,
                        int64_t ts, uint64_t fhash)
{
    dft_tstate *t = dft_tstate_get();
    if (!t)
        return NULL;
    dft_open_io *io = &t->open_io;
    uint32_t s = atomic_load_explicit(&io->seq, memory_order_relaxed);
    atomic_store_explicit(&io->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    io->active = 1;
    io->name = name;
    io->name_len = name_len;
    io->cat = cat;
    io->cat_len = cat_len;
    io->ts = ts;
    io->fhash = fhash;
    io->gen = fhash ? dft_trace_gen() : 0;
    atomic_store_explicit(&io->seq, s + 2, memory_order_release);
    resume_after_fork(t);
    return t;
}

/* The owner thread, no GIL. */
void dft_open_io_end(void *h)
{
    if (!h)
        return;
    dft_open_io *io = &((dft_tstate *)h)->open_io;
    uint32_t s = atomic_load_explicit(&io->seq, memory_order_relaxed);
    atomic_store_explicit(&io->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    io->active = 0;
    atomic_store_explicit(&io->seq, s + 2, memory_order_release);
}

/* The I/O call open on a thread, as a span: 0 when none (or being written).
 * The flusher. */
static int read_io(const dft_open_io *io, dft_open_span *out)
{
    uint32_t s1 = atomic_load_explicit(&io->seq, memory_order_acquire);
    if (s1 & 1)
        return 0;
    int active = io->active;
    const char *name = io->name, *cat = io->cat;
    size_t nl = io->name_len, cl = io->cat_len;
    out->ts = io->ts;
    out->fhash = io->fhash;
    out->gen = io->gen;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&io->seq, memory_order_relaxed) != s1 || !active || !name || !cat)
        return 0;
    out->serial = s1 | 1u << 31; /* changes with every call */
    out->seq_arg = -1;
    out->bucket = -1;
    out->inflight = 0;
    out->group_len = 0;
    put_str(out->name, &out->name_len, sizeof out->name, name, nl);
    put_str(out->cat, &out->cat_len, sizeof out->cat, cat, cl);
    return 1;
}

/* Copies slot sp; 0 when it was being written or is closed.  The flusher,
 * no GIL. */
static int read_slot(const dft_open_span *sp, dft_open_span *out)
{
    uint32_t s1 = atomic_load_explicit(&sp->seq, memory_order_acquire);
    if (s1 & 1)
        return 0;
    out->serial = sp->serial;
    out->ts = sp->ts;
    out->seq_arg = sp->seq_arg;
    out->fhash = sp->fhash;
    out->gen = sp->gen;
    out->bucket = -1;
    out->inflight = 0;
    out->name_len = sp->name_len;
    out->cat_len = sp->cat_len;
    out->group_len = sp->group_len;
    memcpy(out->name, sp->name, sizeof out->name);
    memcpy(out->cat, sp->cat, sizeof out->cat);
    memcpy(out->group, sp->group, sizeof out->group);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&sp->seq, memory_order_relaxed) != s1)
        return 0;
    if (out->name_len >= sizeof out->name || out->cat_len >= sizeof out->cat ||
        out->group_len >= sizeof out->group)
        return 0;
    return out->serial != 0;
}

/* One `open` event (sp NULL: the empty one).  The flusher, no GIL. */
static void write_open(int64_t tid, int64_t now, int n, int k, const dft_open_span *sp)
{
    dft_arg a[12];
    unsigned na = 0;
    a[na++] = (dft_arg){.key = "name", .type = DFT_ARG_STR, .v.s = {"open", 4}};
    a[na++] = (dft_arg){.key = "value", .type = DFT_ARG_STR,
                        .v.s = {sp ? sp->name : "", sp ? sp->name_len : 0}};
    a[na++] = (dft_arg){.key = "at", .type = DFT_ARG_INT, .v.i = now};
    a[na++] = (dft_arg){.key = "n", .type = DFT_ARG_INT, .v.i = n};
    if (sp) {
        a[na++] = (dft_arg){.key = "depth", .type = DFT_ARG_INT, .v.i = k};
        a[na++] = (dft_arg){.key = "since", .type = DFT_ARG_INT, .v.i = sp->ts};
        a[na++] = (dft_arg){.key = "span_cat", .type = DFT_ARG_STR,
                            .v.s = {sp->cat, sp->cat_len}};
        if (sp->group_len)
            a[na++] = (dft_arg){.key = "group", .type = DFT_ARG_STR,
                                .v.s = {sp->group, sp->group_len}};
        /* a collective's number in its group; an iteration's (or a
         * fetch's, an optimizer step's) number */
        int comm = sp->cat_len == 4 && memcmp(sp->cat, "comm", 4) == 0;
        if (sp->seq_arg >= 0)
            a[na++] = (dft_arg){.key = comm ? "seq" : "step", .type = DFT_ARG_INT,
                                .v.i = sp->seq_arg};
        if (sp->bucket >= 0)
            a[na++] = (dft_arg){.key = "bucket", .type = DFT_ARG_INT, .v.i = sp->bucket};
        if (sp->inflight) /* launched here, completing on another thread */
            a[na++] = (dft_arg){.key = "async", .type = DFT_ARG_INT, .v.i = 1};
        if (sp->fhash && sp->gen == dft_trace_gen())
            a[na++] = (dft_arg){.key = "fhash", .type = DFT_ARG_HASH, .v.hash = sp->fhash};
    }
    dft_event ev = {.name = "open", .name_len = 4, .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .tid = tid, .args = a, .nargs = na};
    dft_write_meta_now(&ev);
}

/* In-flight collectives shown per thread: the oldest, which the later ones
 * queue behind in their backend. */
#define INFLIGHT_SHOWN 4

/* The live in-flight collectives, copied once a tick.  The flusher only. */
static dft_inflight_view inflight[DFT_INFLIGHT_MAX];

/* Adds tid's in-flight collectives (of live[0, nlive), oldest first) into
 * snap[0, *n), each after the spans that opened before it.  The flusher,
 * no GIL. */
static void merge_inflight(int64_t tid, const dft_inflight_view *live, int nlive,
                           dft_open_span *snap, int *n)
{
    int shown = 0;
    for (int i = 0; i < nlive && shown < INFLIGHT_SHOWN; i++) {
        if (live[i].tid != tid)
            continue;
        int at = *n;
        while (at > 0 && snap[at - 1].ts > live[i].span.ts)
            at--;
        memmove(&snap[at + 1], &snap[at], (size_t)(*n - at) * sizeof *snap);
        snap[at] = live[i].span;
        (*n)++;
        shown++;
    }
}

/* The flusher thread, no GIL. */
void dft_open_spans_tick(int64_t age_us, int64_t repeat_us, int force)
{
    int64_t now = dft_clock_us();
    dft_open_span snap[DFT_OPEN_MAX + INFLIGHT_SHOWN + 1];
    int nlive = dft_inflight_collect(inflight);
    pthread_mutex_lock(&dft_g.registry_lock);
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next) {
        int depth = atomic_load_explicit(&ts->open_depth, memory_order_acquire);
        if (depth > DFT_OPEN_MAX)
            depth = DFT_OPEN_MAX;
        dft_open_span snap_io;
        int n = 0;
        for (int k = 0; k < depth; k++)
            if (read_slot(&ts->spans[k], &snap[n]))
                n++;
        if (nlive)
            merge_inflight(ts->tid, inflight, nlive, snap, &n);
        if (read_io(&ts->open_io, &snap_io)) /* innermost: no span opens inside a call */
            snap[n++] = snap_io;
        if (n > 0 && now - snap[n - 1].ts >= age_us) {
            uint64_t sig = (uint64_t)n;
            for (int k = 0; k < n; k++)
                sig = sig * 1000003u + snap[k].serial;
            if (force || !ts->open_shown || sig != ts->open_sig ||
                now - ts->open_shown_us >= repeat_us) {
                for (int k = 0; k < n; k++)
                    write_open(ts->tid, now, n, k, &snap[k]);
                ts->open_shown = 1;
                ts->open_sig = sig;
                ts->open_shown_us = now;
            }
        } else if (ts->open_shown) {
            write_open(ts->tid, now, 0, 0, NULL); /* what stood has ended */
            ts->open_shown = 0;
        }
    }
    pthread_mutex_unlock(&dft_g.registry_lock);
}
