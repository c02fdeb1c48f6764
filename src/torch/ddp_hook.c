/* torch/ddp_hook.c: DDP's gradient all-reduce, one `comm/all_reduce` event
 * per bucket, with no Python frame per bucket.
 *
 * Gloo's process group has no completion callback and DDP's C++ reducer
 * offers none per bucket either: the only place a bucket can be seen is the
 * communication hook (dftracer/_autotrace/ddp.py says why and installs it).
 * So the hook is this C callable, _core._DdpHook: per bucket it does what
 * DDP's reducer does without a hook (the bucket scaled by 1/world size as
 * the reducer scales each gradient, then ProcessGroup.allreduce([bucket])
 * with default options, as the C++ _AllReduceBySumCommHook), takes the time,
 * and chains a _DdpDone (also C) on the work's future that records the event
 * when the all-reduce completes and returns the reduced bucket.
 *
 * The event starts when the bucket's all-reduce is issued, or when the
 * previous bucket's finished if that is later (the backend runs them in
 * order); args bytes, group_size, ddp_bucket, async=1, seq (the group's
 * collective count, shared with the program's own collectives:
 * torch/comm_seq.c), group.  From its issue until it completes, the bucket's
 * all_reduce is in flight (core/inflight.c): shown open on the thread that
 * issued it, with `bucket`, while the ranks wait for it.  A hook the
 * program registers later (`user`) is called instead; `divide` switches to
 * torch's built-in ALLREDUCE hook's arithmetic (bucket / size).
 *
 * The hook and _DdpDone run with the GIL held: the reducer calls the hook
 * from the autograd thread holding it, the future calls _DdpDone holding it
 * (on the thread that completes the work, gloo's worker for gloo).  Where the
 * native hook is built (src/libtorch/ddp_native.cpp, docs/ai.md), DDP calls
 * that instead, without the GIL; it uses this hook's state through
 * dft_ddp_native_api (the capsule _ddp_native_api) and calls the hook itself
 * only in its slow cases (DFT_DDP_SLOW). */
#include "core/core.h"
#include "torch/parts.h"
#include "torch/autotrace_steps.h"
#include "torch/comm_seq.h"
#include "torch/ddp_native_api.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pg;         /* the ProcessGroup */
    PyObject *opts;       /* AllreduceOptions() */
    PyObject *group;      /* its name (str) */
    dft_comm_seq *seq;    /* its group's collective count (never freed) */
    PyObject *divisor_fn; /* divisor_fn(hook) -> int, only when join_work is set */
    PyObject *user;       /* None, or (state, hook) of the program's own hook */
    PyObject *join_work;  /* None, or the Join context's work (uneven inputs) */
    PyObject *inv;        /* 1.0 / size (float) */
    PyObject *size_obj;   /* size (int) */
    const char *group_utf8; /* borrowed from group */
    Py_ssize_t group_len;
    int64_t size;
    _Atomic int64_t last_end; /* end of the previous bucket's event */
    _Atomic int mode;         /* DFT_DDP_* bits: user or join_work set, divide */
    int divide;               /* 1: the built-in ALLREDUCE hook's bucket / size */
} DdpHook;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    DdpHook *hook;
    int64_t start, bytes, index, seq;
    int64_t inflight;     /* the bucket's in-flight token, until it completes */
} DdpDone;

static PyTypeObject DdpHookType, DdpDoneType;
static PyObject *s_buffer, *s_index, *s_nbytes, *s_mul_, *s_div_, *s_allreduce, *s_get_future,
    *s_then, *s_value;

/* ---- the completion: one event ------------------------------------------ */

/* The event of a bucket issued at start and complete now.  It starts no
 * earlier than the previous bucket's end (the backend runs them in order).
 * Any thread, no GIL (the group name is never changed). */
static void bucket_done(DdpHook *h, int64_t start, int64_t bytes, int64_t index, int64_t seq)
{
    int64_t end = dft_now_us();
    int64_t prev = atomic_exchange_explicit(&h->last_end, end, memory_order_relaxed);
    if (prev > start)
        start = prev;
    if (!dft_trace_active())
        return;
    dft_arg a[6] = {
        {.key = "bytes", .key_len = 5, .type = DFT_ARG_INT, .v.i = bytes},
        {.key = "group_size", .key_len = 10, .type = DFT_ARG_INT, .v.i = h->size},
        {.key = "ddp_bucket", .key_len = 10, .type = DFT_ARG_INT, .v.i = index},
        {.key = "async", .key_len = 5, .type = DFT_ARG_INT, .v.i = 1},
        {.key = "seq", .key_len = 3, .type = DFT_ARG_INT, .v.i = seq},
        {.key = "group", .key_len = 5, .type = DFT_ARG_STR,
         .v.s = {h->group_utf8, (size_t)h->group_len}},
    };
    dft_event ev = {.name = "all_reduce", .name_len = 10, .cat = "comm", .cat_len = 4,
                    .ts = start, .dur = end > start ? end - start : 0,
                    .ph = DFT_PH_COMPLETE, .args = a, .nargs = 6};
    dft_emit_logged(&ev);
}

