/* torch/autotrace_hooks.c: the per-event part of `forward`, `backward` and
 * `optimizer.step` (dftracer/_autotrace/modules.py and optim.py decide where
 * the hooks go).  The hooks are C objects with vectorcall, so torch calls C
 * directly: no Python frame of ours per module call or step.
 *
 *   _at_forward_pre(module, args) / _at_forward_post(module, args, output):
 *     a per-thread depth; the end of the outermost forward writes the event
 *     and, when its output needs grad, names the model the next backward
 *     pass is of;
 *     (autotrace_forward.c's _AtForward calls the same around a call);
 *   _AtEngineRun(original): torch.autograd's _engine_run_backward, the one
 *     entry of backward() and grad() into the autograd engine: the call is
 *     `backward` when a top-level forward on this thread had an output that
 *     needs grad (since the last optimizer step), and ends when the engine
 *     returns, after the callbacks queued during the pass (DDP's bucket
 *     wait);
 *   _at_optimizer_pre / _at_optimizer_post(opt, args, kwargs): the outermost
 *     step() is the event, and moves the iteration (autotrace_steps.c).
 *
 * A hook that fails turns its part off (dft_at_fail) and never raises into
 * the program.  Everything needs the GIL (torch calls hooks with it). */
#include "torch/autotrace_steps.h"
#include "torch/autotrace_hooks.h"
#include "torch/parts.h"

#include <string.h>

#include "core/clock.h"
#include <structmember.h>

/* What _at_setup() hands over from torch (strong references, kept). */
static struct {
    PyObject *tensor;       /* torch.Tensor */
    PyObject *parameter;    /* torch.nn.Parameter */
    PyObject *loss;         /* torch.nn.modules.loss._Loss */
    PyObject *grad_enabled; /* torch.is_grad_enabled */
    PyObject *graph_task;   /* torch._C._current_graph_task_id */
    PyObject *seen;         /* modules._search_seen(module), while searching */
    PyObject *module_attr;  /* "__module__" */
    PyObject *orig_mod;     /* "_orig_mod" */
    PyObject *requires_grad; /* "requires_grad" */
    PyObject *is_leaf;      /* "is_leaf" */
    int ready;
} T;

static int searching; /* the global module hooks are on (_at_searching) */

/* ---- forward ------------------------------------------------------------- */

/* The class name; for torch.compile's wrapper, the compiled module's type.
 * Returns a borrowed type. */
static PyTypeObject *module_type(PyObject *module)
{
    PyTypeObject *tp = Py_TYPE(module);
    if (strcmp(dft_at_type_name(tp), "OptimizedModule") == 0) {
        PyObject *orig = PyObject_GetAttr(module, T.orig_mod);
        if (!orig) {
            PyErr_Clear();
            return tp;
        }
        tp = Py_TYPE(orig);
        Py_DECREF(orig); /* the type lives on: the wrapper holds orig */
    }
    return tp;
}

/* 1 when tensor type kind is a real tensor (not fake, FX); -1 on error. */
static int real_tensor_type(PyTypeObject *kind)
{
    if ((PyObject *)kind == T.tensor || (PyObject *)kind == T.parameter)
        return 1;
    PyObject *mod = PyObject_GetAttr((PyObject *)kind, T.module_attr);
    if (!mod)
        return -1;
    int fake = 0;
    static const char *const fakes[] = {"torch._subclasses", "torch.fx", "torch._functorch",
                                        "torch._higher_order_ops"};
    if (PyUnicode_Check(mod)) {
        const char *s = PyUnicode_AsUTF8(mod);
        if (!s) {
            Py_DECREF(mod);
            return -1;
        }
        for (size_t i = 0; i < sizeof fakes / sizeof *fakes && !fake; i++)
            fake = strncmp(s, fakes[i], strlen(fakes[i])) == 0;
    }
    Py_DECREF(mod);
    return !fake;
}

/* A bool attribute: 1, 0, or -1 with an exception set. */
static int bool_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* Whether the first tensor in out (a tensor, or a tuple, list or dict of
 * them, 8 items and two levels deep) has a grad_fn, read as requires_grad
 * and not is_leaf: no Python object is built for the grad_fn.  1, 0, or -1
 * with an exception set.  Each item is held while looked at (a Python
 * __instancecheck__ may change the container). */
