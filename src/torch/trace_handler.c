/* torch/trace_handler.c: the per-event loop of dftracer.python.torch.trace_handler.
 *
 * torch.profiler calls on_trace_ready(prof) once per finished cycle.  Instead of
 * letting torch build a Python FunctionEvent per event (prof.events(), the slow
 * part of the existing handler), this reads the raw Kineto results
 * (prof.profiler.kineto_results.events()) with one C-level call per needed
 * accessor, derives what FunctionEvent would hold (memory attributed to ops,
 * input sizes, CPU/device time shares), converts Kineto's epoch nanoseconds to
 * the tracer clock and writes one "PP" complete event per profiler event.
 * docs/torch-profiler.md describes the fields and where this departs from
 * FunctionEvent. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/clock.h"
#include "core/core.h"
#include "dftracer.h"
#include "integrations.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* c10::DeviceType values (stable across torch releases). */
enum {
    DEV_CPU = 0,
    DEV_CUDA = 1,
    DEV_MKLDNN = 2,
    DEV_IDEEP = 5,
    DEV_HIP = 6,
    DEV_XPU = 12,
    DEV_MPS = 13,
    DEV_HPU = 15,
    DEV_MTIA = 19,
    DEV_PRIVATEUSE1 = 20,
};

enum { KIND_OP = 0, KIND_MEMORY = 1, KIND_OOM = 2 };

/* One profiler event as it will be written. */
typedef struct pp_event {
    PyObject *name; /* owned str */
    const char *utf8;
    Py_ssize_t len;
    int64_t start_ns, end_ns; /* Kineto clock (epoch ns) */
    int64_t tid;              /* OS thread (CPU) or stream (device) */
    int64_t thread;           /* profiler thread number: groups the CPU tree */
    int64_t corr, linked;
    int64_t input_size, flops;
    int64_t cpu_mem, dev_mem;
    double cpu_pct, dev_pct;
    int64_t parent; /* enclosing CPU op on the same thread, or -1 */
    int32_t nchild;
    int32_t device_type, device_index;
    uint8_t is_async, is_annotation, kind;
    uint8_t folded; /* merged into its same-named parent, as torch does */
} pp_event;

/* A "[memory]" record: attributed to the CPU ops around it, or written on its
 * own when no op encloses it. */
typedef struct pp_mem {
    int64_t ts_ns;
    int64_t cpu, dev;
    size_t ev; /* index into the staging event array (kind KIND_MEMORY) */
} pp_mem;

typedef struct pp_vec {
    pp_event *ev;
    size_t n, cap;
    pp_mem *mem;
    size_t nmem, capmem;
} pp_vec;

/* The KinetoEvent accessors, resolved once per call from the event type. */
enum {
    M_NAME,
    M_START,
    M_END,
    M_DEVTYPE,
    M_DEVINDEX,
    M_RESOURCE,
    M_ASYNC,
    M_CORR,
    M_LINKED,
    M_FLOPS,
    M_NBYTES,
    M_HIDDEN,
    M_ANNOTATION,
    M_SHAPES,
    M_DTYPES,
    M_COUNT
};
static const char *const method_names[M_COUNT] = {
    "name",           "start_ns",           "end_ns",          "device_type",
    "device_index",   "device_resource_id",
    "is_async",       "correlation_id",     "linked_correlation_id",
    "flops",          "nbytes",             "is_hidden_event", "is_user_annotation",
    "shapes",         "dtypes",
};
/* Accessors older torch releases may lack; the rest are required. */
#define OPTIONAL_METHODS ((1u << M_HIDDEN) | (1u << M_ANNOTATION) | (1u << M_DTYPES))

/* Lanes already named in the current trace file (device, stream). */
#define LANES_MAX 256
static struct {
    uint64_t gen;
    int64_t pid, tid;
} named_lanes[LANES_MAX];
static size_t nnamed_lanes;
static pthread_mutex_t lanes_lock = PTHREAD_MUTEX_INITIALIZER; /* handlers run without the GIL */

/* The results object handled last, so that a second call for the same cycle
 * (a handler chained twice) writes nothing. */
static uint64_t last_gen;
static int64_t last_trace_start;
static PyObject *last_results; /* borrowed identity only, never dereferenced */

