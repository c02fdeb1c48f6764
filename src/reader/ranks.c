/* reader/ranks.c: one trace file seen as one rank of a job.
 *
 * One streaming pass collects the file's identity (host, pid, ppid, the
 * `rank` and `clock` metadata), its sync points (comm events with `group`
 * and `seq` args that are not `async`, or are DDP buckets: docs/trace-format.md,
 * "Ranks and clocks"; and the newest of each group) and its complete events
 * as 32-byte records.  Then, per thread,
 * the events sorted by start give each event its self time (its duration
 * minus that of the events nested in it), and each event's self time goes
 * to the step it starts in, split into classes (compute, data, io, comm,
 * checkpoint, other; the step time no event covers is other).
 *
 * Steps are, by priority: the events --step names, `pipeline/iteration`
 * (args.step), torch.profiler's `ProfilerStep#N`, `pipeline/train.block`
 * (ai.pipeline loops); else, the span of the events of each thread that
 * carry the same args.step; reader/ranks_steps.c splits them.  Memory: the
 * records (about 44 bytes an event with the sweep's arrays) and one entry per
 * distinct (cat, name); the hang state (reader/ranks_hang.c) is bounded.  No
 * GIL, no Python (reader/ranks_py.c turns the result into Python data). */
#include "reader/ranks.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/reader.h"

typedef dft_rk_ev rk_ev;

typedef struct pass {
    dft_rk_result *r;
    const char *step_name;
    size_t step_name_len;
    int sync_only; /* merge: the sync points and identity, no records */
    int32_t *kslots; /* open addressing over keys: index + 1 */
    uint64_t *khash;
    size_t kslot_cap, keys_cap;
    dft_u64map tids;
    int32_t ntids;
    rk_ev *ev;
    size_t nev, evcap;
    /* steps' scheduling, and where their untraced time went (hang/sampler.h) */
    struct rk_sched { int64_t number, cpu_us, wait_us, sampled_us; int32_t sampled; } *sched;
    size_t nsched, schedcap;
    int oom;
    uint64_t kinds[DFT_RK_NKINDS];
} pass;

#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

/* ---- args -------------------------------------------------------------- */

enum { A_STEP = 1, A_SEQ = 2, A_ASYNC = 4, A_VALUE = 8, A_LOCAL = 16, A_WORLD = 32,
       A_PPID = 64, A_WALL = 128, A_GROUP = 256, A_JOB = 512, A_SOURCE = 1024,
       A_DDP = 2048, A_CPU = 4096, A_WAIT = 8192, A_SAMPLED = 16384, A_SAMPLED_US = 32768 };

typedef struct rk_args {
    unsigned have;
    int64_t step, seq, async, value, local_rank, world_size, ppid, wall_us, ddp_bucket, cpu_us,
        wait_us, sampled_us;
    dft_sv group, job_id, source, sampled;
} rk_args;

/* One member of args: the value's text in [vp, vend), or its string body. */
static void arg_value(void *ctx, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
    rk_args *a = ctx;
/* the ranks pass takes any integer written as a string too */
#define INT(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(rk_args, f), DFT_ARG_FIELD_INT_TEXT)
#define STR(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(rk_args, f), DFT_ARG_FIELD_STR)
    static const dft_arg_field fields[] = {
        INT("step", A_STEP, step), INT("seq", A_SEQ, seq), INT("async", A_ASYNC, async),
        INT("value", A_VALUE, value), INT("local_rank", A_LOCAL, local_rank),
        INT("world_size", A_WORLD, world_size), INT("ppid", A_PPID, ppid),
        INT("wall_us", A_WALL, wall_us), INT("ddp_bucket", A_DDP, ddp_bucket),
        INT("cpu_us", A_CPU, cpu_us), INT("wait_us", A_WAIT, wait_us),
        INT("sampled_us", A_SAMPLED_US, sampled_us), STR("sampled", A_SAMPLED, sampled),
        STR("group", A_GROUP, group), STR("job_id", A_JOB, job_id), STR("source", A_SOURCE, source),
    };
#undef INT
#undef STR
    static dft_arg_table table = DFT_ARG_TABLE(fields);
    dft_arg_table_read(&table, a, &a->have, key, vp, vend, str, is_str);
}

