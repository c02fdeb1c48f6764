/* torch/dynamo_timing.c: the timers that the dftracer torch.compile backend inserts
 * into FX graphs (see dftracer/python/dynamo.py).
 *
 * At compile time every instrumented node is interned once with _dyn_op(),
 * which keeps its event name, graph id, phase and Dynamo context here in C.
 * At run time the graph calls _dyn_begin(op) before the node and
 * _dyn_end(op, token) after it: two C calls and one dft_emit per node.
 * _dyn_begin stores the start time in a small per-thread ring and returns the
 * slot index as the token, a cached small int, so nothing is allocated.
 *
 * All functions here are called from Python with the GIL held. */
#include "torch/dynamo.h"
#include "integrations.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-thread state -------------------------------------------------- */

#define RING_SIZE 256 /* tokens are 0..255: CPython's cached small ints */

typedef struct {
    int64_t ring[RING_SIZE];
    unsigned pos;
    int grad_enabled; /* -1: not read yet on this thread */
    dft_dyn_counters counters;
} dyn_thread;

/* Only a pointer is thread-local: the core's initial-exec TLS leaves little
 * static TLS room for the rest of the library. */
static _Thread_local dyn_thread *tl_state;
static dyn_thread tl_fallback = {.grad_enabled = -1}; /* when malloc fails */
static pthread_key_t tl_key; /* frees a thread's state when it exits */

static dyn_thread *thread_state_slow(void)
{
    dyn_thread *t = calloc(1, sizeof *t);
    if (!t || pthread_setspecific(tl_key, t) != 0) {
        free(t);
        return &tl_fallback;
    }
    t->grad_enabled = -1;
    return tl_state = t;
}

static inline dyn_thread *thread_state(void)
{
    dyn_thread *t = tl_state;
    return t ? t : thread_state_slow();
}

dft_dyn_counters *dft_dyn_counters_get(void) { return &thread_state()->counters; }

/* ---- contexts: the args of one Dynamo instance ------------------------- */

typedef struct {
    char *name;
    size_t name_len;
    char *image_size_str; /* image_size when it is not an int */
    size_t image_size_len;
    int64_t epoch, step, image_idx, image_size;
    unsigned has; /* CTX_* bits */
} dyn_context;

enum { CTX_NAME = 1, CTX_EPOCH = 2, CTX_STEP = 4, CTX_IMAGE_IDX = 8, CTX_IMAGE_SIZE = 16 };

static dyn_context *contexts;
static int32_t ncontexts, contexts_cap;

unsigned dft_dyn_context_args(int32_t ctx, dft_arg *out)
{
    if (ctx < 0 || ctx >= ncontexts)
        return 0;
    const dyn_context *c = &contexts[ctx];
    unsigned n = 0;
    if (c->has & CTX_NAME)
        out[n++] = (dft_arg){.key = "name", .key_len = 4, .type = DFT_ARG_STR,
                             .v.s = {c->name, c->name_len}};
    if (c->has & CTX_EPOCH)
        out[n++] = (dft_arg){.key = "epoch", .key_len = 5, .type = DFT_ARG_INT, .v.i = c->epoch};
    if (c->has & CTX_STEP)
        out[n++] = (dft_arg){.key = "step", .key_len = 4, .type = DFT_ARG_INT, .v.i = c->step};
    if (c->has & CTX_IMAGE_IDX)
        out[n++] = (dft_arg){.key = "image_idx", .key_len = 9, .type = DFT_ARG_INT,
                             .v.i = c->image_idx};
    if (c->has & CTX_IMAGE_SIZE) {
        if (c->image_size_str)
            out[n++] = (dft_arg){.key = "image_size", .key_len = 10, .type = DFT_ARG_STR,
                                 .v.s = {c->image_size_str, c->image_size_len}};
        else
            out[n++] = (dft_arg){.key = "image_size", .key_len = 10, .type = DFT_ARG_INT,
                                 .v.i = c->image_size};
    }
    return n;
}

