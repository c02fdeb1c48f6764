/* torch/autotrace_calls.c: _core._AtCall, a torch API function timed per
 * call in C (dftracer/_autotrace/comm.py, funcol.py, checkpoint.py set them
 * in place of the functions):
 *
 *   collective   torch.distributed's all_reduce, broadcast, ... (`bytes`,
 *                `group`, `group_size`, `seq`, `async`)
 *   p2p          send, recv, isend, irecv (`peer`, `p2p_seq` for `seq`)
 *   funcol       the functional collectives (the issue: `async` 1)
 *   save / load  torch.save, torch.load (`path`, `bytes`)
 *
 * What each call reads (the data argument, the group, async_op, the peer,
 * the file) was located by name and position when it was made
 * (inspect.signature, in Python); a call reads it from the vectorcall
 * arguments.  The collectives' part is autotrace_comm.c; this file is the
 * wrapper itself, its arguments, torch.save/load and the set-up.
 *
 * To torch.compile a wrapper is what torch.jit.script_if_tracing makes:
 * dynamo traces its `__original_fn` (so c10d collectives are still remapped
 * to functional ones in a graph); `__wrapped__`, `__name__`, `__doc__` and
 * pickling by name are the original function's, as functools.wraps gave.
 * A failure of ours turns the part off (dft_at_fail) and the call runs
 * once, untouched.  Everything needs the GIL. */
#include "torch/autotrace_comm.h"
#include "torch/parts.h"

#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"

static PyObject *tell_name, *compiling_flag_name;

/* (pos, name or None, default) from comm.arg_spec(). */
static int arg_spec_from(arg_spec *s, PyObject *spec, const char *what)
{
    if (spec == Py_None) {
        s->pos = -1;
        return 0;
    }
    PyObject *name, *dflt;
    Py_ssize_t pos;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "nOO", &pos, &name, &dflt)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "_AtCall: %s must be (pos, name, default) or None", what);
        return -1;
    }
    if (name != Py_None && !PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "_AtCall: the name of %s must be a str", what);
        return -1;
    }
    s->pos = pos;
    s->name = name == Py_None ? NULL : Py_NewRef(name);
    s->dflt = Py_NewRef(dflt);
    return 0;
}

static void arg_spec_clear(arg_spec *s)
{
    Py_CLEAR(s->name);
    Py_CLEAR(s->dflt);
}

/* ---- torch.save / torch.load --------------------------------------------- */

/* The absolute path of a path argument (a new str), Py_None (new) for a
 * file object, NULL with an exception set. */
static PyObject *path_of(PyObject *f)
{
    if (!PyUnicode_Check(f) && !PyBytes_Check(f) &&
        !PyObject_HasAttrString((PyObject *)Py_TYPE(f), "__fspath__"))
        return Py_NewRef(Py_None);
    PyObject *p = PyOS_FSPath(f);
    if (!p)
        return NULL;
    if (PyBytes_Check(p)) {
        PyObject *s = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p));
        Py_SETREF(p, s);
        if (!p)
            return NULL;
    }
    Py_SETREF(p, PyObject_CallOneArg(dft_at_calls.abspath, p));
    return p;
}

/* f.tell() as an int, or -1 where it has none (its errors are cleared, as
 * a file object that cannot tell only loses the event's `bytes`). */
static int64_t tell_of(PyObject *f)
{
    PyObject *pos = PyObject_CallMethodNoArgs(f, tell_name);
    if (!pos || !PyLong_Check(pos)) {
        Py_XDECREF(pos);
        PyErr_Clear();
        return -1;
    }
    long long v = PyLong_AsLongLong(pos);
    Py_DECREF(pos);
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();
    return v;
}

/* Size of the file at path (a str), or -1. */
static int64_t size_of(PyObject *path)
{
    PyObject *b = PyUnicode_EncodeFSDefault(path);
    if (!b) {
        PyErr_Clear();
        return -1;
    }
    struct stat st;
    int rc = stat(PyBytes_AS_STRING(b), &st);
    Py_DECREF(b);
    return rc == 0 ? (int64_t)st.st_size : -1;
}

static PyObject *checkpoint_call(AtCall *w, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    PyObject *f = arg_of(&w->data, args, PyVectorcall_NARGS(nargsf), kwnames);
    PyObject *path = path_of(f);
    if (!path) {
        dft_at_fail(w->part);
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    }
    int64_t before = path == Py_None ? tell_of(f) : -1;
    int64_t start = dft_clock_us();
    PyObject *r = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    int64_t end = dft_clock_us();
    if (r) {
        int64_t size = -1;
        if (path != Py_None) {
            size = size_of(path);
        } else if (before >= 0) {
            int64_t after = tell_of(f);
            size = after >= 0 ? after - before : -1;
        }
        dft_arg a[2];
        unsigned na = 0;
        if (size >= 0)
            a[na++] = (dft_arg){.key = "bytes", .key_len = 5, .type = DFT_ARG_INT, .v.i = size};
        Py_ssize_t plen = 0;
        const char *p = path != Py_None ? PyUnicode_AsUTF8AndSize(path, &plen) : NULL;
        if (p)
            a[na++] = (dft_arg){.key = "path", .key_len = 4, .type = DFT_ARG_STR,
                                .v.s = {p, (size_t)plen}};
        if (path != Py_None && !p) {
            dft_at_fail(w->part);
        } else {
            dft_at_emit_n(w->name_utf8, (size_t)w->name_len, DFT_AT_LIT("checkpoint"), start, end, a, na);
            if (PyObject_TypeCheck(r, (PyTypeObject *)dft_at_calls.module_type)) { /* time its forward */
                PyObject *s = PyObject_CallNoArgs(dft_at_calls.loaded_module);
                if (s)
                    Py_DECREF(s);
                else
                    dft_at_fail(w->part);
            }
        }
    }
    Py_DECREF(path);
    return r;
}