/* The members of the args object of a line that parsed as an event. */
static int scan_args(const dft_line *l, rk_args *a)
{
    memset(a, 0, sizeof *a);
    return dft_line_args(l, arg_value, a);
}

/* ---- keys, threads, records -------------------------------------------- */

static uint64_t fnv(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int grow_slots(pass *ps)
{
    size_t cap = ps->kslot_cap ? ps->kslot_cap * 2 : 256;
    int32_t *s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < ps->r->nkeys; i++) {
        size_t j = ps->khash[i] & (cap - 1);
        while (s[j])
            j = (j + 1) & (cap - 1);
        s[j] = (int32_t)i + 1;
    }
    free(ps->kslots);
    ps->kslots = s;
    ps->kslot_cap = cap;
    return 0;
}

/* The index of (cat, name) in r->keys, added when new; -1 out of memory. */
static int32_t key_of(pass *ps, dft_sv cat, dft_sv name)
{
    dft_rk_result *r = ps->r;
    if ((r->nkeys + 1) * 2 > ps->kslot_cap && grow_slots(ps) < 0)
        return -1;
    uint64_t h = fnv(fnv(1469598103934665603ull, cat.p, cat.n) ^ 0xff, name.p, name.n);
    size_t j = h & (ps->kslot_cap - 1);
    for (; ps->kslots[j]; j = (j + 1) & (ps->kslot_cap - 1)) {
        int32_t k = ps->kslots[j] - 1;
        dft_rk_key *e = &r->keys[k];
        if (ps->khash[k] == h && e->cat_len == cat.n && e->name_len == name.n &&
            dft_bytes_eq(e->cat, cat.p, cat.n) && dft_bytes_eq(e->name, name.p, name.n))
            return k;
    }
    /* keys and their hashes side by side: keys_cap is what both hold */
    size_t kcap = ps->keys_cap, hcap = ps->keys_cap;
    if (DFT_GROW(r->keys, r->nkeys, kcap, 64) != 0 ||
        DFT_GROW(ps->khash, r->nkeys, hcap, 64) != 0)
        return -1;
    ps->keys_cap = hcap;
    dft_rk_key *e = &r->keys[r->nkeys];
    memset(e, 0, sizeof *e);
    e->cat = malloc(cat.n + 1);
    e->name = malloc(name.n + 1);
    if (!e->cat || !e->name) {
        free(e->cat);
        free(e->name);
        return -1;
    }
    dft_copy_sv(e->cat, cat.n + 1, cat);
    dft_copy_sv(e->name, name.n + 1, name);
    e->cat_len = cat.n;
    e->name_len = name.n;
    e->cls = dft_cls_class(cat.p, cat.n, name.p, name.n, NULL);
    ps->khash[r->nkeys] = h;
    ps->kslots[j] = (int32_t)r->nkeys + 1;
    return (int32_t)r->nkeys++;
}

static int32_t tid_of(pass *ps, int64_t tid)
{
    size_t slot;
    int f = dft_u64map_get(&ps->tids, (uint64_t)tid, 1, &slot);
    if (f < 0)
        return -1;
    if (!f)
        ps->tids.vals[slot] = (void *)(intptr_t)(++ps->ntids);
    return (int32_t)(intptr_t)ps->tids.vals[slot] - 1;
}

/* Keeps the DFT_RK_SYNC_MAX smallest keys: a max-heap on key. */
static void sync_add(dft_rk_result *r, uint64_t key, int64_t end)
{
    dft_rk_sync *h = r->sync;
    size_t i;
    if (r->nsync < DFT_RK_SYNC_MAX) {
        i = r->nsync++;
        while (i > 0 && h[(i - 1) / 2].key < key) {
            h[i] = h[(i - 1) / 2];
            i = (i - 1) / 2;
        }
    } else if (key < h[0].key) {
        i = 0;
        for (;;) {
            size_t c = 2 * i + 1;
            if (c >= r->nsync)
                break;
            if (c + 1 < r->nsync && h[c + 1].key > h[c].key)
                c++;
            if (h[c].key <= key)
                break;
            h[i] = h[c];
            i = c;
        }
    } else {
        return;
    }
    h[i] = (dft_rk_sync){key, end};
}

