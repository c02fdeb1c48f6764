/* reader/memory.c: the memory pass.  One streaming read of a trace keeps
 * its `memory` counter samples (docs/trace-format.md, "Memory"), the memory
 * limit, whether it finalized (`end`, and the signal it names) or wrote the
 * SIGTERM marker (a `stack` event with why SIGTERM), the span of its events' times, and the
 * complete events that took most time (per cat/name).  Pure C; no GIL, no
 * Python. */
#include "reader/memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

enum { A_RSS = 1, A_STEP = 2, A_LIMIT = 4, A_WHY_TERM = 8, A_SOURCE = 16, A_VALUE_LIMIT = 32 };

typedef struct margs {
    unsigned have;
    int64_t rss, step, limit;
    dft_sv source;
} margs;

static void arg(void *ctx, dft_sv key, const char *v, const char *vend, dft_sv str, int is_str)
{
    margs *a = ctx;
    if (is_str) {
        if (SV_IS(key, "why") && SV_IS(str, "SIGTERM"))
            a->have |= A_WHY_TERM;
        else if (SV_IS(key, "source")) {
            a->source = str;
            a->have |= A_SOURCE;
        } else if (SV_IS(key, "value") && SV_IS(str, "limit"))
            a->have |= A_VALUE_LIMIT;
        return;
    }
    if (SV_IS(key, "rss_bytes") && dft_members_int(v, vend, &a->rss) == 0)
        a->have |= A_RSS;
    else if (SV_IS(key, "step") && dft_members_int(v, vend, &a->step) == 0)
        a->have |= A_STEP;
    else if (SV_IS(key, "limit_bytes") && dft_members_int(v, vend, &a->limit) == 0)
        a->have |= A_LIMIT;
}

/* Working state of one read: the spans by cat/name in an open-addressed
 * table of cap slots (cap a power of two). */
typedef struct pass {
    dft_mp_result *r;
    size_t cap_samples;
    dft_mp_span *tab;
    uint64_t *hashes; /* 0: empty slot */
    size_t cap, used;
} pass;