/* ---- small helpers (GIL held) -------------------------------------------- */

static int as_i64(PyObject *r, int64_t *out)
{
    long long v;
    if (PyLong_Check(r)) {
        v = PyLong_AsLongLong(r);
    } else {
        PyObject *ix = PyNumber_Index(r); /* DeviceType enums */
        if (!ix)
            return -1;
        v = PyLong_AsLongLong(ix);
        Py_DECREF(ix);
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int call_i64(PyObject *fn, PyObject *ev, int64_t *out)
{
    PyObject *r = PyObject_Vectorcall(fn, &ev, 1, NULL);
    if (!r)
        return -1;
    int rc = as_i64(r, out);
    Py_DECREF(r);
    return rc;
}

static int call_bool(PyObject *fn, PyObject *ev, uint8_t *out)
{
    PyObject *r = PyObject_Vectorcall(fn, &ev, 1, NULL);
    if (!r)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (t < 0)
        return -1;
    *out = (uint8_t)t;
    return 0;
}

static int is_name(const pp_event *e, const char *s)
{
    size_t l = strlen(s);
    return (size_t)e->len == l && memcmp(e->utf8, s, l) == 0;
}

/* Utility ops torch leaves out of prof.events(). */
static int filtered_name(const pp_event *e)
{
    static const char *const names[] = {
        "profiler::_record_function_enter", "profiler::_record_function_enter_new",
        "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (is_name(e, names[i]))
            return 1;
    return 0;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    if (a < 0 || b < 0 || a > INT64_MAX / b)
        return INT64_MAX;
    return a * b;
}

/* A 0-dim input is a tensor of one element unless its dtype says it is not a
 * tensor at all. */
static int dtype_is_tensor(PyObject *dtypes, Py_ssize_t i)
{
    if (!dtypes || !PyList_Check(dtypes) || i >= PyList_GET_SIZE(dtypes))
        return 0;
    PyObject *d = PyList_GET_ITEM(dtypes, i);
    if (!PyUnicode_Check(d))
        return 0;
    Py_ssize_t l;
    const char *s = PyUnicode_AsUTF8AndSize(d, &l);
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    static const char *const not_tensors[] = {"", "Scalar", "ScalarList", "TensorList",
                                              "GenericList"};
    for (size_t k = 0; k < sizeof not_tensors / sizeof *not_tensors; k++)
        if (strcmp(s, not_tensors[k]) == 0)
            return 0;
    return 1;
}

/* Elements across the input tensors: the sum of the products of the shapes. */
static int input_size(PyObject *const *m, PyObject *ev, int64_t *out)
{
    *out = 0;
    PyObject *shapes = PyObject_Vectorcall(m[M_SHAPES], &ev, 1, NULL);
    if (!shapes)
        return -1;
    if (!PyList_Check(shapes)) {
        Py_DECREF(shapes);
        return 0;
    }
    PyObject *dtypes = NULL;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shapes); i++) {
        PyObject *shape = PyList_GET_ITEM(shapes, i);
        if (!PyList_Check(shape))
            continue;
        Py_ssize_t nd = PyList_GET_SIZE(shape);
        int64_t n = 1;
        if (nd == 0) {
            if (!dtypes && m[M_DTYPES]) {
                dtypes = PyObject_Vectorcall(m[M_DTYPES], &ev, 1, NULL);
                if (!dtypes)
                    PyErr_Clear(); /* only costs the 0-dim tensors' count */
            }
            n = dtype_is_tensor(dtypes, i);
        }
        for (Py_ssize_t d = 0; d < nd; d++) {
            long long v = PyLong_AsLongLong(PyList_GET_ITEM(shape, d));
            if (v == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                v = 0;
            }
            n = sat_mul(n, v < 0 ? 0 : (int64_t)v);
        }
        total = total > INT64_MAX - n ? INT64_MAX : total + n;
    }
    Py_XDECREF(dtypes);
    Py_DECREF(shapes);
    *out = total;
    return 0;
}

static pp_event *vec_push(pp_vec *v)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        pp_event *p = realloc(v->ev, cap * sizeof *p);
        if (!p)
            return NULL;
        v->ev = p;
        v->cap = cap;
    }
    pp_event *e = &v->ev[v->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static pp_mem *mem_push(pp_vec *v)
{
    if (v->nmem == v->capmem) {
        size_t cap = v->capmem ? v->capmem * 2 : 256;
        pp_mem *p = realloc(v->mem, cap * sizeof *p);
        if (!p)
            return NULL;
        v->mem = p;
        v->capmem = cap;
    }
    return &v->mem[v->nmem++];
}

static void vec_free(pp_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        Py_XDECREF(v->ev[i].name);
    free(v->ev);
    free(v->mem);
}

static int is_cpu_mem_device(int32_t t)
{
    return t == DEV_CPU || t == DEV_MKLDNN || t == DEV_IDEEP;
}

static int is_gpu_mem_device(int32_t t)
{
    return t == DEV_CUDA || t == DEV_PRIVATEUSE1 || t == DEV_HIP || t == DEV_XPU;
}

/* ---- reading the results (GIL held) ---------------------------------------- */

/* What the profiler recorded, so that accessors with nothing to say are not
 * called (each costs a pybind11 dispatch). */
typedef struct pp_opts {
    int cpu_only;      /* kineto_activities is {CPU}: no device records */
    int record_shapes; /* shapes() is filled */
    int with_flops;    /* flops() is filled */
    int use_device;    /* device time shares are computed */
} pp_opts;

/* Reads one KinetoEvent into the staging arrays (or drops it as torch does). */
static int read_event(PyObject *const *m, PyObject *ev, pp_vec *v, const pp_opts *o)
{
    pp_event *e = vec_push(v);
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->name = PyObject_Vectorcall(m[M_NAME], &ev, 1, NULL);
    if (!e->name)
        goto drop_err;
    if (!PyUnicode_Check(e->name)) {
        PyErr_Format(PyExc_TypeError, "KinetoEvent.name() returned %.100s, not str",
                     Py_TYPE(e->name)->tp_name);
        goto drop_err;
    }
    e->utf8 = PyUnicode_AsUTF8AndSize(e->name, &e->len);
    if (!e->utf8)
        goto drop_err;
    int64_t dt = DEV_CPU;
    /* A CPU-only profile has device-type records only for memory. */
    int need_type = !o->cpu_only || (e->len > 0 && e->utf8[0] == '[');
    if (call_i64(m[M_START], ev, &e->start_ns) < 0 ||
        (need_type && call_i64(m[M_DEVTYPE], ev, &dt) < 0) ||
        call_i64(m[M_RESOURCE], ev, &e->tid) < 0)
        goto drop_err;
    e->device_type = (int32_t)dt;
    int is_mem = is_name(e, "[memory]");
    if (is_mem || is_name(e, "[OutOfMemory]")) {
        int64_t nbytes;
        if (call_i64(m[M_NBYTES], ev, &nbytes) < 0)
            goto drop_err;
        e->end_ns = e->start_ns;
        e->cpu_mem = is_cpu_mem_device(e->device_type) ? nbytes : 0;
        e->dev_mem = is_gpu_mem_device(e->device_type) ? nbytes : 0;
        e->device_type = DEV_CPU; /* as torch reports these events */
        e->kind = is_mem ? KIND_MEMORY : KIND_OOM;
        if (is_mem) {
            pp_mem *r = mem_push(v);
            if (!r) {
                PyErr_NoMemory();
                goto drop_err;
            }
            r->ts_ns = e->start_ns;
            r->cpu = e->cpu_mem;
            r->dev = e->dev_mem;
            r->ev = v->n - 1;
        }
        return 0;
    }
    if (filtered_name(e))
        goto drop;
    if (m[M_HIDDEN]) {
        uint8_t hidden;
        if (call_bool(m[M_HIDDEN], ev, &hidden) < 0)
            goto drop_err;
        if (hidden)
            goto drop;
    }
    uint8_t async;
    if (call_i64(m[M_END], ev, &e->end_ns) < 0 || call_bool(m[M_ASYNC], ev, &async) < 0 ||
        (o->with_flops && call_i64(m[M_FLOPS], ev, &e->flops) < 0))
        goto drop_err;
    if (e->end_ns < e->start_ns)
        e->end_ns = e->start_ns;
    e->is_async = async;
    /* Ops are grouped into trees per OS thread (torch uses its own thread
     * numbers, which map one to one). */
    e->thread = e->tid;
    if (!o->cpu_only) {
        int64_t idx;
        if (call_i64(m[M_CORR], ev, &e->corr) < 0 || call_i64(m[M_LINKED], ev, &e->linked) < 0)
            goto drop_err;
        /* Kineto reports the thread id as a CPU event's device index. */
        if (e->device_type != DEV_CPU) {
            if (call_i64(m[M_DEVINDEX], ev, &idx) < 0)
                goto drop_err;
            e->device_index = (int32_t)idx;
        }
    }
    if (e->device_type != DEV_CPU && m[M_ANNOTATION] &&
        call_bool(m[M_ANNOTATION], ev, &e->is_annotation) < 0)
        goto drop_err;
    if (o->record_shapes && input_size(m, ev, &e->input_size) < 0)
        goto drop_err;
    e->kind = KIND_OP;
    return 0;
drop:
    Py_CLEAR(e->name);
    v->n--;
    return 0;
drop_err:
    Py_CLEAR(e->name);
    v->n--;
    return -1;
}

/* ---- derived fields (no Python objects touched) --------------------------- */

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
static int attribute_memory(pp_vec *v)
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
            v->ev[v->mem[i].ev].kind = KIND_MEMORY | 0x80;
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
static int compute_shares(pp_vec *v, int use_device)
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
            memcmp(v->ev[p].utf8, e->utf8, (size_t)e->len) != 0)
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