static char *copy_utf8(PyObject *s, const char *argname, size_t *len)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", argname,
                     Py_TYPE(s)->tp_name);
        return NULL;
    }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u)
        return NULL;
    char *copy = malloc((size_t)n + 1);
    if (!copy) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, u, (size_t)n + 1);
    *len = (size_t)n;
    return copy;
}

/* An optional int field: None leaves the bit clear. */
static int set_int_field(PyObject *v, const char *argname, unsigned bit, int64_t *field,
                         unsigned *has)
{
    if (v == Py_None)
        return 0;
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %.100s", argname,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *field = x;
    *has |= bit;
    return 0;
}

static PyObject *dyn_context_new(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (ncontexts == contexts_cap) {
        int32_t cap = contexts_cap ? contexts_cap * 2 : 8;
        dyn_context *c = realloc(contexts, (size_t)cap * sizeof *c);
        if (!c)
            return PyErr_NoMemory();
        contexts = c;
        contexts_cap = cap;
    }
    memset(&contexts[ncontexts], 0, sizeof *contexts);
    return PyLong_FromLong(ncontexts++);
}

/* _dyn_context_set(ctx, name, epoch, step, image_idx, image_size): replaces
 * the args of a context; None leaves an arg out. */
static PyObject *dyn_context_set(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_dyn_context_set() takes 6 arguments");
        return NULL;
    }
    long ctx = PyLong_AsLong(args[0]);
    if (ctx == -1 && PyErr_Occurred())
        return NULL;
    if (ctx < 0 || ctx >= ncontexts) {
        PyErr_Format(PyExc_ValueError, "ctx %ld is not a context id", ctx);
        return NULL;
    }
    dyn_context c = {0};
    if (args[1] != Py_None) {
        if (!(c.name = copy_utf8(args[1], "name", &c.name_len)))
            return NULL;
        c.has |= CTX_NAME;
    }
    if (set_int_field(args[2], "epoch", CTX_EPOCH, &c.epoch, &c.has) < 0 ||
        set_int_field(args[3], "step", CTX_STEP, &c.step, &c.has) < 0 ||
        set_int_field(args[4], "image_idx", CTX_IMAGE_IDX, &c.image_idx, &c.has) < 0)
        goto fail;
    PyObject *size = args[5];
    if (size != Py_None) {
        if (PyLong_Check(size) && !PyBool_Check(size)) {
            if (set_int_field(size, "image_size", CTX_IMAGE_SIZE, &c.image_size, &c.has) < 0)
                goto fail;
        } else {
            /* (224, 224) and the like are written as their str() */
            PyObject *s = PyObject_Str(size);
            if (!s)
                goto fail;
            c.image_size_str = copy_utf8(s, "image_size", &c.image_size_len);
            Py_DECREF(s);
            if (!c.image_size_str)
                goto fail;
            c.has |= CTX_IMAGE_SIZE;
        }
    }
    free(contexts[ctx].name);
    free(contexts[ctx].image_size_str);
    contexts[ctx] = c;
    Py_RETURN_NONE;
fail:
    free(c.name);
    free(c.image_size_str);
    return NULL;
}

/* ---- ops: one entry per instrumented graph node ------------------------ */

typedef struct {
    char *name;
    size_t name_len;
    int64_t graph;
    int32_t ctx;
    uint8_t phase;
} dyn_op;

static const struct {
    const char *s;
    size_t len;
} phase_names[] = {{"forward", 7}, {"backward", 8}, {"inference", 9}};

static dyn_op *ops;
static Py_ssize_t nops, ops_cap;

