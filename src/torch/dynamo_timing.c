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
#include "core/core.h"
#include "format/grow.h"
#include "torch/parts.h"
#include "torch/dynamo_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
static Py_ssize_t nops;
static size_t ops_cap;

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
    if (ctx < -1 || ctx >= dft_dyn_context_count()) {
        PyErr_Format(PyExc_ValueError, "ctx %ld is not a context id", ctx);
        return NULL;
    }
    if (DFT_GROW(ops, (size_t)nops, ops_cap, 256) != 0)
        return PyErr_NoMemory();
    dyn_op op = {.graph = graph, .ctx = (int32_t)ctx, .phase = (uint8_t)phase};
    if (!(op.name = dft_dyn_copy_utf8(args[0], "name", &op.name_len)))
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
    dft_dyn_thread_state *t = dft_dyn_thread();
    (void)self;
    (void)graph;
    t->counters.graphs_run++;
    t->grad_enabled = read_grad_enabled();
    Py_RETURN_NONE;
}

/* _dyn_grad(): after a node that changes grad mode inside a graph. */
static PyObject *dyn_grad(PyObject *self, PyObject *unused)
{
    dft_dyn_thread_state *t = dft_dyn_thread();
    (void)self;
    (void)unused;
    t->grad_enabled = read_grad_enabled();
    Py_RETURN_NONE;
}

/* ---- the per-node timers ----------------------------------------------- */

static PyObject *dyn_begin(PyObject *self, PyObject *op)
{
    dft_dyn_thread_state *t = dft_dyn_thread();
    (void)self;
    (void)op; /* named in the graph for readability; the token is enough */
    unsigned slot = t->pos++ & (DFT_DYN_RING - 1);
    t->ring[slot] = dft_now_us();
    return PyLong_FromLong((long)slot);
}

static PyObject *dyn_end(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    dft_dyn_thread_state *t = dft_dyn_thread();
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
    if (id < 0 || id >= nops || slot < 0 || slot >= DFT_DYN_RING) {
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
    /* inside the innermost scope (an open frame span, a decorated call) */
    if (dft_trace_ready())
        dft_emit_record(&ev, NULL);
    Py_RETURN_NONE;
}

/* ---- compilations ------------------------------------------------------ */

/* _dyn_compile_begin(): called from torch's compile-start callback and around
 * the backend; only the outermost pair counts. */
static PyObject *dyn_compile_begin(PyObject *self, PyObject *unused)
{
    dft_dyn_thread_state *t = dft_dyn_thread();
    (void)self;
    (void)unused;
    if (t->counters.compile_depth++ == 0)
        t->counters.compile_t0 = dft_now_us();
    Py_RETURN_NONE;
}

/* _dyn_compile_end(graphs): graphs is 1 when the backend got a graph. */
static PyObject *dyn_compile_end(PyObject *self, PyObject *graphs)
{
    dft_dyn_thread_state *t = dft_dyn_thread();
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
    dft_dyn_thread_state *t = dft_dyn_thread();
    (void)self;
    (void)unused;
    return Py_BuildValue("(LLLL)", (long long)t->counters.graphs_run,
                         (long long)t->counters.compiles, (long long)t->counters.graphs_compiled,
                         (long long)t->counters.compile_us);
}

static PyMethodDef dynamo_methods[] = {
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
    return PyModule_AddFunctions(module, dynamo_methods);
}