/* ---- writing (no GIL) ------------------------------------------------------ */

/* Kineto's clock is the wall clock (epoch ns); ours is the wall clock read at
 * start-up advanced by CLOCK_MONOTONIC.  Their difference is what NTP moved
 * the wall clock since start-up; sample it with the tightest pair of reads.
 * Any thread, no GIL. */
static int64_t kineto_to_tracer_ns(void) { return dft_clock_minus_realtime_ns(); }

static const char *device_label(int32_t t)
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

/* Device lanes are separate "processes" in viewers: one per (process, device),
 * kept below 2^31 and away from real pids (pid_max is at most 2^22). */
static int64_t device_lane_pid(int32_t index)
{
    return 0x10000000 + (dft_g.pid & 0x3fffff) * 16 + (index & 15);
}

/* Names a device lane once per trace file.  Any thread, no GIL. */
static void name_lane(const pp_event *e, int64_t pid, uint64_t gen)
{
    pthread_mutex_lock(&lanes_lock);
    for (size_t i = 0; i < nnamed_lanes; i++)
        if (named_lanes[i].gen == gen && named_lanes[i].pid == pid && named_lanes[i].tid == e->tid) {
            pthread_mutex_unlock(&lanes_lock);
            return;
        }
    int new_pid = 1;
    for (size_t i = 0; i < nnamed_lanes; i++)
        if (named_lanes[i].gen == gen && named_lanes[i].pid == pid)
            new_pid = 0;
    if (nnamed_lanes == LANES_MAX) /* a new file: forget the old ones */
        nnamed_lanes = 0;
    named_lanes[nnamed_lanes].gen = gen;
    named_lanes[nnamed_lanes].pid = pid;
    named_lanes[nnamed_lanes].tid = e->tid;
    nnamed_lanes++;
    pthread_mutex_unlock(&lanes_lock);
    char buf[96];
    if (new_pid) {
        int len = snprintf(buf, sizeof buf, "%s:%d (pid %lld)", device_label(e->device_type),
                           (int)e->device_index, (long long)dft_g.pid);
        dft_arg args[2] = {
            {.key = "name", .type = DFT_ARG_STR, .v.s = {buf, (size_t)len}},
            {.key = "value", .type = DFT_ARG_STR, .v.s = {"process_name", 12}},
        };
        dft_event ev = {.name = "process_name", .name_len = 12, .cat = "dftracer", .cat_len = 8,
                        .ph = DFT_PH_METADATA, .pid = pid, .tid = e->tid, .args = args,
                        .nargs = 2};
        dft_emit(&ev);
    }
    snprintf(buf, sizeof buf, "%s:%d stream %lld", device_label(e->device_type),
             (int)e->device_index, (long long)e->tid);
    dft_name_lane(pid, e->tid, buf);
}