static PyObject *done_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    DdpDone *d = (DdpDone *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "_DdpDone takes one argument (the future)");
        return NULL;
    }
    dft_inflight_end(d->inflight); /* completed, even with an error */
    d->inflight = 0;
    PyObject *value = PyObject_CallMethodNoArgs(args[0], s_value);
    if (!value)
        return NULL; /* the all-reduce failed: DDP raises it, as without us */
    PyObject *tensor = PySequence_GetItem(value, 0);
    Py_DECREF(value);
    if (!tensor)
        return NULL;
    bucket_done(d->hook, d->start, d->bytes, d->index, d->seq);
    return tensor;
}

static int done_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((DdpDone *)self)->hook);
    return 0;
}

static int done_clear(PyObject *self)
{
    Py_CLEAR(((DdpDone *)self)->hook);
    return 0;
}

static void done_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    dft_inflight_end(((DdpDone *)self)->inflight); /* never called: never launched */
    done_clear(self);
    PyObject_GC_Del(self);
}

/* ---- the hook: scale, all-reduce, chain the completion ------------------ */

/* Numbers bucket index's all_reduce (issued at start) in h's group and
 * marks it in flight; its token.  Any thread, no GIL. */
static int64_t launch(DdpHook *h, int64_t start, int64_t index, int64_t *seq)
{
    *seq = dft_comm_seq_next(h->seq);
    dft_open_desc d = {.name = "all_reduce", .name_len = 10, .cat = "comm", .cat_len = 4,
                       .group = h->group_utf8, .group_len = (size_t)h->group_len,
                       .ts = start, .seq = *seq};
    return dft_inflight_begin(&d, index);
}

/* The DFT_DDP_* bits of h's settings.  Under the GIL (the setters). */
static void update_mode(DdpHook *h)
{
    int m = (h->user != Py_None || h->join_work != Py_None ? DFT_DDP_SLOW : 0) |
            (h->divide ? DFT_DDP_DIVIDE : 0);
    atomic_store_explicit(&h->mode, m, memory_order_release);
}

/* The number the bucket is multiplied by (or divided by, h->divide): 1/size,
 * or under join(divide_by_initial_world_size=False) 1/(ranks not yet
 * joined), in double as the reducer's double(1.) / div_factor_.  A new
 * reference, or NULL. */
static PyObject *scale_by(DdpHook *h)
{
    if (h->join_work == Py_None)
        return Py_NewRef(h->divide ? h->size_obj : h->inv);
    PyObject *d = PyObject_CallOneArg(h->divisor_fn, (PyObject *)h);
    if (!d || h->divide)
        return d;
    long long n = PyLong_AsLongLong(d);
    Py_DECREF(d);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0)
        return PyErr_Format(PyExc_ValueError, "DDP divisor must be > 0, not %lld", n);
    return PyFloat_FromDouble(1.0 / (double)n);
}

/* bucket.buffer() scaled as DDP scales it; a new reference, or NULL. */
static PyObject *scaled_buffer(DdpHook *h, PyObject *bucket)
{
    PyObject *buf = PyObject_CallMethodNoArgs(bucket, s_buffer);
    if (!buf)
        return NULL;
    PyObject *by = scale_by(h);
    if (!by) {
        Py_DECREF(buf);
        return NULL;
    }
    PyObject *r = PyObject_CallMethodOneArg(buf, h->divide ? s_div_ : s_mul_, by);
    Py_DECREF(by);
    Py_DECREF(buf);
    return r;
}

static PyObject *int_attr(PyObject *o, PyObject *name, int method, int64_t *out)
{
    PyObject *v = method ? PyObject_CallMethodNoArgs(o, name) : PyObject_GetAttr(o, name);
    if (!v)
        return NULL;
    long long n = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    *out = n;
    return Py_None; /* borrowed: success */
}