static int first_has_grad_fn(PyObject *out, int depth)
{
    int is_tensor = PyObject_IsInstance(out, T.tensor);
    if (is_tensor < 0)
        return -1;
    if (is_tensor) {
        int real = real_tensor_type(Py_TYPE(out));
        if (real <= 0)
            return real;
        int needs = bool_attr(out, T.requires_grad);
        if (needs <= 0)
            return needs;
        int leaf = bool_attr(out, T.is_leaf);
        return leaf < 0 ? -1 : !leaf;
    }
    if (depth >= 2)
        return 0;
    int is_dict = PyDict_Check(out);
    if (!is_dict && !PyTuple_Check(out) && !PyList_Check(out))
        return 0;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < 8; i++) {
        PyObject *item, *key;
        if (is_dict) {
            if (!PyDict_Next(out, &pos, &key, &item))
                return 0;
        } else {
            Py_ssize_t n = PyTuple_Check(out) ? PyTuple_GET_SIZE(out) : PyList_GET_SIZE(out);
            if (i >= n)
                return 0;
            item = PyTuple_Check(out) ? PyTuple_GET_ITEM(out, i) : PyList_GET_ITEM(out, i);
        }
        Py_INCREF(item);
        int found = first_has_grad_fn(item, depth + 1);
        Py_DECREF(item);
        if (found)
            return found;
    }
    return 0;
}

/* The end of a top-level forward: its event, and the model the next backward
 * pass is of. */
static void top_forward(PyObject *module, int64_t start, PyObject *output)
{
    dft_at_thread *t = dft_at_thread_get();
    if (!T.ready || t->in_data) /* a transform in a dataset: data loading, not the model */
        return;
    PyObject *r = PyObject_CallNoArgs(T.graph_task);
    if (!r)
        goto fail;
    long task = PyLong_AsLong(r);
    Py_DECREF(r);
    if (task == -1 && PyErr_Occurred())
        goto fail;
    if (task != -1) /* recomputed inside backward (checkpointing) */
        return;
    int64_t end = dft_clock_us();
    PyTypeObject *tp = module_type(module);
    const char *name = dft_at_type_name(tp);
    dft_arg a = {DFT_AT_KEY("module"), .type = DFT_ARG_STR, .v.s = {name, strlen(name)}};
    dft_at_emit("forward", "compute", start, end, &a, 1);
    dft_at_activity(start, end);
    if (searching && T.seen) {
        r = PyObject_CallOneArg(T.seen, module);
        if (!r)
            goto fail;
        Py_DECREF(r);
    }
    r = PyObject_CallNoArgs(T.grad_enabled);
    if (!r)
        goto fail;
    int grad = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (grad < 0)
        goto fail;
    if (!grad)
        return;
    int has_grad_fn = first_has_grad_fn(output, 0);
    if (has_grad_fn < 0)
        goto fail;
    if (!has_grad_fn)
        return;
    int is_loss = PyObject_IsInstance(module, T.loss);
    if (is_loss < 0)
        goto fail;
    /* the latest model; a loss module only when no other one is pending */
    if (!t->bwd_type || !is_loss || t->bwd_is_loss) {
        Py_XSETREF(t->bwd_type, (PyTypeObject *)Py_NewRef((PyObject *)tp));
        t->bwd_is_loss = is_loss;
    }
    return;
fail:
    dft_at_fail(DFT_AT_MODULES);
}

void dft_at_forward_pre(PyObject *module)
{
    dft_at_thread *t = dft_at_thread_get();
    int d = t->depth++;
    if (d == 0) {
        Py_XSETREF(t->top, Py_NewRef(module));
        t->fwd_start = dft_clock_us();
        dft_at_mark_first(t->fwd_start);
        t->fwd_tok = dft_at_span_open("forward", "compute", t->fwd_start, -1);
    }
}

void dft_at_forward_post(PyObject *module, PyObject *output)
{
    dft_at_thread *t = dft_at_thread_get();
    int d = t->depth - 1;
    if (d > 0) {
        t->depth = d;
        return;
    }
    t->depth = 0;
    dft_at_span_close(&t->fwd_tok);
    if (d == 0 && t->top == module) {
        PyObject *top = t->top; /* module holds it for the call */
        t->top = NULL;
        top_forward(module, t->fwd_start, output);
        Py_DECREF(top);
    }
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind; /* HOOK_* */
} HookObject;

enum { HOOK_FWD_PRE, HOOK_FWD_POST, HOOK_OPT_PRE, HOOK_OPT_POST };

static void optimizer_pre(PyObject *opt);
static void optimizer_post(PyObject *opt);

/* torch calls it: forward pre-hook (module, args), forward hook (module, args,
 * output), optimizer step pre/post hooks (opt, args, kwargs).  Returns None
 * (the hooks never change what the program sees). */