/* Writes the staged events; returns how many were recorded.  No GIL. */
static Py_ssize_t emit_all(const pp_vec *v, int64_t offset_ns)
{
    uint64_t gen = atomic_load(&dft_g.gen);
    Py_ssize_t written = 0;
    dft_arg args[9];
    static const char *const keys[9] = {"device",     "device_index", "cpu_memory",
                                        "device_memory_usage", "is_remote", "input_size",
                                        "total_cpu_percent", "total_device_percent", "flops"};
    for (int i = 0; i < 9; i++) {
        args[i].key = keys[i];
        args[i].key_len = 0;
        args[i].type = i == 6 || i == 7 ? DFT_ARG_FLOAT : DFT_ARG_INT;
    }
    for (size_t i = 0; i < v->n; i++) {
        const pp_event *e = &v->ev[i];
        if ((e->kind & 0x80) || e->folded)
            continue; /* memory record attributed to an op, or a folded op */
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
        dft_event ev = {.name = e->utf8, .name_len = (size_t)e->len, .cat = "PP", .cat_len = 2,
                        .ts = ts, .dur = end - ts, .ph = DFT_PH_COMPLETE,
                        .flags = DFT_EV_NO_NESTING, .tid = e->tid, .args = args,
                        .nargs = e->flops > 0 ? 9 : 8};
        if (e->device_type != DEV_CPU) {
            ev.pid = device_lane_pid(e->device_index);
            name_lane(e, ev.pid, gen);
        }
        if (dft_emit(&ev) == 0)
            written++;
    }
    return written;
}