static PyObject *hook_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    DdpHook *h = (DdpHook *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "_DdpHook takes two arguments (state, bucket)");
        return NULL;
    }
    PyObject *bucket = args[1];
    if (h->user != Py_None) { /* the program's hook wins */
        PyObject *user = Py_NewRef(h->user); /* it may register again while it runs */
        PyObject *r = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(user, 1),
                                                   PyTuple_GET_ITEM(user, 0), bucket, NULL);
        Py_DECREF(user);
        return r;
    }
    int64_t start = dft_now_us();
    PyObject *tensor = scaled_buffer(h, bucket);
    if (!tensor)
        return NULL;
    DdpDone *d = NULL;
    PyObject *list = NULL, *work = NULL, *fut = NULL, *r = NULL;
    if (!(d = PyObject_GC_New(DdpDone, &DdpDoneType)))
        goto out;
    d->vectorcall = done_vectorcall;
    d->hook = (DdpHook *)Py_NewRef(self);
    d->start = start;
    d->inflight = 0;
    PyObject_GC_Track(d);
    if (!int_attr(tensor, s_nbytes, 0, &d->bytes) || !int_attr(bucket, s_index, 1, &d->index))
        goto out;
    d->inflight = launch(h, start, d->index, &d->seq);
    if (!(list = PyList_New(1)))
        goto out;
    PyList_SET_ITEM(list, 0, Py_NewRef(tensor));
    PyObject *call[3] = {h->pg, list, h->opts};
    if (!(work = PyObject_VectorcallMethod(s_allreduce, call,
                                           3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)))
        goto out;
    if (!(fut = PyObject_CallMethodNoArgs(work, s_get_future)))
        goto out;
    r = PyObject_CallMethodOneArg(fut, s_then, (PyObject *)d);
out:
    if (!r) { /* not launched, or its completion will not be seen */
        dft_inflight_end(d ? d->inflight : 0);
        if (d)
            d->inflight = 0;
    }
    Py_XDECREF(fut);
    Py_XDECREF(work);
    Py_XDECREF(list);
    Py_XDECREF(d);
    Py_DECREF(tensor);
    return r;
}

/* _DdpHook(pg, group, size, opts, divisor_fn) */
static PyObject *hook_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"pg", "group", "size", "opts", "divisor_fn", NULL};
    PyObject *pg, *group, *opts, *divisor_fn;
    long long size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OULOO:_DdpHook", kw, &pg, &group, &size, &opts,
                                     &divisor_fn))
        return NULL;
    if (size <= 0)
        return PyErr_Format(PyExc_ValueError, "size must be > 0, not %lld", size);
    if (!PyCallable_Check(divisor_fn))
        return PyErr_Format(PyExc_TypeError, "divisor_fn must be callable, not %.100s",
                            Py_TYPE(divisor_fn)->tp_name);
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(group, &len);
    if (!utf8)
        return NULL;
    dft_comm_seq *counter = dft_comm_seq_of(utf8, (size_t)len);
    if (!counter)
        return PyErr_NoMemory();
    DdpHook *h = (DdpHook *)type->tp_alloc(type, 0);
    if (!h)
        return NULL;
    h->vectorcall = hook_vectorcall;
    h->pg = Py_NewRef(pg);
    h->opts = Py_NewRef(opts);
    h->group = Py_NewRef(group);
    h->group_utf8 = utf8;
    h->group_len = len;
    h->seq = counter;
    atomic_init(&h->last_end, 0);
    atomic_init(&h->mode, 0);
    h->divisor_fn = Py_NewRef(divisor_fn);
    h->user = Py_NewRef(Py_None);
    h->join_work = Py_NewRef(Py_None);
    h->size = size;
    h->inv = PyFloat_FromDouble(1.0 / (double)size);
    h->size_obj = PyLong_FromLongLong(size);
    if (!h->inv || !h->size_obj) {
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

static int hook_traverse(PyObject *self, visitproc visit, void *arg)
{
    DdpHook *h = (DdpHook *)self;
    Py_VISIT(h->pg);
    Py_VISIT(h->opts);
    Py_VISIT(h->divisor_fn);
    Py_VISIT(h->user);
    Py_VISIT(h->join_work);
    return 0;
}

static int hook_clear(PyObject *self)
{
    DdpHook *h = (DdpHook *)self;
    Py_CLEAR(h->pg);
    Py_CLEAR(h->opts);
    Py_CLEAR(h->divisor_fn);
    Py_CLEAR(h->user);
    Py_CLEAR(h->join_work);
    return 0;
}

static void hook_dealloc(PyObject *self)
{
    DdpHook *h = (DdpHook *)self;
    PyObject_GC_UnTrack(self);
    hook_clear(self);
    Py_CLEAR(h->group); /* group_utf8 points into it: kept until here */
    Py_CLEAR(h->inv);
    Py_CLEAR(h->size_obj);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *get_user(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((DdpHook *)self)->user);
}

static int set_user(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (!v || (v != Py_None && !(PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2 &&
                                 PyCallable_Check(PyTuple_GET_ITEM(v, 1))))) {
        PyErr_SetString(PyExc_TypeError, "user must be None or a (state, hook) tuple");
        return -1;
    }
    Py_SETREF(((DdpHook *)self)->user, Py_NewRef(v));
    update_mode((DdpHook *)self);
    return 0;
}

static PyObject *get_join_work(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((DdpHook *)self)->join_work);
}