/* _dyn_op(name, graph, phase, ctx) -> op id */
static PyObject *dyn_op_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_dyn_op() takes 4 arguments (name, graph, phase, ctx)");
        return NULL;
    }
    long long graph = PyLong_AsLongLong(args[1]);
    if (graph == -1 && PyErr_Occurred())
        return NULL;
    int phase = -1;
    if (PyUnicode_Check(args[2]))
        for (int i = 0; i < 3; i++)
            if (PyUnicode_CompareWithASCIIString(args[2], phase_names[i].s) == 0)
                phase = i;
    if (phase < 0) {
        PyErr_Format(PyExc_ValueError, "phase must be 'forward', 'backward' or 'inference', not %R",
                     args[2]);
        return NULL;
    }
    long ctx = PyLong_AsLong(args[3]);
    if (ctx == -1 && PyErr_Occurred())
        return NULL;
    if (ctx < -1 || ctx >= ncontexts) {
        PyErr_Format(PyExc_ValueError, "ctx %ld is not a context id", ctx);
        return NULL;
    }
    if (nops == ops_cap) {
        Py_ssize_t cap = ops_cap ? ops_cap * 2 : 256;
        dyn_op *o = realloc(ops, (size_t)cap * sizeof *o);
        if (!o)
            return PyErr_NoMemory();
        ops = o;
        ops_cap = cap;
    }
    dyn_op op = {.graph = graph, .ctx = (int32_t)ctx, .phase = (uint8_t)phase};
    if (!(op.name = copy_utf8(args[0], "name", &op.name_len)))
        return NULL;
    ops[nops] = op;
    return PyLong_FromSsize_t(nops++);
}

/* ---- grad mode --------------------------------------------------------- */

static PyObject *grad_fn; /* torch.is_grad_enabled, set by _dyn_setup */

static int read_grad_enabled(void)
{
    if (!grad_fn)
        return -1;
    PyObject *r = PyObject_CallNoArgs(grad_fn);
    if (!r) {
        PyErr_Clear(); /* the traced program never fails because of us */
        return -1;
    }
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (v < 0)
        PyErr_Clear();
    return v;
}

static PyObject *dyn_setup(PyObject *self, PyObject *fn)
{
    (void)self;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "grad_fn must be callable, not %.100s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(grad_fn, fn);
    Py_RETURN_NONE;
}

/* _dyn_graph(graph): the first node of an instrumented graph. */
static PyObject *dyn_graph(PyObject *self, PyObject *graph)
{
    dyn_thread *t = thread_state();
    (void)self;
    (void)graph;
    t->counters.graphs_run++;
    t->grad_enabled = read_grad_enabled();
    Py_RETURN_NONE;
}

/* _dyn_grad(): after a node that changes grad mode inside a graph. */
static PyObject *dyn_grad(PyObject *self, PyObject *unused)
{
    dyn_thread *t = thread_state();
    (void)self;
    (void)unused;
    t->grad_enabled = read_grad_enabled();
    Py_RETURN_NONE;
}

/* ---- the per-node timers ----------------------------------------------- */

static PyObject *dyn_begin(PyObject *self, PyObject *op)
{
    dyn_thread *t = thread_state();
    (void)self;
    (void)op; /* named in the graph for readability; the token is enough */
    unsigned slot = t->pos++ & (RING_SIZE - 1);
    t->ring[slot] = dft_now_us();
    return PyLong_FromLong((long)slot);
}

static PyObject *dyn_end(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    dyn_thread *t = thread_state();
    (void)self;
    int64_t now = dft_now_us();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_dyn_end() takes 2 arguments (op, token)");
        return NULL;
    }
    Py_ssize_t id = PyLong_AsSsize_t(args[0]);
    long slot = PyLong_AsLong(args[1]);
    if ((id == -1 || slot == -1) && PyErr_Occurred())
        return NULL;
    if (id < 0 || id >= nops || slot < 0 || slot >= RING_SIZE) {
        PyErr_Format(PyExc_ValueError, "bad op id %zd or token %ld", id, slot);
        return NULL;
    }
    if (t->grad_enabled < 0)
        t->grad_enabled = read_grad_enabled();
    const dyn_op *op = &ops[id];
    int64_t t0 = t->ring[slot];
    dft_arg a[3 + DFT_DYN_CTX_ARGS] = {
        {.key = "grad_enabled", .key_len = 12, .type = DFT_ARG_INT,
         .v.i = t->grad_enabled > 0},
        {.key = "graph", .key_len = 5, .type = DFT_ARG_INT, .v.i = op->graph},
        {.key = "phase", .key_len = 5, .type = DFT_ARG_STR,
         .v.s = {phase_names[op->phase].s, phase_names[op->phase].len}},
    };
    unsigned n = 3 + dft_dyn_context_args(op->ctx, a + 3);
    dft_event ev = {.name = op->name, .name_len = op->name_len, .cat = "dynamo", .cat_len = 6,
                    .ts = t0, .dur = now >= t0 ? now - t0 : 0, .ph = DFT_PH_COMPLETE,
                    .args = a, .nargs = n};
    /* a scope of its own, so the event nests under an open frame span
     * instead of taking that span's id */
    dft_enter_scope();
    if (dft_active()) {
        dft_emit(&ev);
        dft_exit_scope();
    }
    Py_RETURN_NONE;
}