/* ---- the entry point ------------------------------------------------------- */

static PyObject *get_results(PyObject *prof, PyObject **profiler_out)
{
    /* torch.profiler.profile keeps the autograd profiler in .profiler; a
     * torch.autograd.profiler.profile holds the results itself. */
    PyObject *profiler;
    if (PyObject_HasAttrString(prof, "kineto_results")) {
        profiler = Py_NewRef(prof);
    } else {
        profiler = PyObject_GetAttrString(prof, "profiler");
        if (!profiler || profiler == Py_None) {
            Py_XDECREF(profiler);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "trace_handler: prof must be a torch.profiler.profile, not %.100s",
                         Py_TYPE(prof)->tp_name);
            return NULL;
        }
    }
    PyObject *results = PyObject_GetAttrString(profiler, "kineto_results");
    if (!results) {
        Py_DECREF(profiler);
        return NULL;
    }
    if (results == Py_None) {
        Py_DECREF(results);
        Py_DECREF(profiler);
        PyErr_SetString(PyExc_RuntimeError,
                        "trace_handler: the profiler has no results yet; pass trace_handler "
                        "as on_trace_ready (it runs after each cycle stops)");
        return NULL;
    }
    *profiler_out = profiler;
    return results;
}

static int attr_true(PyObject *obj, const char *name)
{
    PyObject *a = PyObject_GetAttrString(obj, name);
    if (!a) {
        PyErr_Clear();
        return 0;
    }
    int t = a != Py_None && PyObject_IsTrue(a) > 0;
    PyErr_Clear();
    Py_DECREF(a);
    return t;
}

/* 1 when the profiler recorded CPU activity only. */
static int cpu_only(PyObject *profiler)
{
    PyObject *acts = PyObject_GetAttrString(profiler, "kineto_activities");
    if (!acts) {
        PyErr_Clear();
        return 0;
    }
    PyObject *it = PyObject_GetIter(acts);
    Py_DECREF(acts);
    if (!it) {
        PyErr_Clear();
        return 0;
    }
    int only = 1;
    PyObject *a;
    while (only && (a = PyIter_Next(it)) != NULL) {
        int64_t v = -1;
        if (as_i64(a, &v) < 0 || v != 0) /* ProfilerActivity.CPU is 0 */
            only = 0;
        Py_DECREF(a);
    }
    Py_DECREF(it);
    PyErr_Clear();
    return only;
}

