/* core/inflight.c: collectives launched and not yet completed, for readers
 * of a hung process (docs/trace-format.md, "Open spans").
 *
 * An asynchronous collective -- a DDP bucket's all_reduce, an async_op=True
 * call of FSDP -- is launched by one thread and completed by another (gloo's
 * worker, a CUDA event's callback), and the launching thread then waits for
 * it somewhere without a span of its own (DDP's reducer at the end of
 * backward, Work.wait).  Such a collective cannot live in the per-thread
 * slots of core/open_spans.c, which only their owner writes, so it lives
 * here: a process-wide table of fixed slots, claimed with a compare-and-swap
 * by the launching thread and freed by whichever thread completes the work.
 * The flusher copies the live ones each tick and shows them among the
 * launching thread's open spans.  A full table never blocks: the collective
 * is counted in `missed` and not shown.
 *
 * Each slot's state word is (claims << 2 | phase): every claim changes it,
 * so a token (the word and the slot's index) frees only its own collective,
 * however late it comes, and a reader that sees the same word before and
 * after its copy has copied one collective whole. */
#include "core/inflight.h"

#include <string.h>

#include "core/buffer.h"
#include "core/core.h"

enum { PH_FREE = 0, PH_WRITING = 1, PH_LIVE = 2 };

typedef struct {
    _Atomic uint32_t state;
    int64_t tid;
    dft_open_span span; /* its own seq is unused here */
} slot;

static slot table[DFT_INFLIGHT_MAX];
static _Atomic uint32_t cursor;   /* where the next claim starts looking */
static _Atomic uint64_t serials;  /* tells one collective's snapshot from another's */
static _Atomic int64_t missed;    /* launched while the table was full */

/* s[0, n) into dst, cut to cap - 1 bytes at a character boundary.  Any
 * thread, no GIL. */
static void put_str(char *dst, uint8_t *len, size_t cap, const char *s, size_t n)
{
    if (!s)
        n = 0;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    if (n)
        memcpy(dst, s, n);
    *len = (uint8_t)n;
}

/* Any thread, no GIL. */
int64_t dft_inflight_begin(const dft_open_desc *d, int64_t bucket)
{
    if (!dft_trace_active())
        return 0;
    dft_tstate *ts = dft_tstate_get();
    if (!ts)
        return 0;
    uint32_t start = atomic_fetch_add_explicit(&cursor, 1, memory_order_relaxed);
    for (uint32_t i = 0; i < DFT_INFLIGHT_MAX; i++) {
        uint32_t k = (start + i) % DFT_INFLIGHT_MAX;
        slot *s = &table[k];
        uint32_t w = atomic_load_explicit(&s->state, memory_order_relaxed);
        if ((w & 3) != PH_FREE)
            continue;
        uint32_t claimed = ((w >> 2) + 1) << 2;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &w, claimed | PH_WRITING,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        s->tid = ts->tid;
        dft_open_span *sp = &s->span;
        uint64_t serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
        sp->serial = (uint32_t)serial | 1u << 30; /* apart from the thread's own serials */
        sp->ts = d->ts;
        sp->seq_arg = d->seq;
        sp->bucket = bucket;
        sp->inflight = 1;
        sp->fhash = 0;
        sp->gen = 0;
        put_str(sp->name, &sp->name_len, sizeof sp->name, d->name, d->name_len);
        put_str(sp->cat, &sp->cat_len, sizeof sp->cat, d->cat, d->cat_len);
        put_str(sp->group, &sp->group_len, sizeof sp->group, d->group, d->group_len);
        atomic_store_explicit(&s->state, claimed | PH_LIVE, memory_order_release);
        /* after a fork the flusher waits for an event to start again: this
         * must be seen even if the thread then only waits */
        if (__builtin_expect(atomic_load_explicit(&dft_threads_parked, memory_order_relaxed), 0))
            dft_threads_resume_hook(ts->tid);
        return (int64_t)(claimed | PH_LIVE) << 16 | k;
    }
    atomic_fetch_add_explicit(&missed, 1, memory_order_relaxed);
    return 0;
}

/* Any thread, no GIL. */
void dft_inflight_end(int64_t tok)
{
    if (tok <= 0)
        return;
    uint32_t k = (uint32_t)(tok & 0xffff);
    uint32_t w = (uint32_t)(tok >> 16);
    if (k >= DFT_INFLIGHT_MAX || (w & 3) != PH_LIVE)
        return;
    /* a stale token (its slot freed and claimed again) finds another word */
    atomic_compare_exchange_strong_explicit(&table[k].state, &w, (w & ~3u) | PH_FREE,
                                            memory_order_release, memory_order_relaxed);
}

/* Any thread, no GIL. */
int64_t dft_inflight_missed(void)
{
    return atomic_load_explicit(&missed, memory_order_relaxed);
}

/* The flusher thread, no GIL. */
int dft_inflight_collect(dft_inflight_view *out)
{
    int n = 0;
    for (int k = 0; k < DFT_INFLIGHT_MAX; k++) {
        slot *s = &table[k];
        uint32_t w = atomic_load_explicit(&s->state, memory_order_acquire);
        if ((w & 3) != PH_LIVE)
            continue;
        dft_inflight_view *v = &out[n];
        v->tid = s->tid;
        memcpy(&v->span, &s->span, sizeof v->span);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != w)
            continue;
        dft_open_span *sp = &v->span;
        if (sp->name_len >= sizeof sp->name || sp->cat_len >= sizeof sp->cat ||
            sp->group_len >= sizeof sp->group)
            continue;
        /* oldest first (insertion: a handful are live at a time) */
        int64_t t0 = sp->ts;
        int j = n++;
        while (j > 0 && out[j - 1].span.ts > t0) {
            dft_inflight_view t = out[j - 1];
            out[j - 1] = out[j];
            out[j] = t;
            j--;
        }
    }
    return n;
}

/* Single-threaded (fork child handler), no GIL. */
void dft_inflight_after_fork_child(void)
{
    for (int k = 0; k < DFT_INFLIGHT_MAX; k++) {
        uint32_t w = atomic_load_explicit(&table[k].state, memory_order_relaxed);
        atomic_store_explicit(&table[k].state, ((w >> 2) + 1) << 2 | PH_FREE,
                              memory_order_relaxed);
    }
}
