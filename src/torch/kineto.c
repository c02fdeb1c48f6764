/* torch/kineto.c: reading what torch.profiler recorded.
 *
 * Instead of letting torch build a Python FunctionEvent per event
 * (prof.events(), the slow part of the existing handler), this reads the raw
 * Kineto results (prof.profiler.kineto_results.events()) with one C-level
 * call per needed accessor into profiler records (torch/profiler_records.h).
 * GIL held throughout. */
#include "torch/kineto.h"

#include <string.h>

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

/* ---- small helpers (GIL held) -------------------------------------------- */

int dft_kineto_i64(PyObject *r, int64_t *out)
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
    int rc = dft_kineto_i64(r, out);
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
            n = dft_pp_sat_mul(n, v < 0 ? 0 : (int64_t)v);
        }
        total = total > INT64_MAX - n ? INT64_MAX : total + n;
    }
    Py_XDECREF(dtypes);
    Py_DECREF(shapes);
    *out = total;
    return 0;
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
    pp_event *e = dft_pp_push(v);
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *name = PyObject_Vectorcall(m[M_NAME], &ev, 1, NULL);
    e->name_owner = name;
    if (!name)
        goto drop_err;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "KinetoEvent.name() returned %.100s, not str",
                     Py_TYPE(name)->tp_name);
        goto drop_err;
    }
    Py_ssize_t len;
    e->utf8 = PyUnicode_AsUTF8AndSize(name, &len);
    if (!e->utf8)
        goto drop_err;
    e->len = (size_t)len;
    int64_t dt = DEV_CPU;
    /* A CPU-only profile has device-type records only for memory. */
    int need_type = !o->cpu_only || (e->len > 0 && e->utf8[0] == '[');
    if (call_i64(m[M_START], ev, &e->start_ns) < 0 ||
        (need_type && call_i64(m[M_DEVTYPE], ev, &dt) < 0) ||
        call_i64(m[M_RESOURCE], ev, &e->tid) < 0)
        goto drop_err;
    e->device_type = (int32_t)dt;
    int is_mem = dft_pp_name_is(e, "[memory]");
    if (is_mem || dft_pp_name_is(e, "[OutOfMemory]")) {
        int64_t nbytes;
        if (call_i64(m[M_NBYTES], ev, &nbytes) < 0)
            goto drop_err;
        e->end_ns = e->start_ns;
        e->cpu_mem = dft_pp_is_cpu_mem_device(e->device_type) ? nbytes : 0;
        e->dev_mem = dft_pp_is_gpu_mem_device(e->device_type) ? nbytes : 0;
        e->device_type = DEV_CPU; /* as torch reports these events */
        e->kind = is_mem ? KIND_MEMORY : KIND_OOM;
        if (is_mem && dft_pp_note_memory(v) < 0) {
            PyErr_NoMemory();
            goto drop_err;
        }
        return 0;
    }
    if (dft_pp_filtered_name(e))
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
    Py_XDECREF(name);
    v->n--;
    return 0;
drop_err:
    Py_XDECREF(name);
    v->n--;
    return -1;
}


/* ---- the profiler's settings ----------------------------------------------- */

PyObject *dft_kineto_results(PyObject *prof, PyObject **profiler_out)
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
        if (dft_kineto_i64(a, &v) < 0 || v != 0) /* ProfilerActivity.CPU is 0 */
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


int dft_kineto_read(PyObject *profiler, PyObject *results, pp_vec *v, int *use_device)
{
    PyObject *m[M_COUNT] = {NULL};
    int rc = -1;
    /* Tens of thousands of short-lived, acyclic wrappers and names would
     * trigger several full collections of torch's large heap. */
    int gc_was_enabled = PyGC_Disable();
    PyObject *events = PyObject_CallMethod(results, "events", NULL);
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
    *use_device = o.use_device;
    for (Py_ssize_t i = 0; i < n; i++)
        if (read_event(m, PyList_GET_ITEM(events, i), v, &o) < 0)
            goto done;
    rc = 0;
done:
    Py_XDECREF(events); /* frees the KinetoEvent wrappers before the GC runs again */
    if (gc_was_enabled == 1)
        PyGC_Enable();
    for (int i = 0; i < M_COUNT; i++)
        Py_XDECREF(m[i]);
    return rc;
}

void dft_kineto_free(pp_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        Py_XDECREF((PyObject *)v->ev[i].name_owner);
    dft_pp_free(v);
}