/* Keeps end as its group's newest sync point (ranks.h, dft_rk_last). */
static void last_add(dft_rk_result *r, dft_sv group, int64_t seq, int64_t end)
{
    if (group.n >= DFT_RK_GROUP_MAX)
        return;
    size_t i = 0, oldest = 0;
    while (i < r->nlast && !(r->last[i].group_len == group.n &&
                             memcmp(r->last[i].group, group.p, group.n) == 0)) {
        if (r->last[i].end < r->last[oldest].end)
            oldest = i;
        i++;
    }
    if (i == r->nlast) {
        if (r->nlast < DFT_RK_LAST_MAX) {
            r->nlast++;
        } else if (end > r->last[oldest].end) {
            i = oldest;
        } else {
            return;
        }
        memcpy(r->last[i].group, group.p, group.n);
        r->last[i].group[group.n] = '\0';
        r->last[i].group_len = group.n;
        r->last[i].end = INT64_MIN;
    }
    if (end >= r->last[i].end) {
        r->last[i].seq = seq;
        r->last[i].end = end;
    }
}

/* ---- the reading pass -------------------------------------------------- */

static void metadata(pass *ps, const dft_line *l)
{
    dft_rk_result *r = ps->r;
    rk_args a;
    if (!ps->sync_only)
        dft_hg_line(&r->hang, l);
    if (SV_IS(l->name, "clock")) {
        if (scan_args(l, &a) < 0 || (a.have & (A_VALUE | A_WALL)) != (A_VALUE | A_WALL))
            return;
        dft_hg_seen(&r->hang, a.value);
        int64_t d = a.value - a.wall_us;
        if (r->clock_pairs++ == 0)
            r->clock_first = r->clock_min = r->clock_max = d;
        r->clock_min = d < r->clock_min ? d : r->clock_min;
        r->clock_max = d > r->clock_max ? d : r->clock_max;
    }
}

static int step_kind(const pass *ps, const dft_line *l, int64_t *number)
{
    if (ps->step_name) {
        size_t sn = ps->step_name_len;
        if ((l->name.n == sn && memcmp(l->name.p, ps->step_name, sn) == 0) ||
            (l->cat.n + 1 + l->name.n == sn && memcmp(ps->step_name, l->cat.p, l->cat.n) == 0 &&
             ps->step_name[l->cat.n] == '/' &&
             memcmp(ps->step_name + l->cat.n + 1, l->name.p, l->name.n) == 0))
            return DFT_RK_KIND_NAMED;
    }
    int kind = dft_cls_step_kind(l->cat.p, l->cat.n, l->name.p, l->name.n);
    if (kind == DFT_STEP_PROFILER && dft_members_int(l->name.p + 13, l->name.p + l->name.n, number) < 0)
        *number = DFT_RK_NO_STEP;
    return kind;
}