/* ---- compilations ------------------------------------------------------ */

/* _dyn_compile_begin(): called from torch's compile-start callback and around
 * the backend; only the outermost pair counts. */
static PyObject *dyn_compile_begin(PyObject *self, PyObject *unused)
{
    dyn_thread *t = thread_state();
    (void)self;
    (void)unused;
    if (t->counters.compile_depth++ == 0)
        t->counters.compile_t0 = dft_now_us();
    Py_RETURN_NONE;
}

/* _dyn_compile_end(graphs): graphs is 1 when the backend got a graph. */
static PyObject *dyn_compile_end(PyObject *self, PyObject *graphs)
{
    dyn_thread *t = thread_state();
    (void)self;
    long g = PyLong_AsLong(graphs);
    if (g == -1 && PyErr_Occurred())
        return NULL;
    t->counters.graphs_compiled += g;
    if (t->counters.compile_depth <= 0)
        Py_RETURN_NONE; /* an end without its begin (callbacks registered mid-compile) */
    if (--t->counters.compile_depth == 0) {
        t->counters.compiles++;
        t->counters.compile_us += dft_now_us() - t->counters.compile_t0;
    }
    Py_RETURN_NONE;
}

/* _dyn_counters() -> (graphs_run, compiles, graphs_compiled, compile_us) */
static PyObject *dyn_counters(PyObject *self, PyObject *unused)
{
    dyn_thread *t = thread_state();
    (void)self;
    (void)unused;
    return Py_BuildValue("(LLLL)", (long long)t->counters.graphs_run,
                         (long long)t->counters.compiles, (long long)t->counters.graphs_compiled,
                         (long long)t->counters.compile_us);
}

static PyMethodDef dynamo_methods[] = {
    {"_dyn_context_new", dyn_context_new, METH_NOARGS, "_dyn_context_new() -> ctx id"},
    {"_dyn_context_set", (PyCFunction)(void (*)(void))dyn_context_set, METH_FASTCALL,
     "_dyn_context_set(ctx, name, epoch, step, image_idx, image_size)"},
    {"_dyn_op", (PyCFunction)(void (*)(void))dyn_op_new, METH_FASTCALL,
     "_dyn_op(name, graph, phase, ctx) -> op id"},
    {"_dyn_setup", dyn_setup, METH_O, "_dyn_setup(is_grad_enabled)"},
    {"_dyn_graph", dyn_graph, METH_O, "_dyn_graph(graph): start of an instrumented graph"},
    {"_dyn_grad", dyn_grad, METH_NOARGS, "_dyn_grad(): re-read grad mode"},
    {"_dyn_begin", dyn_begin, METH_O, "_dyn_begin(op) -> token"},
    {"_dyn_end", (PyCFunction)(void (*)(void))dyn_end, METH_FASTCALL,
     "_dyn_end(op, token): records the node's event"},
    {"_dyn_compile_begin", dyn_compile_begin, METH_NOARGS, "_dyn_compile_begin()"},
    {"_dyn_compile_end", dyn_compile_end, METH_O, "_dyn_compile_end(graphs)"},
    {"_dyn_counters", dyn_counters, METH_NOARGS,
     "_dyn_counters() -> (graphs_run, compiles, graphs_compiled, compile_us)"},
    {NULL, NULL, 0, NULL},
};

int dft_dynamo_register(PyObject *module)
{
    static int key_made;
    if (!key_made) {
        int e = pthread_key_create(&tl_key, free);
        if (e != 0) {
            errno = e;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        key_made = 1;
    }
    if (PyModule_AddFunctions(module, dynamo_methods) < 0)
        return -1;
    return dft_frame_hook_add_functions(module);
}