/* ---- the wrapper ---------------------------------------------------------- */

/* 1 while torch.compile or torch.export traces (the program's own Python
 * runs on fake tensors then: not an event); -1 with an exception.  Where
 * torch.compiler.is_compiling() only returns its module's
 * `_is_compiling_flag`, setup hands over that module's dict and the flag is
 * read there: no Python call on a collective's path. */
static int compiling(void)
{
    if (PyDict_Check(dft_at_calls.compiling)) {
        PyObject *flag = PyDict_GetItemWithError(dft_at_calls.compiling, compiling_flag_name);
        return flag ? PyObject_IsTrue(flag) : (PyErr_Occurred() ? -1 : 0);
    }
    PyObject *r = PyObject_CallNoArgs(dft_at_calls.compiling);
    if (!r)
        return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

static PyObject *at_call_vc(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    AtCall *w = (AtCall *)self;
    dft_at_thread *t = dft_at_thread_get();
    if (!dft_at_on[w->part] || !dft_at_calls.compiling)
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    int skip = w->part == DFT_AT_COMM ? t->in_comm : t->in_data;
    if (!skip) {
        skip = compiling();
        if (skip < 0) {
            dft_at_fail(w->part);
            skip = 1;
        }
    }
    if (skip)
        return w->part == DFT_AT_COMM ? dft_at_call_original(w, t, args, nargsf, kwnames)
                                      : PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    if (w->part == DFT_AT_CHECKPOINT)
        return checkpoint_call(w, args, nargsf, kwnames);
    return dft_at_comm_call(w, t, args, nargsf, kwnames);
}

static const char *const kind_names[CALL_NKINDS] = {"collective", "p2p", "funcol", "save",
                                                    "load"};

/* _AtCall(original, name, kind, data, group=None, async_op=None, peer=None,
 *         group_peer=None, tag=None, resolve=None, is_async=False, sends=False) */
static PyObject *at_call_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"original", "name", "kind", "data", "group", "async_op", "peer",
                         "group_peer", "tag", "resolve", "is_async", "sends", NULL};
    PyObject *original, *name, *data, *group = Py_None, *async_op = Py_None, *peer = Py_None;
    PyObject *group_peer = Py_None, *tag = Py_None, *resolve = Py_None;
    const char *kind;
    int is_async = 0, sends = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUsO|OOOOOOpp:_AtCall", kw, &original, &name,
                                     &kind, &data, &group, &async_op, &peer, &group_peer, &tag,
                                     &resolve, &is_async, &sends))
        return NULL;
    if (!PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "_AtCall: original must be callable");
        return NULL;
    }
    int k = 0;
    while (k < CALL_NKINDS && strcmp(kind_names[k], kind) != 0)
        k++;
    if (k == CALL_NKINDS) {
        PyErr_Format(PyExc_ValueError,
                     "_AtCall: kind must be collective, p2p, funcol, save or load, not '%s'",
                     kind);
        return NULL;
    }
    if (k == CALL_FUNCOL && !PyCallable_Check(resolve)) {
        PyErr_SetString(PyExc_TypeError, "_AtCall: a funcol wrapper needs resolve(group, tag)");
        return NULL;
    }
    AtCall *w = (AtCall *)tp->tp_alloc(tp, 0);
    if (!w)
        return NULL;
    w->vectorcall = at_call_vc;
    w->original = Py_NewRef(original);
    w->name = Py_NewRef(name);
    w->kind = k;
    w->part = k >= CALL_SAVE ? DFT_AT_CHECKPOINT : DFT_AT_COMM;
    w->is_async = is_async;
    w->sends = sends;
    w->resolve = resolve == Py_None ? NULL : Py_NewRef(resolve);
    w->data.pos = w->group.pos = w->async_op.pos = w->peer.pos = w->group_peer.pos =
        w->tag.pos = -1;
    if (!(w->name_utf8 = PyUnicode_AsUTF8AndSize(name, &w->name_len)) ||
        arg_spec_from(&w->data, data, "data") < 0 || arg_spec_from(&w->group, group, "group") < 0 ||
        arg_spec_from(&w->async_op, async_op, "async_op") < 0 ||
        arg_spec_from(&w->peer, peer, "peer") < 0 ||
        arg_spec_from(&w->group_peer, group_peer, "group_peer") < 0 ||
        arg_spec_from(&w->tag, tag, "tag") < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

static int at_call_traverse(PyObject *self, visitproc visit, void *arg)
{
    AtCall *w = (AtCall *)self;
    Py_VISIT(w->dict);
    Py_VISIT(w->original);
    Py_VISIT(w->resolve);
    Py_VISIT(w->data.dflt);
    Py_VISIT(w->group.dflt);
    Py_VISIT(w->async_op.dflt);
    Py_VISIT(w->peer.dflt);
    Py_VISIT(w->group_peer.dflt);
    Py_VISIT(w->tag.dflt);
    return 0;
}

static int at_call_clear(PyObject *self)
{
    AtCall *w = (AtCall *)self;
    Py_CLEAR(w->dict);
    Py_CLEAR(w->original);
    Py_CLEAR(w->resolve);
    arg_spec_clear(&w->data);
    arg_spec_clear(&w->group);
    arg_spec_clear(&w->async_op);
    arg_spec_clear(&w->peer);
    arg_spec_clear(&w->group_peer);
    arg_spec_clear(&w->tag);
    return 0;
}

static void at_call_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    at_call_clear(self);
    Py_CLEAR(((AtCall *)self)->name);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *at_call_original(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(((AtCall *)self)->original);
}

static PyObject *at_call_true(PyObject *self, void *unused)
{
    (void)self;
    (void)unused;
    Py_RETURN_TRUE;
}

static PyObject *at_call_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<dftracer timing of %R>", ((AtCall *)self)->original);
}