static PyObject *hook_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    HookObject *h = (HookObject *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    Py_ssize_t want = h->kind == HOOK_FWD_PRE ? 2 : 3;
    if (n != want || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "dftracer torch hook takes %zd positional arguments",
                     want);
        return NULL;
    }
    switch (h->kind) {
    case HOOK_FWD_PRE:
        if (dft_at_on[DFT_AT_MODULES])
            dft_at_forward_pre(args[0]);
        break;
    case HOOK_FWD_POST:
        if (dft_at_on[DFT_AT_MODULES])
            dft_at_forward_post(args[0], args[2]);
        break;
    case HOOK_OPT_PRE:
        if (dft_at_on[DFT_AT_OPTIMIZER])
            optimizer_pre(args[0]);
        break;
    default:
        if (dft_at_on[DFT_AT_OPTIMIZER])
            optimizer_post(args[0]);
        break;
    }
    Py_RETURN_NONE;
}

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._TorchHook",
    .tp_basicsize = sizeof(HookObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HookObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_doc = "A torch hook of dftracer's zero-code events, in C.",
};

/* ---- backward ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original; /* torch.autograd.graph._engine_run_backward */
} EngineRun;

static PyObject *engine_run_vc(PyObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    PyObject *original = ((EngineRun *)self)->original;
    dft_at_thread *t = dft_at_thread_get();
    if (!dft_at_on[DFT_AT_MODULES] || !t->bwd_type || t->in_backward)
        return PyObject_Vectorcall(original, args, nargsf, kwnames);
    PyTypeObject *tp = (PyTypeObject *)Py_NewRef((PyObject *)t->bwd_type);
    t->in_backward = 1; /* a pass run inside it (reentrant checkpointing) is its part */
    int64_t start = dft_clock_us();
    int64_t tok = dft_at_span_open("backward", "compute", start, -1);
    PyObject *r = PyObject_Vectorcall(original, args, nargsf, kwnames);
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (!r) /* the program's exception, kept across our bookkeeping */
        PyErr_Fetch(&type, &value, &tb);
    dft_at_span_close(&tok);
    int64_t end = dft_clock_us();
    t->in_backward = 0;
    const char *name = dft_at_type_name(tp);
    dft_arg a = {DFT_AT_KEY("module"), .type = DFT_ARG_STR, .v.s = {name, strlen(name)}};
    dft_at_emit("backward", "compute", start, end, &a, 1);
    dft_at_activity(start, end);
    Py_DECREF(tp);
    if (!r)
        PyErr_Restore(type, value, tb);
    return r;
}

static PyObject *engine_run_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    PyObject *original;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "_AtEngineRun takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "_AtEngineRun", 1, 1, &original))
        return NULL;
    if (!PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError,
                            "_AtEngineRun: original must be callable, not %.100s",
                            Py_TYPE(original)->tp_name);
    EngineRun *e = (EngineRun *)tp->tp_alloc(tp, 0);
    if (!e)
        return NULL;
    e->vectorcall = engine_run_vc;
    e->original = Py_NewRef(original);
    return (PyObject *)e;
}

static void engine_run_dealloc(PyObject *self)
{
    Py_XDECREF(((EngineRun *)self)->original);
    Py_TYPE(self)->tp_free(self);
}

