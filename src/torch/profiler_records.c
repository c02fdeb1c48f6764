/* torch/profiler_records.c: the pure part of the torch.profiler handler
 * (see profiler_records.h): memory attribution, the op tree, time shares and
 * the PP event of each record.  No Python, no torch, no tracer state; every
 * function runs on any thread without the GIL except dft_pp_compute_shares,
 * whose sort needs its callers serialised (they hold the GIL). */
#include "torch/profiler_records.h"
#include "format/grow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- staging arrays ------------------------------------------------------ */

pp_event *dft_pp_push(pp_vec *v)
{
    if (DFT_GROW(v->ev, v->n, v->cap, 1024) != 0)
        return NULL;
    pp_event *e = &v->ev[v->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static pp_mem *push_mem(pp_vec *v)
{
    if (DFT_GROW(v->mem, v->nmem, v->capmem, 256) != 0)
        return NULL;
    return &v->mem[v->nmem++];
}

int dft_pp_note_memory(pp_vec *v)
{
    pp_mem *r = push_mem(v);
    if (!r)
        return -1;
    const pp_event *e = &v->ev[v->n - 1];
    r->ts_ns = e->start_ns;
    r->cpu = e->cpu_mem;
    r->dev = e->dev_mem;
    r->ev = v->n - 1;
    return 0;
}

void dft_pp_free(pp_vec *v)
{
    free(v->ev);
    free(v->mem);
}

int dft_pp_is_cpu_mem_device(int32_t t)
{
    return t == DEV_CPU || t == DEV_MKLDNN || t == DEV_IDEEP;
}

int dft_pp_is_gpu_mem_device(int32_t t)
{
    return t == DEV_CUDA || t == DEV_PRIVATEUSE1 || t == DEV_HIP || t == DEV_XPU;
}


/* ---- names and devices --------------------------------------------------- */

int dft_pp_name_is(const pp_event *e, const char *s)
{
    size_t l = strlen(s);
    return e->len == l && memcmp(e->utf8, s, l) == 0;
}

/* Utility ops torch leaves out of prof.events(). */
int dft_pp_filtered_name(const pp_event *e)
{
    static const char *const names[] = {
        "profiler::_record_function_enter", "profiler::_record_function_enter_new",
        "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (dft_pp_name_is(e, names[i]))
            return 1;
    return 0;
}

int64_t dft_pp_sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    if (a < 0 || b < 0 || a > INT64_MAX / b)
        return INT64_MAX;
    return a * b;
}


const char *dft_pp_device_label(int32_t t)
{
    switch (t) {
    case DEV_CUDA: return "cuda";
    case DEV_HIP: return "hip";
    case DEV_XPU: return "xpu";
    case DEV_MPS: return "mps";
    case DEV_HPU: return "hpu";
    case DEV_MTIA: return "mtia";
    case DEV_PRIVATEUSE1: return "privateuse1";
    default: return "device";
    }
}


/* ---- derived fields -------------------------------------------------------- */

static int cmp_mem(const void *a, const void *b)
{
    const pp_mem *x = a, *y = b;
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

/* First index with ts >= t (lower) or ts > t (upper). */
static size_t mem_bound(const pp_mem *m, size_t n, int64_t t, int upper)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].ts_ns < t || (upper && m[mid].ts_ns == t))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Memory records inside a CPU op's [start, end] count towards it (any thread,
 * as torch does); records inside no op are written as "[memory]" events. */
int dft_pp_attribute_memory(pp_vec *v)
{
    size_t n = v->nmem;
    if (n == 0)
        return 0;
    qsort(v->mem, n, sizeof *v->mem, cmp_mem);
    int64_t *pc = malloc((n + 1) * sizeof *pc);
    int64_t *pd = malloc((n + 1) * sizeof *pd);
    int64_t *cover = calloc(n + 1, sizeof *cover);
    if (!pc || !pd || !cover) {
        free(pc);
        free(pd);
        free(cover);
        return -1;
    }
    pc[0] = pd[0] = 0;
    for (size_t i = 0; i < n; i++) {
        pc[i + 1] = pc[i] + v->mem[i].cpu;
        pd[i + 1] = pd[i] + v->mem[i].dev;
    }
    for (size_t i = 0; i < v->n; i++) {
        pp_event *e = &v->ev[i];
        if (e->kind != KIND_OP || e->device_type != DEV_CPU)
            continue;
        size_t lo = mem_bound(v->mem, n, e->start_ns, 0);
        size_t hi = mem_bound(v->mem, n, e->end_ns, 1);
        if (lo >= hi)
            continue;
        e->cpu_mem = pc[hi] - pc[lo];
        e->dev_mem = pd[hi] - pd[lo];
        cover[lo]++;
        cover[hi]--;
    }
    int64_t depth = 0;
    for (size_t i = 0; i < n; i++) {
        depth += cover[i];
        if (depth > 0) /* attributed: not written on its own */
            v->ev[v->mem[i].ev].kind = KIND_MEMORY | KIND_ATTRIBUTED;
    }
    free(pc);
    free(pd);
    free(cover);
    return 0;
}