/* Pickled by name, as the function it replaces is (its module holds the
 * wrapper under that name). */
static PyObject *at_call_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyGetSetDef at_call_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    /* what torch.jit.script_if_tracing makes: dynamo and torch.jit.script
     * look through it to __original_fn */
    {"__original_fn", at_call_original, NULL, "the function timed", NULL},
    {"__script_if_tracing_wrapper", at_call_true, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef at_call_methods[] = {
    {"__reduce__", at_call_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AtCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._AtCall",
    .tp_basicsize = sizeof(AtCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A torch function timed per call (dftracer/_autotrace: comm, checkpoint).",
    .tp_vectorcall_offset = offsetof(AtCall, vectorcall),
    .tp_dictoffset = offsetof(AtCall, dict),
    .tp_call = PyVectorcall_Call,
    .tp_new = at_call_new,
    .tp_traverse = at_call_traverse,
    .tp_clear = at_call_clear,
    .tp_dealloc = at_call_dealloc,
    .tp_repr = at_call_repr,
    .tp_getset = at_call_getset,
    .tp_methods = at_call_methods,
};

/* ---- set-up --------------------------------------------------------------- */

/* _at_calls_setup(group_info, seq, Tensor, ProcessGroup or None, is_compiling,
 *                 get_rank, get_global_rank, abspath, Module, loaded_module);
 * is_compiling: the function, or the dict holding `_is_compiling_flag`. */
static PyObject *py_calls_setup(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n != 10 || !PyDict_Check(args[1]) || !PyType_Check(args[2]) ||
        (!PyType_Check(args[3]) && args[3] != Py_None) || !PyType_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError,
                        "_at_calls_setup(group_info, seq: dict, Tensor, ProcessGroup, "
                        "is_compiling, get_rank, get_global_rank, abspath, Module, loaded_module)");
        return NULL;
    }
    PyObject *groups = PyDict_New();
    if (!groups)
        return NULL;
    PyObject **slots[] = {&dft_at_calls.group_info, &dft_at_calls.seq, &dft_at_calls.tensor_type, &dft_at_calls.pg_type, &dft_at_calls.compiling,
                          &dft_at_calls.get_rank, &dft_at_calls.global_rank, &dft_at_calls.abspath, &dft_at_calls.module_type,
                          &dft_at_calls.loaded_module};
    for (int i = 0; i < 10; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_CLEAR(dft_at_calls.default_info);
    Py_XSETREF(dft_at_calls.groups, groups);
    Py_RETURN_NONE;
}

/* _at_calls_reset(): forget the groups (destroy_process_group: a new default
 * group, or a new group at an old one's address, may follow). */
static PyObject *py_calls_reset(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Py_CLEAR(dft_at_calls.default_info);
    if (dft_at_calls.groups)
        PyDict_Clear(dft_at_calls.groups);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_at_calls_setup", (PyCFunction)(void (*)(void))py_calls_setup, METH_FASTCALL,
     "What the _AtCall wrappers share (dftracer/_autotrace/comm.py)."},
    {"_at_calls_reset", py_calls_reset, METH_NOARGS,
     "Forgets the process groups the _AtCall wrappers know."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core, through torch/module.c). */
int dft_at_calls_register(PyObject *module)
{
    if (PyType_Ready(&AtCallType) < 0)
        return -1;
    if (dft_at_comm_init() < 0 || (!tell_name && !(tell_name = PyUnicode_InternFromString("tell"))) ||
        (!compiling_flag_name && !(compiling_flag_name = PyUnicode_InternFromString("_is_compiling_flag"))))
        return -1;
    if (PyModule_AddFunctions(module, methods) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "_AtCall", (PyObject *)&AtCallType);
}