static int resolve_methods(PyObject *ev, PyObject **m)
{
    PyObject *type = (PyObject *)Py_TYPE(ev);
    for (int i = 0; i < M_COUNT; i++) {
        /* On the type, a pybind11 method is its plain function: calling it
         * with the event as first argument skips the bound-method object. */
        m[i] = PyObject_GetAttrString(type, method_names[i]);
        if (!m[i]) {
            if (!(OPTIONAL_METHODS & (1u << i)) || !PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
        }
    }
    return 0;
}

/* _torch_trace_handler(prof) -> int: writes the finished cycle of prof as PP
 * events and returns how many were written (0 when tracing is off). */
static PyObject *torch_trace_handler(PyObject *mod, PyObject *prof)
{
    (void)mod;
    if (!atomic_load_explicit(&dft_g.active, memory_order_relaxed) && dft_lazy_start() != 0) {
        if (atomic_load(&dft_g.state) == DFT_STATE_FINALIZED)
            return PyErr_Format(PyExc_RuntimeError,
                                "trace_handler: the trace was finalized before this profiler "
                                "cycle ended; its events were not written (%s is complete)",
                                dft_g.path ? dft_g.path : "the trace file");
        return PyLong_FromLong(0);
    }
    PyObject *profiler = NULL;
    PyObject *results = get_results(prof, &profiler);
    if (!results)
        return NULL;
    PyObject *m[M_COUNT] = {NULL};
    PyObject *events = NULL;
    pp_vec v = {0};
    PyObject *ret = NULL;
    int gc_was_enabled = 0;
    PyObject *start = PyObject_CallMethod(results, "trace_start_ns", NULL);
    int64_t trace_start = 0;
    if (!start || as_i64(start, &trace_start) < 0)
        goto done;
    uint64_t gen = atomic_load(&dft_g.gen);
    if (results == last_results && trace_start == last_trace_start && gen == last_gen) {
        ret = PyLong_FromLong(0); /* this cycle was written already */
        goto done;
    }
    /* Tens of thousands of short-lived, acyclic wrappers and names would
     * trigger several full collections of torch's large heap. */
    gc_was_enabled = PyGC_Disable();
    events = PyObject_CallMethod(results, "events", NULL);
    if (!events)
        goto done;
    if (!PyList_Check(events)) {
        PyErr_Format(PyExc_TypeError, "trace_handler: kineto_results.events() returned %.100s",
                     Py_TYPE(events)->tp_name);
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(events);
    if (n > 0 && resolve_methods(PyList_GET_ITEM(events, 0), m) < 0)
        goto done;
    pp_opts o = {
        .cpu_only = cpu_only(profiler),
        .record_shapes = attr_true(profiler, "record_shapes"),
        .with_flops = attr_true(profiler, "with_flops"),
        .use_device = attr_true(profiler, "use_device"),
    };
    for (Py_ssize_t i = 0; i < n; i++)
        if (read_event(m, PyList_GET_ITEM(events, i), &v, &o) < 0)
            goto done;
    Py_CLEAR(events); /* frees the KinetoEvent wrappers before writing */
    if (gc_was_enabled == 1) {
        PyGC_Enable();
        gc_was_enabled = 0;
    }
    if (attribute_memory(&v) < 0 || compute_shares(&v, o.use_device) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t written;
    Py_BEGIN_ALLOW_THREADS
    written = emit_all(&v, kineto_to_tracer_ns());
    Py_END_ALLOW_THREADS
    last_results = results;
    last_trace_start = trace_start;
    last_gen = gen;
    ret = PyLong_FromSsize_t(written);
done:
    if (gc_was_enabled == 1)
        PyGC_Enable();
    for (int i = 0; i < M_COUNT; i++)
        Py_XDECREF(m[i]);
    vec_free(&v);
    Py_XDECREF(events);
    Py_XDECREF(start);
    Py_DECREF(results);
    Py_DECREF(profiler);
    return ret;
}

static PyMethodDef torch_methods[] = {
    {"_torch_trace_handler", torch_trace_handler, METH_O,
     "_torch_trace_handler(prof) -> int\n\nWrites the finished cycle of a torch.profiler.profile "
     "as PP events on the tracer clock; returns how many were written."},
    {NULL, NULL, 0, NULL},
};

int dft_torch_profiler_register(PyObject *module)
{
    return PyModule_AddFunctions(module, torch_methods);
}