static int set_join_work(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (!v) {
        PyErr_SetString(PyExc_TypeError, "join_work cannot be deleted");
        return -1;
    }
    Py_SETREF(((DdpHook *)self)->join_work, Py_NewRef(v));
    update_mode((DdpHook *)self);
    return 0;
}

static PyObject *get_divide(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((DdpHook *)self)->divide);
}

static int set_divide(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    int on = v ? PyObject_IsTrue(v) : -1;
    if (on < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "divide cannot be deleted");
        return -1;
    }
    ((DdpHook *)self)->divide = on;
    update_mode((DdpHook *)self);
    return 0;
}

static PyObject *get_group(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((DdpHook *)self)->group);
}

static PyObject *get_size(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(((DdpHook *)self)->size);
}

static PyGetSetDef hook_getset[] = {
    {"user", get_user, set_user, "None, or (state, hook): the program's hook, called instead",
     NULL},
    {"join_work", get_join_work, set_join_work, "the Join context's work, or None", NULL},
    {"divide", get_divide, set_divide, "True: bucket / size (torch's built-in ALLREDUCE hook)",
     NULL},
    {"group", get_group, NULL, "the group's name in the events", NULL},
    {"size", get_size, NULL, "the group's size", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DdpHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._DdpHook",
    .tp_basicsize = sizeof(DdpHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "_DdpHook(pg, group, size, opts, seq, divisor_fn): DDP's communication hook "
              "(state, bucket) -> Future, one comm/all_reduce event per bucket",
    .tp_vectorcall_offset = offsetof(DdpHook, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = hook_new,
    .tp_traverse = hook_traverse,
    .tp_clear = hook_clear,
    .tp_dealloc = hook_dealloc,
    .tp_getset = hook_getset,
};

static PyTypeObject DdpDoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._DdpDone",
    .tp_basicsize = sizeof(DdpDone),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "the completion of one bucket's all-reduce: records its event",
    .tp_vectorcall_offset = offsetof(DdpDone, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = done_traverse,
    .tp_clear = done_clear,
    .tp_dealloc = done_dealloc,
};

/* ---- for the native hook (src/libtorch/ddp_native.cpp) ------------------ */

#define DDP_NATIVE_CAPSULE "dftracer._core._ddp_native_api"

/* Each of these: any thread, no GIL; hook is a live _DdpHook (the native
 * hook holds a reference). */
static int native_mode(void *hook)
{
    return atomic_load_explicit(&((DdpHook *)hook)->mode, memory_order_acquire);
}

static int64_t native_group_size(void *hook) { return ((DdpHook *)hook)->size; }

static int64_t native_now_us(void) { return dft_now_us(); }

static int64_t native_launch(void *hook, int64_t start, int64_t index, int64_t *seq)
{
    return launch((DdpHook *)hook, start, index, seq);
}

static void native_landed(int64_t token) { dft_inflight_end(token); }

static void native_done(void *hook, int64_t start, int64_t bytes, int64_t index, int64_t seq)
{
    bucket_done((DdpHook *)hook, start, bytes, index, seq);
}

static const dft_ddp_native_api native_api = {
    .version = DFT_DDP_NATIVE_API_VERSION,
    .size = sizeof(dft_ddp_native_api),
    .mode = native_mode,
    .group_size = native_group_size,
    .now_us = native_now_us,
    .launch = native_launch,
    .landed = native_landed,
    .done = native_done,
};

int dft_ddp_hook_register(PyObject *module)
{
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {{&s_buffer, "buffer"},         {&s_index, "index"}, {&s_nbytes, "nbytes"},
                 {&s_mul_, "mul_"},             {&s_div_, "div_"},   {&s_allreduce, "allreduce"},
                 {&s_get_future, "get_future"}, {&s_then, "then"},   {&s_value, "value"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!*names[i].slot && !(*names[i].slot = PyUnicode_InternFromString(names[i].s)))
            return -1;
    if (PyType_Ready(&DdpHookType) < 0 || PyType_Ready(&DdpDoneType) < 0)
        return -1;
    PyObject *api = PyCapsule_New((void *)&native_api, DDP_NATIVE_CAPSULE, NULL);
    if (!api)
        return -1;
    int rc = PyModule_AddObject(module, "_ddp_native_api", api);
    if (rc < 0) {
        Py_DECREF(api);
        return -1;
    }
    return PyModule_AddObjectRef(module, "_DdpHook", (PyObject *)&DdpHookType);
}
