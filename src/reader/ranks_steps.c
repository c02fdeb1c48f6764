/* reader/ranks_steps.c: a file's steps, and its events' self time split by
 * step and class (the second half of reader/ranks.c's pass).
 *
 * The records are sorted by thread and start (the enclosing event first);
 * a sweep with a stack gives each event its self time (its duration minus
 * that of the events nested in it on its thread, as `dftracer report`
 * counts it) and the step it starts in.  A step's time that no event covers
 * counts as `other`.
 *
 * Communication wait: the part of a compute event's self time during which a
 * collective of the process is outstanding (any comm event, on any thread:
 * DDP's bucket all-reduces run on its communication thread) counts as comm,
 * not compute; the comm events of other threads are not added on top (they
 * are in no step), so a step's classes partition its wall-clock time
 * (docs/cli.md, "How a rank's time is split").  No GIL, no Python. */
#include "reader/ranks_steps.h"

#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/reader.h"

#define STEP_EVENT 255 /* a record that is one of the chosen steps */
typedef dft_rk_ev rk_ev;

static int by_thread_start(const void *a, const void *b)
{
    const rk_ev *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->dur > y->dur ? -1 : x->dur < y->dur; /* the enclosing one first */
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int by_start(const void *a, const void *b)
{
    const dft_rk_step *x = a, *y = b;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static dft_rk_step *new_step(dft_rk_result *r, size_t *cap)
{
    if (DFT_GROW(r->steps, r->nsteps, *cap, 64) != 0)
        return NULL;
    dft_rk_step *s = &r->steps[r->nsteps++];
    memset(s, 0, sizeof *s);
    for (int c = 0; c < DFT_RK_CLASSES; c++)
        s->top_key[c] = -1;
    return s;
}

/* The steps of the chosen kind; their records marked STEP_EVENT with
 * .step = the step's index.  With only args.step, one step per (thread,
 * value): the span of those events.  Steps are kept in start order per
 * thread (the records' order), the thread in top_key[0] until the sweep. */
static int build_steps(dft_rk_result *r, rk_ev *ev, size_t nev, int kind)
{
    size_t cap = 0;
    if (kind != DFT_RK_KIND_ARGS) {
        for (size_t i = 0; i < nev; i++) {
            rk_ev *e = &ev[i];
            if (e->kind != kind)
                continue;
            dft_rk_step *s = new_step(r, &cap);
            if (!s)
                return -1;
            s->number = e->step;
            s->ts = e->ts;
            s->dur = e->dur;
            s->top_key[0] = e->tid;
            e->kind = STEP_EVENT;
            e->step = (int32_t)(r->nsteps - 1);
        }
        return 0;
    }
    dft_u64map spans = {0};
    size_t slot, first = 0;
    for (size_t i = 0; i <= nev; i++) {
        if (i == nev || (i > 0 && ev[i].tid != ev[i - 1].tid)) {
            /* a thread's spans: in start order */
            if (r->nsteps - first > 1)
                qsort(r->steps + first, r->nsteps - first, sizeof *r->steps, by_start);
            first = r->nsteps;
            dft_u64map_free(&spans, 0);
            memset(&spans, 0, sizeof spans);
            if (i == nev)
                break;
        }
        rk_ev *e = &ev[i];
        if (e->step == DFT_RK_NO_STEP)
            continue;
        int f = dft_u64map_get(&spans, (uint64_t)(uint32_t)e->step, 1, &slot);
        if (f < 0)
            goto oom;
        if (!f) {
            dft_rk_step *s = new_step(r, &cap);
            if (!s)
                goto oom;
            s->number = e->step;
            s->ts = e->ts;
            s->dur = e->dur;
            s->top_key[0] = e->tid;
            spans.vals[slot] = (void *)(intptr_t)r->nsteps;
            continue;
        }
        dft_rk_step *s = &r->steps[(intptr_t)spans.vals[slot] - 1];
        int64_t end = s->ts + s->dur > e->ts + e->dur ? s->ts + s->dur : e->ts + e->dur;
        s->ts = e->ts < s->ts ? e->ts : s->ts;
        s->dur = end - s->ts;
    }
    return 0;
oom:
    dft_u64map_free(&spans, 0);
    return -1;
}

/* Step numbers as the events give them when they are all there and
 * distinct; else the steps' order (0-based) by start. */
static int number_steps(dft_rk_result *r)
{
    if (r->nsteps == 0)
        return 0;
    int64_t *nums = malloc(r->nsteps * sizeof *nums);
    if (!nums)
        return -1;
    int ok = 1;
    for (size_t i = 0; i < r->nsteps; i++) {
        nums[i] = r->steps[i].number;
        ok &= nums[i] != DFT_RK_NO_STEP;
    }
    if (r->nsteps > 1)
        qsort(nums, r->nsteps, sizeof *nums, cmp_i64);
    for (size_t i = 1; ok && i < r->nsteps; i++)
        ok = nums[i] != nums[i - 1];
    if (!ok) {
        for (size_t i = 0; i < r->nsteps; i++)
            nums[i] = r->steps[i].ts;
        if (r->nsteps > 1)
            qsort(nums, r->nsteps, sizeof *nums, cmp_i64);
        for (size_t i = 0; i < r->nsteps; i++) { /* rank of its start among all starts */
            size_t lo = 0, hi = r->nsteps;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (nums[mid] < r->steps[i].ts)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            r->steps[i].number = (int64_t)lo;
        }
    }
    free(nums);
    return 0;
}


/* The union of the comm events' intervals, merged and in order, with the
 * time covered before each: covered(x) is the comm time before x. */
typedef struct busy {
    int64_t *lo, *hi, *cum; /* cum[i]: covered time of intervals 0..i */
    size_t n;
} busy;

static int by_ts(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int busy_build(busy *b, const dft_rk_result *r, const rk_ev *ev, size_t nev)
{
    size_t n = 0;
    memset(b, 0, sizeof *b);
    for (size_t i = 0; i < nev; i++)
        n += r->keys[ev[i].key].cls == DFT_RK_COMM && ev[i].dur > 0;
    if (n == 0)
        return 0;
    int64_t *iv = malloc(n * 2 * sizeof *iv);
    b->lo = malloc(n * sizeof *b->lo);
    b->hi = malloc(n * sizeof *b->hi);
    b->cum = malloc(n * sizeof *b->cum);
    if (!iv || !b->lo || !b->hi || !b->cum) {
        free(iv);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < nev; i++)
        if (r->keys[ev[i].key].cls == DFT_RK_COMM && ev[i].dur > 0) {
            iv[2 * k] = ev[i].ts;
            iv[2 * k + 1] = ev[i].ts + ev[i].dur;
            k++;
        }
    qsort(iv, n, 2 * sizeof *iv, by_ts);
    for (size_t i = 0; i < n; i++) {
        if (b->n && iv[2 * i] <= b->hi[b->n - 1]) {
            if (iv[2 * i + 1] > b->hi[b->n - 1])
                b->hi[b->n - 1] = iv[2 * i + 1];
            continue;
        }
        b->lo[b->n] = iv[2 * i];
        b->hi[b->n++] = iv[2 * i + 1];
    }
    for (size_t i = 0; i < b->n; i++)
        b->cum[i] = (i ? b->cum[i - 1] : 0) + b->hi[i] - b->lo[i];
    free(iv);
    return 0;
}

static int64_t busy_before(const busy *b, int64_t x)
{
    size_t lo = 0, hi = b->n; /* the intervals starting before x: [0, lo) */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b->lo[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    return b->cum[lo - 1] - (b->hi[lo - 1] > x ? b->hi[lo - 1] - x : 0);
}

static void busy_free(busy *b)
{
    free(b->lo);
    free(b->hi);
    free(b->cum);
}

/* The top (cat, name) of each class in each step: the events bucketed by
 * step (a counting sort: steps are numbered 0..nsteps-1), then each step's
 * sums per key in one dense array.  Ties go to the lower key index. */
static int top_keys(dft_rk_result *r, const rk_ev *ev, size_t nev)
{
    if (!r->nsteps || !nev)
        return 0;
    size_t *first = calloc(r->nsteps + 1, sizeof *first);
    size_t *order = malloc(nev * sizeof *order);
    int64_t *sum = calloc(r->nkeys ? r->nkeys : 1, sizeof *sum);
    int32_t *seen = malloc((r->nkeys ? r->nkeys : 1) * sizeof *seen);
    int32_t *keys = malloc((r->nkeys ? r->nkeys : 1) * sizeof *keys);
    int rc = -1;
    if (!first || !order || !sum || !seen || !keys)
        goto out;
    for (size_t k = 0; k < r->nkeys; k++)
        seen[k] = -1;
    for (size_t i = 0; i < nev; i++)
        if (ev[i].step >= 0)
            first[ev[i].step + 1]++;
    for (size_t st = 0; st < r->nsteps; st++)
        first[st + 1] += first[st];
    for (size_t i = 0; i < nev; i++)
        if (ev[i].step >= 0)
            order[first[ev[i].step]++] = i;
    /* first[st] is now where step st + 1 begins */
    for (size_t st = 0, at = 0; st < r->nsteps; st++) {
        size_t nk = 0;
        for (; at < first[st]; at++) {
            const rk_ev *e = &ev[order[at]];
            if (seen[e->key] != (int32_t)st) {
                seen[e->key] = (int32_t)st;
                sum[e->key] = 0;
                keys[nk++] = e->key;
            }
            sum[e->key] += e->dur;
        }
        dft_rk_step *s = &r->steps[st];
        for (size_t i = 0; i < nk; i++) {
            int32_t k = keys[i];
            int c = r->keys[k].cls;
            if (sum[k] > s->top_us[c] || (sum[k] == s->top_us[c] && sum[k] > 0 && k < s->top_key[c])) {
                s->top_us[c] = sum[k];
                s->top_key[c] = k;
            }
        }
    }
    rc = 0;
out:
    free(first);
    free(order);
    free(sum);
    free(seen);
    free(keys);
    return rc;
}

/* Self times per thread; each event's goes to its key and to the step it
 * starts in.  ev is sorted by thread and start; steps by thread and start. */
static int sweep(dft_rk_result *r, rk_ev *ev, size_t nev)
{
    int64_t *self = malloc((nev ? nev : 1) * sizeof *self);
    int64_t *wait = malloc((nev ? nev : 1) * sizeof *wait); /* self time under comm */
    size_t *stack = malloc((nev ? nev : 1) * sizeof *stack);
    busy comm;
    if (!self || !wait || !stack || busy_build(&comm, r, ev, nev) < 0) {
        free(self);
        free(wait);
        free(stack);
        busy_free(&comm);
        return -1;
    }
    size_t sp = 0, st = 0;
    for (size_t i = 0; i < nev; i++) {
        rk_ev *e = &ev[i];
        if (i == 0 || e->tid != ev[i - 1].tid) {
            sp = 0;
            while (st < r->nsteps && r->steps[st].top_key[0] < e->tid)
                st++;
        }
        int64_t end = e->ts + e->dur;
        while (sp > 0 && ev[stack[sp - 1]].ts + ev[stack[sp - 1]].dur < end)
            sp--;
        int64_t ov = comm.n ? busy_before(&comm, end) - busy_before(&comm, e->ts) : 0;
        if (sp > 0) {
            self[stack[sp - 1]] -= e->dur;
            wait[stack[sp - 1]] -= ov;
        }
        self[i] = e->dur;
        wait[i] = ov;
        stack[sp++] = i;
        if (e->kind == STEP_EVENT)
            continue;
        while (st < r->nsteps && r->steps[st].top_key[0] == e->tid &&
               r->steps[st].ts + r->steps[st].dur <= e->ts)
            st++;
        int in = st < r->nsteps && r->steps[st].top_key[0] == e->tid && r->steps[st].ts <= e->ts;
        e->step = in ? (int32_t)st : -1;
    }
    for (size_t i = 0; i < nev; i++) {
        rk_ev *e = &ev[i];
        int64_t s = self[i] > 0 ? self[i] : 0; /* overlapping children: none left */
        dft_rk_key *k = &r->keys[e->key];
        k->self_all += s;
        e->dur = s;
        if (e->kind == STEP_EVENT)
            e->step = -1; /* the step's own self time: the untraced rest, below */
        else if (e->step >= 0) {
            k->self_steps += s;
            int64_t w = k->cls == DFT_RK_COMPUTE && wait[i] > 0 ? wait[i] : 0;
            w = w < s ? w : s;
            r->steps[e->step].by_class[k->cls] += s - w;
            r->steps[e->step].by_class[DFT_RK_COMM] += w;
            e->dur = s - w; /* the top compute event: by its own compute */
        }
    }
    free(self);
    free(wait);
    free(stack);
    busy_free(&comm);
    for (size_t i = 0; i < r->nsteps; i++) {
        dft_rk_step *s = &r->steps[i];
        int64_t traced = 0;
        for (int c = 0; c < DFT_RK_CLASSES; c++)
            traced += s->by_class[c];
        if (s->dur > traced)
            s->by_class[DFT_RK_OTHER] += s->dur - traced;
        s->top_key[0] = -1;
    }
    return top_keys(r, ev, nev);
}

int dft_rk_steps(dft_rk_result *r, dft_rk_ev *ev, size_t nev, int kind)
{
    static const char *const names[DFT_RK_NKINDS] = {NULL,       "named", "iteration",
                                                     "profiler", "train", "args"};
    /* ev is NULL for a file without complete events; a thread whose events
     * do not nest was written in this order already, and the check costs a
     * tenth of the sort it saves */
    size_t i = 1;
    while (i < nev && by_thread_start(&ev[i - 1], &ev[i]) <= 0)
        i++;
    if (i < nev)
        qsort(ev, nev, sizeof *ev, by_thread_start);
    if (kind && (build_steps(r, ev, nev, kind) < 0 || number_steps(r) < 0))
        return -1;
    r->step_kind = r->nsteps ? names[kind] : NULL;
    return sweep(r, ev, nev);
}