static PyMemberDef engine_run_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(EngineRun, original), READONLY,
     "torch's _engine_run_backward"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject EngineRunType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._AtEngineRun",
    .tp_basicsize = sizeof(EngineRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(EngineRun, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = engine_run_new,
    .tp_dealloc = engine_run_dealloc,
    .tp_members = engine_run_members,
    .tp_doc = "torch.autograd's _engine_run_backward, timing `backward` passes.",
};

/* ---- optimizer ----------------------------------------------------------- */

static void optimizer_pre(PyObject *opt)
{
    dft_at_thread *t = dft_at_thread_get();
    if (t->opt_depth && t->opt_owner == opt) /* an earlier step() raised */
        t->opt_depth = 0;
    if (++t->opt_depth != 1)
        return;
    t->opt_owner = opt;
    int64_t start = t->opt_start = dft_clock_us();
    dft_at_mark_first(start);
    t->opt_tok = dft_at_span_open("optimizer.step", "compute", start, dft_at_step());
    if (t->depth) { /* a forward that ended without its hooks */
        t->depth = 0;
        Py_CLEAR(t->top);
    }
    if (dft_at_optimizer_begin((uintptr_t)opt, start) < 0)
        dft_at_fail(DFT_AT_OPTIMIZER);
}

static void optimizer_post(PyObject *opt)
{
    dft_at_thread *t = dft_at_thread_get();
    if (t->opt_depth <= 0)
        return;
    if (--t->opt_depth != 0 || t->opt_owner != opt)
        return;
    t->opt_owner = NULL;
    Py_CLEAR(t->bwd_type); /* the next backward is of the next forward */
    dft_at_span_close(&t->opt_tok);
    int64_t end = dft_clock_us();
    dft_at_mark(end); /* before the event is written: a flush can take a while */
    const char *name = dft_at_type_name(Py_TYPE(opt));
    dft_arg a[2] = {{DFT_AT_KEY("step"), .type = DFT_ARG_INT, .v.i = dft_at_step()},
                    {DFT_AT_KEY("optimizer"), .type = DFT_ARG_STR, .v.s = {name, strlen(name)}}};
    dft_at_emit("optimizer.step", "compute", t->opt_start, end, a, 2);
    if (dft_at_optimizer_end((uintptr_t)opt, end) < 0)
        dft_at_fail(DFT_AT_OPTIMIZER);
}

/* ---- setup --------------------------------------------------------------- */

/* _at_setup(tensor, parameter, loss, is_grad_enabled, current_graph_task_id,
 *           search_seen): what the hooks need of torch. */
static PyObject *py_setup(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "_at_setup(tensor, parameter, loss, is_grad_enabled, "
                        "current_graph_task_id, search_seen)");
        return NULL;
    }
    for (int i = 3; i < 6; i++)
        if (!PyCallable_Check(args[i]))
            return PyErr_Format(PyExc_TypeError, "_at_setup: argument %d must be callable",
                                i + 1);
    Py_XSETREF(T.tensor, Py_NewRef(args[0]));
    Py_XSETREF(T.parameter, Py_NewRef(args[1]));
    Py_XSETREF(T.loss, Py_NewRef(args[2]));
    Py_XSETREF(T.grad_enabled, Py_NewRef(args[3]));
    Py_XSETREF(T.graph_task, Py_NewRef(args[4]));
    Py_XSETREF(T.seen, Py_NewRef(args[5]));
    T.ready = 1;
    Py_RETURN_NONE;
}

/* _at_searching(on): the global module hooks are on (top-level forwards are
 * reported to search_seen). */
static PyObject *py_searching(PyObject *m, PyObject *arg)
{
    (void)m;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    searching = on;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_at_setup", (PyCFunction)(void (*)(void))py_setup, METH_FASTCALL,
     "_at_setup(tensor, parameter, loss, is_grad_enabled, current_graph_task_id, "
     "search_seen)\n\nWhat the torch hooks in C need of torch."},
    {"_at_searching", py_searching, METH_O,
     "_at_searching(on)\n\nWhether the global module hooks are searching."},
    {NULL, NULL, 0, NULL},
};

static int add_hook(PyObject *module, const char *name, int kind)
{
    HookObject *h = PyObject_New(HookObject, &HookType);
    if (!h)
        return -1;
    h->vectorcall = hook_vectorcall;
    h->kind = kind;
    int r = PyModule_AddObjectRef(module, name, (PyObject *)h);
    Py_DECREF(h);
    return r;
}

/* GIL held (PyInit__core). */
int dft_at_hooks_register(PyObject *module)
{
    if (PyType_Ready(&HookType) < 0 || PyType_Ready(&EngineRunType) < 0)
        return -1;
    if (!T.module_attr && (!(T.module_attr = PyUnicode_InternFromString("__module__")) ||
                           !(T.orig_mod = PyUnicode_InternFromString("_orig_mod")) ||
                           !(T.requires_grad = PyUnicode_InternFromString("requires_grad")) ||
                           !(T.is_leaf = PyUnicode_InternFromString("is_leaf"))))
        return -1;
    if (PyModule_AddFunctions(module, methods) < 0 ||
        add_hook(module, "_at_forward_pre", HOOK_FWD_PRE) < 0 ||
        add_hook(module, "_at_forward_post", HOOK_FWD_POST) < 0 ||
        add_hook(module, "_at_optimizer_pre", HOOK_OPT_PRE) < 0 ||
        add_hook(module, "_at_optimizer_post", HOOK_OPT_POST) < 0 ||
        PyModule_AddObjectRef(module, "_AtEngineRun", (PyObject *)&EngineRunType) < 0)
        return -1;
    return 0;
}
