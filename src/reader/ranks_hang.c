/* reader/ranks_hang.c: the ranks pass's view of what a process was inside
 * of (reader/ranks_hang.h), read from its `open`, `stack`, `FH` and `clock`
 * metadata events (docs/trace-format.md, "Open spans", "Stacks").  The rule
 * of a reader: a thread's snapshot with the largest `at` stands, taken as it
 * is; the stack answer with the largest (`at`, `req`) stands.  Values of the
 * wrong type are absent (a `depth` written as a string is no depth), so no
 * input makes the caller's rule compare a string with a number.  Memory: at
 * most DFT_HG_THREADS snapshots, DFT_HG_STACKS frame texts and DFT_HG_FILES
 * paths, whatever the file holds.  Pure C; no GIL, no Python. */
#include "reader/ranks_hang.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/identity.h"

#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

enum { H_AT = 1, H_N = 2, H_DEPTH = 4, H_SINCE = 8, H_SEQ = 16, H_STEP = 32, H_REQ = 64,
       H_VALUE = 128, H_CAT = 256, H_GROUP = 512, H_FHASH = 1024, H_WHY = 2048,
       H_FRAMES = 4096, H_BUCKET = 8192 };

typedef struct hg_args {
    unsigned have;
    int64_t at, n, depth, since, seq, step, req, bucket;
    dft_sv value, cat, group, fhash, why, frames;
} hg_args;

static void arg_value(void *ctx, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
#define INT(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(hg_args, f), DFT_ARG_FIELD_INT)
#define STR(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(hg_args, f), DFT_ARG_FIELD_STR)
    static const dft_arg_field fields[] = {
        INT("at", H_AT, at), INT("n", H_N, n), INT("depth", H_DEPTH, depth),
        INT("since", H_SINCE, since), INT("seq", H_SEQ, seq), INT("step", H_STEP, step),
        INT("req", H_REQ, req), INT("bucket", H_BUCKET, bucket), STR("value", H_VALUE, value),
        STR("span_cat", H_CAT, cat), STR("group", H_GROUP, group), STR("fhash", H_FHASH, fhash),
        STR("why", H_WHY, why), STR("frames", H_FRAMES, frames),
    };
#undef INT
#undef STR
    hg_args *a = ctx;
    static dft_arg_table table = DFT_ARG_TABLE(fields);
    dft_arg_table_read(&table, a, &a->have, key, vp, vend, str, is_str);
}

enum { M_RSS = 1, M_STEP = 2 };

typedef struct mem_args {
    unsigned have;
    int64_t rss, step;
} mem_args;

static void mem_value(void *ctx, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
    static const dft_arg_field fields[] = {
        DFT_ARG_FIELD("rss_bytes", M_RSS, offsetof(mem_args, rss), DFT_ARG_FIELD_INT),
        DFT_ARG_FIELD("step", M_STEP, offsetof(mem_args, step), DFT_ARG_FIELD_INT),
    };
    mem_args *a = ctx;
    static dft_arg_table table = DFT_ARG_TABLE(fields);
    dft_arg_table_read(&table, a, &a->have, key, vp, vend, str, is_str);
}

void dft_hg_memory(dft_hg *hg, const dft_line *l)
{
    mem_args a;
    memset(&a, 0, sizeof a);
    if (dft_line_args(l, mem_value, &a) < 0 || !(a.have & M_RSS) || a.rss < 0)
        return;
    hg->have_rss = 1;
    hg->rss = a.rss;
    if (a.have & M_STEP) {
        size_t k = hg->nmem++ % DFT_HG_MEM_STEPS;
        hg->mem_step[k] = a.step;
        hg->mem_rss[k] = a.rss;
    }
}

void dft_hg_seen(dft_hg *hg, int64_t at)
{
    if (!hg->have_last || at > hg->last_at)
        hg->last_at = at;
    hg->have_last = 1;
}

/* The thread tid's snapshot slot: found, added, or the one whose snapshot is
 * oldest (when at is newer); NULL when none is given up for it. */