static uint64_t key_hash(dft_sv cat, dft_sv name)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < cat.n; i++)
        h = (h ^ (unsigned char)cat.p[i]) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (size_t i = 0; i < name.n; i++)
        h = (h ^ (unsigned char)name.p[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static char *dup_sv(dft_sv v)
{
    char *s = malloc(v.n + 1);
    if (s) {
        memcpy(s, v.p, v.n);
        s[v.n] = 0;
    }
    return s;
}

static int grow_table(pass *ps)
{
    size_t ncap = ps->cap ? ps->cap * 2 : 256;
    dft_mp_span *tab = calloc(ncap, sizeof *tab);
    uint64_t *hs = calloc(ncap, sizeof *hs);
    if (!tab || !hs) {
        free(tab);
        free(hs);
        return -1;
    }
    for (size_t i = 0; i < ps->cap; i++) {
        if (!ps->hashes[i])
            continue;
        size_t j = ps->hashes[i] & (ncap - 1);
        while (hs[j])
            j = (j + 1) & (ncap - 1);
        hs[j] = ps->hashes[i];
        tab[j] = ps->tab[i];
    }
    free(ps->tab);
    free(ps->hashes);
    ps->tab = tab;
    ps->hashes = hs;
    ps->cap = ncap;
    return 0;
}

static int add_span(pass *ps, dft_sv cat, dft_sv name, int64_t dur)
{
    if ((ps->used + 1) * 2 > ps->cap && grow_table(ps) < 0)
        return -1;
    uint64_t h = key_hash(cat, name);
    size_t j = h & (ps->cap - 1);
    for (;; j = (j + 1) & (ps->cap - 1)) {
        dft_mp_span *s = &ps->tab[j];
        if (!ps->hashes[j]) {
            s->cat = dup_sv(cat);
            s->name = dup_sv(name);
            if (!s->cat || !s->name) {
                free(s->cat);
                free(s->name);
                s->cat = s->name = NULL;
                return -1;
            }
            s->cat_len = cat.n;
            s->name_len = name.n;
            ps->hashes[j] = h;
            ps->used++;
            break;
        }
        if (ps->hashes[j] == h && s->cat_len == cat.n && s->name_len == name.n &&
            memcmp(s->cat, cat.p, cat.n) == 0 && memcmp(s->name, name.p, name.n) == 0)
            break;
    }
    ps->tab[j].count++;
    ps->tab[j].total += dur;
    return 0;
}

static int add_sample(pass *ps, int64_t ts, const margs *a)
{
    dft_mp_result *r = ps->r;
    if (r->nsamples >= DFT_MP_SAMPLES_MAX) {
        r->dropped++;
        return 0;
    }
    if (r->nsamples == ps->cap_samples) {
        size_t n = ps->cap_samples ? ps->cap_samples * 2 : 1024;
        dft_mp_sample *s = realloc(r->samples, n * sizeof *s);
        if (!s)
            return -1;
        r->samples = s;
        ps->cap_samples = n;
    }
    r->samples[r->nsamples++] = (dft_mp_sample){ts, a->rss, (a->have & A_STEP) ? a->step : -1};
    return 0;
}

static void see_ts(dft_mp_result *r, int64_t lo, int64_t hi)
{
    if (!r->have_ts || lo < r->ts_min)
        r->ts_min = lo;
    if (!r->have_ts || hi > r->ts_max)
        r->ts_max = hi;
    r->have_ts = 1;
}

static int line(pass *ps, const dft_line *l)
{
    dft_mp_result *r = ps->r;
    margs a;
    memset(&a, 0, sizeof a);
    if (dft_ident_line(&r->who, l)) {
        if (SV_IS(l->name, "stack") && dft_line_args(l, arg, &a) == 0 &&
            (a.have & A_WHY_TERM))
            r->sigterm = 1;
        else if (SV_IS(l->name, "memory") && dft_line_args(l, arg, &a) == 0 &&
                 (a.have & (A_VALUE_LIMIT | A_LIMIT)) == (A_VALUE_LIMIT | A_LIMIT)) {
            r->have_limit = 1;
            r->limit = a.limit;
            dft_copy_sv(r->limit_source, sizeof r->limit_source,
                        (a.have & A_SOURCE) ? a.source : (dft_sv){"", 0});
        }
        return 0;
    }
    if (!(l->have & DFT_HAVE_TS))
        return 0;
    if ((l->have & DFT_HAVE_PID) && r->who.have_pid && l->pid != r->who.pid)
        return 0; /* a device lane */
    if (l->ph == 'C') {
        see_ts(r, l->ts, l->ts);
        if (SV_IS(l->name, "memory") && dft_line_args(l, arg, &a) == 0 &&
            (a.have & A_RSS) && a.rss >= 0)
            return add_sample(ps, l->ts, &a);
        return 0;
    }
    if (l->ph != 'X' || !(l->have & DFT_HAVE_DUR) || !dft_dur_ok(l->ts, l->dur)) {
        if (l->ph == 'i')
            see_ts(r, l->ts, l->ts);
        return 0;
    }
    see_ts(r, l->ts, l->ts + l->dur);
    if (SV_IS(l->cat, "dftracer")) {
        if (SV_IS(l->name, "end")) {
            r->finalized = 1;
            r->end_signal = dft_end_signal(l);
        }
        return 0;
    }
    return add_span(ps, l->cat, l->name, l->dur);
}

/* The DFT_MP_SPANS spans of most total time into r->spans (the others freed). */
static void keep_top(pass *ps)
{
    dft_mp_result *r = ps->r;
    for (size_t i = 0; i < ps->cap; i++) {
        if (!ps->hashes[i])
            continue;
        dft_mp_span s = ps->tab[i];
        size_t k = r->nspans;
        if (k == DFT_MP_SPANS) {
            if (s.total <= r->spans[k - 1].total) {
                free(s.cat);
                free(s.name);
                continue;
            }
            free(r->spans[k - 1].cat);
            free(r->spans[k - 1].name);
            k--;
        } else {
            r->nspans++;
        }
        while (k > 0 && r->spans[k - 1].total < s.total) {
            r->spans[k] = r->spans[k - 1];
            k--;
        }
        r->spans[k] = s;
    }
    free(ps->tab);
    free(ps->hashes);
}

int dft_mp_read(const char *path, dft_mp_result *r)
{
    memset(r, 0, sizeof *r);
    dft_ident_init(&r->who);
    r->limit = -1;
    dft_rd rd;
    if (dft_rd_open(&rd, path) < 0)
        return -1;
    pass ps;
    memset(&ps, 0, sizeof ps);
    ps.r = r;
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_status st;
    int oom = 0;
    while (!oom && (st = dft_rd_next_parsed(&rd, &text, &n, &l, &r->bad)) == DFT_RD_OK) {
        r->events++;
        oom = line(&ps, &l) < 0;
    }
    r->members = rd.members;
    r->long_lines = rd.long_lines;
    if (!oom && st != DFT_RD_EOF)
        snprintf(r->err, sizeof r->err, "%s", rd.err);
    dft_rd_close(&rd);
    keep_top(&ps);
    r->status = oom ? -1 : (int)st;
    if (oom)
        snprintf(r->err, sizeof r->err, "out of memory");
    return 0;
}

void dft_mp_free(dft_mp_result *r)
{
    for (size_t i = 0; i < r->nspans; i++) {
        free(r->spans[i].cat);
        free(r->spans[i].name);
    }
    free(r->samples);
    memset(r, 0, sizeof *r);
}