static int add_event(pass *ps, const dft_line *l)
{
    dft_rk_result *r = ps->r;
    int64_t number = DFT_RK_NO_STEP;
    int comm = SV_IS(l->cat, "comm");
    if (ps->sync_only && !comm)
        return 0;
    int kind = step_kind(ps, l, &number);
    rk_args a;
    a.have = 0;
    if ((kind || comm || (l->have & DFT_HAVE_STEP_KEY)) && scan_args(l, &a) < 0)
        a.have = 0;
    if (kind != DFT_STEP_PROFILER && (a.have & A_STEP))
        number = a.step;
    /* a sync point: a collective with group and seq that ends when it is done
     * (an async_op=True call's event is only the issue; DDP's buckets end when
     * their all-reduce completes) */
    if (comm && (a.have & (A_GROUP | A_SEQ)) == (A_GROUP | A_SEQ) &&
        (!((a.have & A_ASYNC) && a.async) || (a.have & A_DDP))) {
        char seq[24];
        int sl = snprintf(seq, sizeof seq, "%lld", (long long)a.seq);
        uint64_t h = fnv(1469598103934665603ull, a.group.p, a.group.n) ^ 0xff;
        h = fnv(h, seq, (size_t)sl) ^ 0xff;
        h = fnv(h, l->name.p, l->name.n);
        if (a.have & A_DDP) /* numbered apart from the group's other collectives */
            h = fnv(h ^ 0xff, "ddp", 3);
        sync_add(r, h, l->ts + l->dur);
        last_add(r, a.group, a.seq, l->ts + l->dur);
    }
    if (ps->sync_only)
        return 0;
    int32_t key = key_of(ps, l->cat, l->name);
    int32_t tid = tid_of(ps, (l->have & DFT_HAVE_TID) ? l->tid : 0);
    if (key < 0 || tid < 0)
        return -1;
    dft_rk_key *k = &r->keys[key];
    k->count++;
    k->total += l->dur;
    if (l->have & DFT_HAVE_IO)
        k->io_bytes += l->io_bytes;
    if (DFT_GROW(ps->ev, ps->nev, ps->evcap, 4096) != 0)
        return -1;
    int32_t step = number > INT32_MIN && number <= INT32_MAX ? (int32_t)number : DFT_RK_NO_STEP;
    ps->ev[ps->nev++] = (rk_ev){l->ts, l->dur, key, tid, step, (uint8_t)kind};
    int sched = (a.have & (A_CPU | A_WAIT)) == (A_CPU | A_WAIT) && a.cpu_us >= 0 &&
                a.wait_us >= 0;
    int sampled = (a.have & (A_SAMPLED | A_SAMPLED_US)) == (A_SAMPLED | A_SAMPLED_US) &&
                  a.sampled_us > 0 && a.sampled.n > 0;
    if (kind == DFT_RK_KIND_ITERATION && step != DFT_RK_NO_STEP && (sched || sampled)) {
        int32_t place = sampled ? key_of(ps, (dft_sv){"sampled", 7}, a.sampled) : -1;
        if ((sampled && place < 0) || DFT_GROW(ps->sched, ps->nsched, ps->schedcap, 256) != 0)
            return -1;
        ps->sched[ps->nsched++] = (struct rk_sched){step, sched ? a.cpu_us : -1,
                                                    sched ? a.wait_us : -1,
                                                    sampled ? a.sampled_us : 0, place};
    }
    ps->kinds[kind]++;
    if (kind == DFT_RK_KIND_NONE && step != DFT_RK_NO_STEP)
        ps->kinds[DFT_RK_KIND_ARGS]++;
    return 0;
}

static int read_lines(pass *ps, dft_rd *rd)
{
    dft_rk_result *r = ps->r;
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next_parsed(rd, &text, &n, &l, &r->bad)) == DFT_RD_OK) {
        r->events++;
        if (dft_ident_line(&r->who, &l)) {
            metadata(ps, &l);
            continue;
        }
        if (l.ph == 'C' && !ps->sync_only && SV_IS(l.name, "memory")) {
            dft_hg_memory(&r->hang, &l); /* a dead rank's memory: docs/hang.md */
            continue;
        }
        if (l.ph != 'X' || (l.have & (DFT_HAVE_TS | DFT_HAVE_DUR)) != (DFT_HAVE_TS | DFT_HAVE_DUR))
            continue;
        /* a bad duration (docs/cli.md, "Bad durations") is no time, no step and
         * no sync point: one would move a host's clock offset by its length */
        if (!dft_dur_ok(l.ts, l.dur))
            continue;
        if (!r->have_ts || l.ts < r->ts_min)
            r->ts_min = l.ts;
        if (!r->have_ts || l.ts + l.dur > r->end_max)
            r->end_max = l.ts + l.dur;
        r->have_ts = 1;
        if (SV_IS(l.cat, "dftracer")) {
            if (SV_IS(l.name, "end")) {
                r->finalized = 1;
                r->end_signal = dft_end_signal(&l);
            }
            continue;
        }
        if ((l.have & DFT_HAVE_PID) && l.pid != r->who.pid)
            continue; /* a device lane (GPU), not this process's threads */
        if (add_event(ps, &l) < 0)
            return -1;
    }
    r->long_lines = rd->long_lines;
    r->first_long_line = rd->first_long_line;
    return (int)st;
}

/* The kind of events that are the steps (ranks.h, DFT_RK_KIND_*). */
static int choose_kind(const pass *ps)
{
    if (ps->step_name) /* asked for by name: those events or none */
        return ps->kinds[DFT_RK_KIND_NAMED] ? DFT_RK_KIND_NAMED : DFT_RK_KIND_NONE;
    for (int k = DFT_RK_KIND_ITERATION; k < DFT_RK_NKINDS; k++)
        if (ps->kinds[k])
            return k;
    return DFT_RK_KIND_NONE;
}

