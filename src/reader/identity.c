/* reader/identity.c: who wrote a trace file, the one C reader of the
 * identity events for every pass (summary, ranks, I/O, memory, validate's
 * parent walk, the stacks tail): the rank rule of docs/trace-format.md
 * ("Rank"): the last valid rank event wins (torch.distributed's, written at
 * init_process_group, comes after the launcher's), a value 0..INT32_MAX, an
 * int or the older tools' string of digits, else a process_name that is
 * `rank <N>` or ends in ` rank <N>`; a DataLoader worker's id ("Workers"):
 * the last wins.  dftracer/tools/rank_rule.py is the same rule for the
 * Python readers that parse JSON themselves.  Pure; no GIL, no Python. */
#include "reader/identity.h"

#include <stddef.h>
#include <string.h>

#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

enum { I_VALUE = 1, I_LOCAL = 2, I_WORLD = 4, I_JOB = 8, I_SOURCE = 16, I_WORKERS = 32,
       I_PPID = 64, I_LOADER = 128, I_DATASET = 256 };

typedef struct ident_args {
    unsigned have;
    int64_t value, local_rank, world_size, num_workers, ppid, loader;
    dft_sv job_id, source, dataset;
} ident_args;

void dft_copy_sv(char *dst, size_t cap, dft_sv v)
{
    size_t n = v.n < cap - 1 ? v.n : cap - 1;
    if (n)
        memcpy(dst, v.p, n);
    dst[n] = 0;
}

void dft_ident_init(dft_ident *id)
{
    memset(id, 0, sizeof *id);
    id->pid = id->ppid = id->rank = id->local_rank = id->world_size = -1;
    id->worker = id->num_workers = id->loader = id->name_rank = -1;
}

/* A rank written as text: ASCII digits only, at most INT32_MAX (ranks are
 * C ints in MPI and torch.distributed); -1 for anything else. */
static int64_t rank_digits(const char *p, size_t n)
{
    int64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
        if (v > INT32_MAX)
            return -1;
    }
    return v;
}

int64_t dft_rank_of_process_name(dft_sv name)
{
    static const char word[] = "rank ";
    const size_t wl = sizeof word - 1;
    size_t d = name.n;
    while (d > 0 && name.p[d - 1] >= '0' && name.p[d - 1] <= '9')
        d--;
    if (d == name.n || d < wl || memcmp(name.p + d - wl, word, wl) != 0)
        return -1;
    if (d > wl && name.p[d - wl - 1] != ' ')
        return -1;
    return rank_digits(name.p + d, name.n - d);
}

int64_t dft_ident_own_rank(const dft_ident *id)
{
    return id->rank >= 0 ? id->rank : id->name_rank;
}

static void arg(void *ctx, dft_sv key, const char *v, const char *vend, dft_sv str, int is_str)
{
    static const struct {
        const char *key;
        unsigned bit;
        size_t off;
    } ints[] = {
        {"value", I_VALUE, offsetof(ident_args, value)},
        {"local_rank", I_LOCAL, offsetof(ident_args, local_rank)},
        {"world_size", I_WORLD, offsetof(ident_args, world_size)},
        {"num_workers", I_WORKERS, offsetof(ident_args, num_workers)},
        {"ppid", I_PPID, offsetof(ident_args, ppid)},
        {"loader", I_LOADER, offsetof(ident_args, loader)},
    };
    ident_args *a = ctx;
    if (is_str) {
        if (SV_IS(key, "job_id")) {
            a->job_id = str;
            a->have |= I_JOB;
            return;
        }
        if (SV_IS(key, "source")) {
            a->source = str;
            a->have |= I_SOURCE;
            return;
        }
        if (SV_IS(key, "dataset")) {
            a->dataset = str;
            a->have |= I_DATASET;
            return;
        }
        v = str.p; /* "value": "2" (the older tools' CM rank) */
        vend = str.p + str.n;
    }
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (key.n == strlen(ints[i].key) && memcmp(key.p, ints[i].key, key.n) == 0 &&
            dft_members_int(v, vend, (int64_t *)((char *)a + ints[i].off)) == 0)
            a->have |= ints[i].bit;
}

static int scan(const dft_line *l, ident_args *a)
{
    memset(a, 0, sizeof *a);
    return dft_line_args(l, arg, a);
}

int dft_ident_line(dft_ident *id, const dft_line *l)
{
    ident_args a;
    if (!id->have_pid && (l->have & DFT_HAVE_PID)) {
        id->pid = l->pid;
        id->have_pid = 1;
    }
    if (l->ph != 'M') {
        if (l->ph == 'X' && SV_IS(l->cat, "dftracer") && SV_IS(l->name, "start") &&
            scan(l, &a) == 0 && (a.have & I_PPID))
            id->ppid = a.ppid;
        return 0;
    }
    if (SV_IS(l->name, "HH")) {
        if (!id->host[0])
            dft_copy_sv(id->host, sizeof id->host, l->a_name);
    } else if (SV_IS(l->name, "process_name")) {
        dft_copy_sv(id->process_name, sizeof id->process_name, l->a_name);
        id->name_rank = dft_rank_of_process_name(l->a_name); /* before any cut */
        if (l->have & DFT_HAVE_PID)
            id->pid = l->pid;
    } else if (SV_IS(l->name, "rank") || SV_IS(l->a_name, "rank")) {
        if (scan(l, &a) < 0 || !(a.have & I_VALUE) || a.value < 0 || a.value > INT32_MAX)
            return 1;
        id->rank = a.value;
        id->local_rank = (a.have & I_LOCAL) ? a.local_rank : id->local_rank;
        id->world_size = (a.have & I_WORLD) ? a.world_size : id->world_size;
        if (a.have & I_JOB)
            dft_copy_sv(id->job_id, sizeof id->job_id, a.job_id);
        dft_copy_sv(id->rank_source, sizeof id->rank_source,
                    (a.have & I_SOURCE) ? a.source : (dft_sv){"CM", 2});
    } else if (SV_IS(l->name, "worker")) {
        if (scan(l, &a) == 0 && (a.have & I_VALUE) && a.value >= 0 &&
            a.value <= INT32_MAX) {
            id->worker = a.value;
            id->num_workers = (a.have & I_WORKERS) && a.num_workers > a.value ? a.num_workers : -1;
            id->loader = (a.have & I_LOADER) && a.loader >= 0 && a.loader <= INT32_MAX
                             ? a.loader : -1;
            dft_copy_sv(id->dataset, sizeof id->dataset,
                        (a.have & I_DATASET) ? a.dataset : (dft_sv){"", 0});
        }
    }
    return 1;
}