static dft_hg_thread *thread_of(dft_hg *hg, int64_t tid, int64_t at)
{
    size_t oldest = 0;
    for (size_t i = 0; i < hg->nthreads; i++) {
        if (hg->threads[i].tid == tid)
            return &hg->threads[i];
        if (hg->threads[i].at < hg->threads[oldest].at)
            oldest = i;
    }
    dft_hg_thread *t = NULL;
    if (hg->nthreads < DFT_HG_THREADS &&
        DFT_GROW(hg->threads, hg->nthreads, hg->threads_cap, 4) == 0) {
        t = &hg->threads[hg->nthreads++];
    } else {
        hg->dropped++;
        if (!hg->nthreads || at <= hg->threads[oldest].at)
            return NULL;
        t = &hg->threads[oldest];
    }
    t->tid = tid;
    t->at = INT64_MIN;
    t->nspans = 0;
    return t;
}

static void open_event(dft_hg *hg, const dft_line *l, const hg_args *a)
{
    if (!(a->have & H_AT) || !(l->have & DFT_HAVE_TID))
        return;
    dft_hg_seen(hg, a->at);
    dft_hg_thread *t = thread_of(hg, l->tid, a->at);
    if (!t || a->at < t->at)
        return; /* an older snapshot than the one that stands */
    if (a->at > t->at) {
        t->at = a->at;
        t->nspans = 0;
    }
    if (!(a->have & H_N) || a->n <= 0 || !(a->have & H_VALUE))
        return; /* "nothing open any more" */
    if (t->nspans >= DFT_HG_SPANS) {
        hg->dropped++;
        return;
    }
    dft_hg_span *s = &t->spans[t->nspans++];
    memset(s, 0, sizeof *s);
    dft_copy_sv(s->value, sizeof s->value, a->value);
    if (a->have & H_CAT) {
        dft_copy_sv(s->cat, sizeof s->cat, a->cat);
        s->have |= DFT_HG_CAT;
    }
    if (a->have & H_GROUP) {
        dft_copy_sv(s->group, sizeof s->group, a->group);
        s->have |= DFT_HG_GROUP_SET;
    }
    if ((a->have & H_FHASH) && dft_hash_token(a->fhash, &s->fhash) == 0)
        s->have |= DFT_HG_FHASH;
    static const struct {
        unsigned from, to;
        size_t src, dst;
    } ints[] = {
        {H_DEPTH, DFT_HG_DEPTH, offsetof(hg_args, depth), offsetof(dft_hg_span, depth)},
        {H_SINCE, DFT_HG_SINCE, offsetof(hg_args, since), offsetof(dft_hg_span, since)},
        {H_SEQ, DFT_HG_SEQ, offsetof(hg_args, seq), offsetof(dft_hg_span, seq)},
        {H_STEP, DFT_HG_STEP, offsetof(hg_args, step), offsetof(dft_hg_span, step)},
        {H_BUCKET, DFT_HG_BUCKET, offsetof(hg_args, bucket), offsetof(dft_hg_span, bucket)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (a->have & ints[i].from) {
            memcpy((char *)s + ints[i].dst, (const char *)a + ints[i].src, sizeof(int64_t));
            s->have |= ints[i].to;
        }
}

static void clear_stacks(dft_hg *hg)
{
    for (size_t i = 0; i < hg->nstacks; i++)
        free(hg->stacks[i].frames);
    hg->nstacks = 0;
}

/* The innermost end of a frames text: at most DFT_HG_FRAMES - 1 bytes, from
 * just past a line break (an escaped "\n") when it had to be cut. */
static char *frames_tail(dft_sv f)
{
    const char *p = f.p;
    size_t n = f.n;
    if (n >= DFT_HG_FRAMES) {
        p = f.p + (n - (DFT_HG_FRAMES - 1));
        n = DFT_HG_FRAMES - 1;
        for (size_t i = 0; i + 1 < n; i++)
            if (p[i] == '\\' && p[i + 1] == 'n') {
                p += i + 2;
                n -= i + 2;
                break;
            }
    }
    char *out = malloc(n + 1);
    if (out)
        dft_copy_sv(out, n + 1, (dft_sv){p, n});
    return out;
}

static void stack_event(dft_hg *hg, const dft_line *l, const hg_args *a)
{
    if (!(a->have & H_AT))
        return;
    dft_hg_seen(hg, a->at);
    int64_t req = (a->have & H_REQ) ? a->req : 0;
    if ((a->have & H_WHY) && SV_IS(a->why, "SIGTERM"))
        hg->sigterm = 1;
    if (hg->have_stack && (a->at != hg->stack_at || req != hg->stack_req)) {
        if (a->at < hg->stack_at || (a->at == hg->stack_at && req < hg->stack_req))
            return; /* an older answer */
        clear_stacks(hg);
    }
    hg->have_stack = 1;
    hg->stack_at = a->at;
    hg->stack_req = req;
    int64_t tid = (l->have & DFT_HAVE_TID) ? l->tid : -1;
    dft_hg_stack *s = NULL;
    for (size_t i = 0; i < hg->nstacks && !s; i++)
        if (hg->stacks[i].tid == tid)
            s = &hg->stacks[i];
    if (!s) {
        if (hg->nstacks >= DFT_HG_STACKS) {
            hg->dropped++;
            return;
        }
        s = &hg->stacks[hg->nstacks++];
        s->frames = NULL;
    }
    free(s->frames);
    s->tid = tid;
    dft_copy_sv(s->name, sizeof s->name, (a->have & H_VALUE) ? a->value : (dft_sv){"", 0});
    dft_copy_sv(s->why, sizeof s->why, (a->have & H_WHY) ? a->why : (dft_sv){"", 0});
    s->frames = frames_tail((a->have & H_FRAMES) ? a->frames : (dft_sv){"", 0});
    if (!s->frames)
        hg->dropped++;
}

static const char *file_in(const dft_u64map *m, uint64_t h)
{
    size_t slot;
    dft_u64map *mm = (dft_u64map *)m; /* a lookup does not change it */
    return dft_u64map_get(mm, h, 0, &slot) == 1 ? mm->vals[slot] : NULL;
}

static void fh_event(dft_hg *hg, const dft_line *l)
{
    uint64_t h;
    size_t slot;
    if (!l->a_name.n || dft_hash_token(l->a_value, &h) < 0)
        return;
    if (file_in(&hg->older_files, h)) /* known: the first definition stands */
        return;
    if (hg->nfiles >= DFT_HG_FILES / 2 && !file_in(&hg->files, h)) {
        dft_u64map_free(&hg->older_files, 1);
        hg->older_files = hg->files;
        memset(&hg->files, 0, sizeof hg->files);
        hg->dropped += hg->nolder_files; /* the older generation's, forgotten */
        hg->nolder_files = hg->nfiles;
        hg->nfiles = 0;
    }
    int f = dft_u64map_get(&hg->files, h, 1, &slot);
    if (f != 0) { /* known, or out of memory */
        hg->dropped += f < 0;
        return;
    }
    size_t n = l->a_name.n < DFT_HG_PATH ? l->a_name.n : DFT_HG_PATH - 1;
    char *path = malloc(n + 1);
    if (!path) { /* the slot keeps NULL: looked up as unknown */
        hg->dropped++;
        return;
    }
    dft_copy_sv(path, n + 1, l->a_name);
    hg->files.vals[slot] = path;
    hg->nfiles++;
}

void dft_hg_line(dft_hg *hg, const dft_line *l)
{
    if (l->ph != 'M' || !SV_IS(l->cat, "dftracer"))
        return;
    int open = SV_IS(l->name, "open"), stack = SV_IS(l->name, "stack");
    if (SV_IS(l->name, "FH")) {
        fh_event(hg, l);
        return;
    }
    if (!open && !stack)
        return;
    hg_args a;
    memset(&a, 0, sizeof a);
    if (dft_line_args(l, arg_value, &a) < 0)
        return;
    if (open)
        open_event(hg, l, &a);
    else
        stack_event(hg, l, &a);
}

const char *dft_hg_file(const dft_hg *hg, uint64_t h)
{
    const char *p = file_in(&hg->files, h);
    return p ? p : file_in(&hg->older_files, h);
}

void dft_hg_free(dft_hg *hg)
{
    clear_stacks(hg);
    free(hg->threads);
    dft_u64map_free(&hg->files, 1);
    dft_u64map_free(&hg->older_files, 1);
    memset(hg, 0, sizeof *hg);
}