/* The iterations' scheduling counters onto their steps, by number (a number
 * two iterations share gives its step none).  No GIL. */
static _Thread_local const dft_rk_result *sched_ctx;

static int by_step_number(const void *x, const void *y)
{
    int64_t a = sched_ctx->steps[*(const size_t *)x].number;
    int64_t b = sched_ctx->steps[*(const size_t *)y].number;
    return (a > b) - (a < b);
}

static int attach_sched(dft_rk_result *r, const struct rk_sched *sc, size_t n)
{
    for (size_t i = 0; i < r->nsteps; i++)
        r->steps[i].cpu_us = r->steps[i].wait_us = -1;
    if (!n || !r->nsteps)
        return 0;
    size_t *order = malloc(r->nsteps * sizeof *order);
    if (!order)
        return -1;
    for (size_t i = 0; i < r->nsteps; i++)
        order[i] = i;
    sched_ctx = r;
    qsort(order, r->nsteps, sizeof *order, by_step_number);
    for (size_t k = 0; k < n; k++) {
        size_t lo = 0, hi = r->nsteps;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (r->steps[order[mid]].number < sc[k].number)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo >= r->nsteps || r->steps[order[lo]].number != sc[k].number)
            continue;
        dft_rk_step *s = &r->steps[order[lo]];
        if (s->cpu_us >= 0 || (lo + 1 < r->nsteps && r->steps[order[lo + 1]].number == s->number)) {
            s->cpu_us = s->wait_us = -2; /* shared: none (-2 until the end) */
            continue;
        }
        s->cpu_us = sc[k].cpu_us;
        s->wait_us = sc[k].wait_us;
        /* the sampled place names the step's `other` time when it outweighs
         * the class's top event: time no event covers, found by samples */
        if (sc[k].sampled >= 0 && sc[k].sampled_us > s->top_us[DFT_RK_OTHER]) {
            s->top_key[DFT_RK_OTHER] = sc[k].sampled;
            s->top_us[DFT_RK_OTHER] = sc[k].sampled_us;
        }
    }
    for (size_t i = 0; i < r->nsteps; i++)
        if (r->steps[i].cpu_us == -2)
            r->steps[i].cpu_us = r->steps[i].wait_us = -1;
    free(order);
    return 0;
}

int dft_rk_read(const char *path, const char *step_name, int sync_only, dft_rk_result *r)
{
    memset(r, 0, sizeof *r);
    dft_ident_init(&r->who);
    dft_rd rd;
    if (dft_rd_open(&rd, path) < 0)
        return -1;
    pass ps;
    memset(&ps, 0, sizeof ps);
    ps.r = r;
    ps.step_name = step_name && *step_name ? step_name : NULL;
    ps.step_name_len = ps.step_name ? strlen(ps.step_name) : 0;
    ps.sync_only = sync_only;
    r->sync = malloc(DFT_RK_SYNC_MAX * sizeof *r->sync);
    int st = r->sync ? read_lines(&ps, &rd) : -1;
    r->members = rd.members;
    if (st >= 0 && st != DFT_RD_EOF)
        snprintf(r->err, sizeof r->err, "%s", rd.err);
    dft_rd_close(&rd);
    int kind = choose_kind(&ps);
    if (st >= 0 && dft_rk_steps(r, ps.ev, ps.nev, kind) < 0)
        st = -1;
    if (st >= 0 && attach_sched(r, kind == DFT_RK_KIND_ITERATION ? ps.sched : NULL,
                                kind == DFT_RK_KIND_ITERATION ? ps.nsched : 0) < 0)
        st = -1;
    r->status = st;
    if (st < 0)
        snprintf(r->err, sizeof r->err, "out of memory");
    free(ps.ev);
    free(ps.sched);
    free(ps.kslots);
    free(ps.khash);
    dft_u64map_free(&ps.tids, 0);
    return 0;
}

void dft_rk_free(dft_rk_result *r)
{
    for (size_t i = 0; i < r->nkeys; i++) {
        free(r->keys[i].cat);
        free(r->keys[i].name);
    }
    free(r->keys);
    free(r->steps);
    free(r->sync);
    dft_hg_free(&r->hang);
    memset(r, 0, sizeof *r);
}