static const pp_event *sort_base;

static int cmp_tree(const void *a, const void *b)
{
    const pp_event *x = &sort_base[*(const size_t *)a], *y = &sort_base[*(const size_t *)b];
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    if (x->end_ns != y->end_ns)
        return x->end_ns > y->end_ns ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static int cmp_linked(const void *a, const void *b)
{
    const pp_event *x = &sort_base[*(const size_t *)a], *y = &sort_base[*(const size_t *)b];
    return x->linked < y->linked ? -1 : x->linked > y->linked;
}

static int is_kernel_device(int32_t t)
{
    return t == DEV_CUDA || t == DEV_PRIVATEUSE1 || t == DEV_XPU;
}

static int counts_device_total(const pp_event *e)
{
    return (e->device_type == DEV_CUDA || e->device_type == DEV_PRIVATEUSE1 ||
            e->device_type == DEV_MTIA) &&
           !e->is_annotation;
}

static double pct(double part, double total)
{
    if (total <= 0)
        return 0.0;
    return (double)llround(part * 10000.0 / total) / 100.0; /* two decimals */
}

/* total_cpu_percent and total_device_percent as torch's table computes them:
 * an op's total CPU time over the self CPU time of all ops (= the time covered
 * by the outermost ops of each thread), and its self device time (kernels it
 * launched) over all kernel time.  The comparators read a global base; the
 * GIL serialises callers. */
int dft_pp_compute_shares(pp_vec *v, int use_device)
{
    size_t n = v->n;
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    int64_t *stack = malloc((n ? n : 1) * sizeof *stack);
    if (!idx || !stack) {
        free(idx);
        free(stack);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v->ev[i].kind == KIND_OP && v->ev[i].device_type == DEV_CPU && !v->ev[i].is_async)
            idx[k++] = i;
    sort_base = v->ev;
    qsort(idx, k, sizeof *idx, cmp_tree);
    double self_total_us = 0;
    size_t depth = 0;
    for (size_t j = 0; j < k; j++) {
        pp_event *e = &v->ev[idx[j]];
        if (j > 0 && v->ev[idx[j - 1]].thread != e->thread)
            depth = 0;
        while (depth > 0) {
            const pp_event *p = &v->ev[stack[depth - 1]];
            if (e->start_ns < p->end_ns && e->end_ns <= p->end_ns)
                break;
            depth--;
        }
        e->parent = depth > 0 ? stack[depth - 1] : -1;
        if (depth == 0)
            self_total_us += (double)(e->end_ns - e->start_ns) / 1000.0;
        else
            v->ev[e->parent].nchild++;
        stack[depth++] = (int64_t)idx[j];
    }
    /* torch folds an op into its parent when it is the parent's only child
     * and has the same name (e.g. aten::sum calling aten::sum); prof.events()
     * does not list the inner one, so neither do we.  Parents come first in
     * this order, so one pass sees every fold. */
    for (size_t j = 0; j < k; j++) {
        pp_event *e = &v->ev[idx[j]];
        int64_t p = e->parent;
        while (p >= 0 && v->ev[p].folded)
            p = v->ev[p].parent;
        e->parent = p;
        if (p < 0 || v->ev[p].nchild != 1 || v->ev[p].len != e->len ||
            memcmp(v->ev[p].utf8, e->utf8, e->len) != 0)
            continue;
        e->folded = 1;
        v->ev[p].nchild = e->nchild;
    }
    for (size_t j = 0; j < k; j++) {
        pp_event *e = &v->ev[idx[j]];
        e->cpu_pct = pct((double)(e->end_ns - e->start_ns) / 1000.0, self_total_us);
    }
    if (use_device) {
        double dev_total_us = 0;
        size_t nk = 0;
        for (size_t i = 0; i < n; i++) {
            const pp_event *e = &v->ev[i];
            if (e->kind != KIND_OP || e->device_type == DEV_CPU)
                continue;
            if (counts_device_total(e))
                dev_total_us += (double)(e->end_ns - e->start_ns) / 1000.0;
            if (is_kernel_device(e->device_type) && e->linked > 0)
                stack[nk++] = (int64_t)i; /* the stack is free again: kernel list */
        }
        size_t *kidx = malloc((nk ? nk : 1) * sizeof *kidx);
        if (!kidx) {
            free(idx);
            free(stack);
            return -1;
        }
        for (size_t j = 0; j < nk; j++)
            kidx[j] = (size_t)stack[j];
        qsort(kidx, nk, sizeof *kidx, cmp_linked);
        for (size_t j = 0; j < k; j++) {
            pp_event *e = &v->ev[idx[j]];
            size_t lo = 0, hi = nk;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (v->ev[kidx[mid]].linked < e->corr)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            double self_dev = 0;
            for (; lo < nk && v->ev[kidx[lo]].linked == e->corr; lo++)
                self_dev += (double)(v->ev[kidx[lo]].end_ns - v->ev[kidx[lo]].start_ns) / 1000.0;
            e->dev_pct = pct(self_dev, dev_total_us);
        }
        /* torch hands a folded op's kernels to its parent (replacing the
         * parent's own), in list order. */
        for (size_t j = 0; j < k; j++) {
            const pp_event *e = &v->ev[idx[j]];
            if (e->folded)
                v->ev[e->parent].dev_pct = e->dev_pct;
        }
        for (size_t i = 0; i < n; i++) {
            pp_event *e = &v->ev[i];
            if (e->kind == KIND_OP && e->device_type != DEV_CPU && !e->is_async)
                e->dev_pct = pct((double)(e->end_ns - e->start_ns) / 1000.0, dev_total_us);
        }
        free(kidx);
    }
    free(idx);
    free(stack);
    return 0;
}

/* ---- PP events ------------------------------------------------------------ */

int dft_pp_to_event(const pp_event *e, int64_t offset_ns, dft_arg args[DFT_PP_NARGS],
                    dft_event *ev)
{
    static const char *const keys[DFT_PP_NARGS] = {
        "device",     "device_index",      "cpu_memory",           "device_memory_usage",
        "is_remote",  "input_size",        "total_cpu_percent",    "total_device_percent",
        "flops"};
    if ((e->kind & KIND_ATTRIBUTED) || e->folded)
        return 0; /* memory record attributed to an op, or a folded op */
    for (int i = 0; i < DFT_PP_NARGS; i++) {
        args[i].key = keys[i];
        args[i].key_len = 0;
        args[i].type = i == 6 || i == 7 ? DFT_ARG_FLOAT : DFT_ARG_INT;
    }
    int64_t ts = (e->start_ns + offset_ns) / 1000;
    int64_t end = (e->end_ns + offset_ns) / 1000;
    args[0].v.i = e->device_type;
    args[1].v.i = e->device_index;
    args[2].v.i = e->cpu_mem;
    args[3].v.i = e->dev_mem;
    args[4].v.i = 0;
    args[5].v.i = e->input_size;
    args[6].v.f = e->cpu_pct;
    args[7].v.f = e->dev_pct;
    args[8].v.i = e->flops;
    *ev = (dft_event){.name = e->utf8, .name_len = e->len, .cat = "PP", .cat_len = 2,
                      .ts = ts, .dur = end - ts, .ph = DFT_PH_COMPLETE,
                      .flags = DFT_EV_NO_NESTING, .tid = e->tid, .args = args,
                      .nargs = e->flops > 0 ? DFT_PP_NARGS : DFT_PP_NARGS - 1};
    return 1;
}

int64_t dft_pp_device_lane_pid(int64_t pid, int32_t index)
{
    return 0x10000000 + (pid & 0x3fffff) * 16 + (index & 15);
}
