/* profile/wrap.c: what dft_fn.log() returns.  A wrapper is a C callable with
 * vectorcall that writes one event per call (per resumption for generator
 * functions; one spanning the awaited call for async functions), reads the
 * epoch/step/image_idx/image_size arguments, and binds like the function it
 * wraps (three types: function-like, staticmethod-like, classmethod-like).
 *
 * When tracing is off the call is forwarded as is: two loads and a branch.
 * All functions need the GIL. */
#include "profile/emit.h"
#include "profile/wrap.h"

#include <stddef.h>
#include <string.h>

#include "core/clock.h"
#include "core/config.h"
#include "binding/pyargs.h"

enum { KIND_PLAIN, KIND_GEN, KIND_CORO };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    ProfileObject *profile;
    PyObject *func;    /* what is called */
    vectorcallfunc func_vc; /* func's vectorcall, looked up once */
    PyObject *wrapped; /* __wrapped__: func, unwrapped from staticmethod/classmethod */
    PyObject *name;    /* event name */
    PyObject *dict;
    PyObject *weakreflist;
    int kind;
    int self_first;                 /* first parameter is named self */
    int argcount;                   /* positional parameters */
    signed char param[DFT_SA_N];    /* positional index of epoch/..., or -1 */
    signed char kwparam[DFT_SA_N];  /* 1: a parameter with that name exists */
    int wants_args;                 /* self_first or any kwparam: collect() has work */
} WrapperObject;

static PyTypeObject WrapFunctionType, WrapStaticType, WrapClassType;
static PyTypeObject TracedGenType, TracedCoroType;

/* ---- argument values ---------------------------------------------------- */

static int lookup_attr(PyObject *obj, PyObject *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, out);
#else
    return _PyObject_LookupAttr(obj, name, out);
#endif
}

static PyObject *param_default(WrapperObject *w, int k)
{
    if (!PyFunction_Check(w->wrapped))
        return NULL;
    if (w->param[k] >= 0) {
        PyObject *defs = PyFunction_GetDefaults(w->wrapped);
        if (!defs)
            return NULL;
        Py_ssize_t i = w->param[k] - (w->argcount - PyTuple_GET_SIZE(defs));
        return i >= 0 && i < PyTuple_GET_SIZE(defs) ? PyTuple_GET_ITEM(defs, i) : NULL;
    }
    PyObject *kwdefs = PyFunction_GetKwDefaults(w->wrapped);
    if (!kwdefs)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(kwdefs, dft_sa_names[k]);
    if (!v)
        PyErr_Clear();
    return v;
}

/* Values from self's attributes, then declared defaults, then the arguments
 * actually passed: the last found wins.  Never raises. */
static void collect(WrapperObject *w, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    dft_stepargs *sa)
{
    for (int k = 0; k < DFT_SA_N; k++)
        sa->v[k].type = 0;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (!w->wants_args && nkw == 0)
        return;
    for (int k = 0; k < DFT_SA_N; k++) {
        int as_int = k != DFT_SA_IMAGE_SIZE;
        PyObject *v = NULL;
        for (Py_ssize_t i = 0; i < nkw && !v; i++) {
            PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
            if (kw == dft_sa_names[k] || PyUnicode_Compare(kw, dft_sa_names[k]) == 0)
                v = args[nargs + i];
        }
        if (!v && w->param[k] >= 0 && w->param[k] < nargs)
            v = args[w->param[k]];
        if (v) { /* passed: its value, or nothing when it is not a number */
            dft_val_from(v, as_int, &sa->v[k]);
            continue;
        }
        if (w->self_first && nargs > 0) {
            PyObject *a = NULL;
            if (lookup_attr(args[0], dft_sa_names[k], &a) < 0)
                PyErr_Clear();
            int got = a && dft_val_from(a, as_int, &sa->v[k]);
            Py_XDECREF(a);
            if (got)
                continue;
        }
        if (w->kwparam[k])
            dft_val_from(param_default(w, k), as_int, &sa->v[k]);
    }
}

/* ---- generator and coroutine proxies ------------------------------------ */

typedef struct {
    PyObject_HEAD
    WrapperObject *w;
    PyObject *inner;
    dft_stepargs sa;
    int64_t t0; /* coroutines: the first resumption, 0 when untraced */
    int started, done;
} TracedObject;

static PyObject *traced_new(WrapperObject *w, PyObject *inner, const dft_stepargs *sa)
{
    PyTypeObject *tp = w->kind == KIND_CORO ? &TracedCoroType : &TracedGenType;
    TracedObject *g = PyObject_GC_New(TracedObject, tp);
    if (!g) {
        Py_DECREF(inner);
        return NULL;
    }
    g->w = (WrapperObject *)Py_NewRef(w);
    g->inner = inner;
    g->sa = *sa;
    g->t0 = 0;
    g->started = g->done = 0;
    PyObject_GC_Track(g);
    return (PyObject *)g;
}

/* One resumption: send(value) or throw(*throw_args). */
static PySendResult traced_resume(TracedObject *g, PyObject *value, PyObject *throw_args,
                                  PyObject **result)
{
    ProfileObject *p = g->w->profile;
    int gen = Py_IS_TYPE(g, &TracedGenType);
    int on = dft_profile_on(p);
    dft_scope_tok tok = {NULL, 0, 0};
    int64_t t0 = 0;
    if (on && gen) {
        dft_scope_open(&tok);
        t0 = dft_clock_us();
    } else if (on && !g->started) {
        g->t0 = dft_clock_us();
    }
    g->started = 1;
    PySendResult st;
    if (throw_args) {
        PyObject *m = PyObject_GetAttrString(g->inner, "throw");
        *result = m ? PyObject_Call(m, throw_args, NULL) : NULL;
        Py_XDECREF(m);
        st = *result ? PYGEN_NEXT : PYGEN_ERROR;
    } else {
        st = PyIter_Send(g->inner, value, result);
    }
    if (gen && on) {
        int64_t dur = dft_clock_us() - t0;
        if (st == PYGEN_ERROR)
            dft_profile_emit_keep_error(p, &tok, g->w->name, t0, dur, &g->sa, NULL, 0);
        else
            dft_profile_emit(p, &tok, g->w->name, t0, dur, &g->sa, NULL, 0, NULL);
        dft_scope_close(&tok);
    } else if (!gen && st != PYGEN_NEXT && !g->done) {
        g->done = 1;
        if (g->t0) {
            int64_t dur = dft_clock_us() - g->t0;
            if (st == PYGEN_ERROR)
                dft_profile_emit_keep_error(p, NULL, g->w->name, g->t0, dur, &g->sa, NULL, 0);
            else
                dft_profile_emit(p, NULL, g->w->name, g->t0, dur, &g->sa, NULL, 0, NULL);
        }
    }
    return st;
}

static PySendResult traced_am_send(PyObject *self, PyObject *value, PyObject **result)
{
    return traced_resume((TracedObject *)self, value, NULL, result);
}

/* StopIteration(value), as a returning generator raises it. */
static PyObject *set_stop(PyObject *value, int always)
{
    if (value == Py_None) {
        Py_DECREF(value);
        if (always)
            PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, value);
    Py_DECREF(value);
    if (e) {
        PyErr_SetObject(PyExc_StopIteration, e);
        Py_DECREF(e);
    }
    return NULL;
}

static PyObject *traced_iternext(PyObject *self)
{
    PyObject *r;
    PySendResult st = traced_resume((TracedObject *)self, Py_None, NULL, &r);
    if (st == PYGEN_NEXT)
        return r;
    if (st == PYGEN_RETURN)
        return set_stop(r, 0);
    return NULL;
}

static PyObject *traced_send(PyObject *self, PyObject *value)
{
    PyObject *r;
    PySendResult st = traced_resume((TracedObject *)self, value, NULL, &r);
    if (st == PYGEN_NEXT)
        return r;
    if (st == PYGEN_RETURN)
        return set_stop(r, 1);
    return NULL;
}

static PyObject *traced_throw(PyObject *self, PyObject *args)
{
    PyObject *r;
    PySendResult st = traced_resume((TracedObject *)self, NULL, args, &r);
    return st == PYGEN_NEXT ? r : NULL;
}

static PyObject *traced_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    TracedObject *g = (TracedObject *)self;
    if (!Py_IS_TYPE(g, &TracedGenType) && g->started && !g->done) {
        g->done = 1;
        if (g->t0) /* closed before finishing: marked like an error */
            dft_profile_emit(g->w->profile, NULL, g->w->name, g->t0, dft_clock_us() - g->t0, &g->sa,
                             NULL, 0, PyExc_GeneratorExit);
    }
    return PyObject_CallMethod(g->inner, "close", NULL);
}

static PyObject *traced_await(PyObject *self) { return Py_NewRef(self); }

/* Anything else (gi_frame, cr_code, __name__, ...) comes from the inner object. */
static PyObject *traced_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(((TracedObject *)self)->inner, name);
}

static int traced_traverse(PyObject *self, visitproc visit, void *arg)
{
    TracedObject *g = (TracedObject *)self;
    Py_VISIT(g->w);
    Py_VISIT(g->inner);
    return 0;
}

static int traced_clear(PyObject *self)
{
    TracedObject *g = (TracedObject *)self;
    Py_CLEAR(g->w);
    Py_CLEAR(g->inner);
    return 0;
}

static void traced_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    traced_clear(self);
    PyObject_GC_Del(self);
}

static PyObject *traced_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<traced %R>", ((TracedObject *)self)->inner);
}

static PyMethodDef traced_methods[] = {
    {"send", traced_send, METH_O, "send(value): resumes the wrapped generator/coroutine."},
    {"throw", traced_throw, METH_VARARGS, "throw(typ[, val[, tb]])"},
    {"close", traced_close, METH_NOARGS, "close()"},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods traced_gen_async = {.am_send = traced_am_send};
static PyAsyncMethods traced_coro_async = {.am_await = traced_await, .am_send = traced_am_send};

#define TRACED_TYPE(VAR, NAME, DOC, ASYNC)                                          \
    static PyTypeObject VAR = {                                                     \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = NAME,                              \
        .tp_basicsize = sizeof(TracedObject),                                       \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,                        \
        .tp_doc = DOC,                                                              \
        .tp_as_async = ASYNC,                                                       \
        .tp_iter = PyObject_SelfIter,                                               \
        .tp_iternext = traced_iternext,                                             \
        .tp_methods = traced_methods,                                               \
        .tp_getattro = traced_getattro,                                             \
        .tp_traverse = traced_traverse,                                             \
        .tp_clear = traced_clear,                                                   \
        .tp_dealloc = traced_dealloc,                                               \
        .tp_repr = traced_repr,                                                     \
    }

TRACED_TYPE(TracedGenType, "dftracer._core.traced_generator",
            "A generator whose every resumption is traced.", &traced_gen_async);
TRACED_TYPE(TracedCoroType, "dftracer._core.traced_coroutine",
            "A coroutine traced from its first resumption to its result.", &traced_coro_async);

/* ---- the wrapper types --------------------------------------------------- */

static PyObject *wrap_traced_call(WrapperObject *w, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
{
    dft_stepargs sa;
    collect(w, args, PyVectorcall_NARGS(nargsf), kwnames, &sa);
    if (w->kind != KIND_PLAIN) {
        PyObject *inner = PyObject_Vectorcall(w->func, args, nargsf, kwnames);
        return inner ? traced_new(w, inner, &sa) : NULL;
    }
    dft_scope_tok tok;
    dft_scope_open(&tok);
    int64_t t0 = dft_clock_us();
    PyObject *r = dft_call(w->func, w->func_vc, args, nargsf, kwnames);
    int64_t dur = dft_clock_us() - t0;
    if (r)
        dft_profile_emit(w->profile, &tok, w->name, t0, dur, &sa, NULL, 0, NULL);
    else
        dft_profile_emit_keep_error(w->profile, &tok, w->name, t0, dur, &sa, NULL, 0);
    dft_scope_close_here(&tok);
    return r;
}

/* The hot path. */
static PyObject *wrap_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    WrapperObject *w = (WrapperObject *)self;
    if (!dft_profile_on(w->profile))
        return dft_call(w->func, w->func_vc, args, nargsf, kwnames);
    return wrap_traced_call(w, args, nargsf, kwnames);
}

/* Reads the parameter names of a plain Python function. */
static int read_params(WrapperObject *w)
{
    for (int k = 0; k < DFT_SA_N; k++) {
        w->param[k] = -1;
        w->kwparam[k] = 0;
    }
    w->argcount = 0;
    if (!PyFunction_Check(w->wrapped))
        return 0;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(w->wrapped);
    if (co->co_flags & CO_GENERATOR)
        w->kind = KIND_GEN;
    else if (co->co_flags & CO_COROUTINE)
        w->kind = KIND_CORO;
    PyObject *names = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    if (!names)
        return -1;
    if (!PyTuple_Check(names)) {
        Py_DECREF(names);
        return 0;
    }
    int npos = co->co_argcount, nall = co->co_argcount + co->co_kwonlyargcount;
    w->argcount = npos;
    for (int i = 0; i < nall && i < PyTuple_GET_SIZE(names) && i < 127; i++) {
        PyObject *n = PyTuple_GET_ITEM(names, i);
        if (i == 0 && npos > 0 && PyUnicode_CompareWithASCIIString(n, "self") == 0)
            w->self_first = 1;
        for (int k = 0; k < DFT_SA_N; k++) {
            if (PyUnicode_Compare(n, dft_sa_names[k]) == 0) {
                w->kwparam[k] = 1;
                if (i < npos)
                    w->param[k] = (signed char)i;
            }
        }
    }
    Py_DECREF(names);
    w->wants_args = w->self_first;
    for (int k = 0; k < DFT_SA_N; k++)
        w->wants_args |= w->kwparam[k];
    return 0;
}

/* asyncio/inspect recognise a wrapped coroutine function by these markers. */
static void mark_coroutine(WrapperObject *w)
{
    static const struct {
        const char *module, *marker, *attr;
    } marks[] = {
        {"asyncio.coroutines", "_is_coroutine", "_is_coroutine"},
        {"inspect", "_is_coroutine_mark", "_is_coroutine_marker"},
    };
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++) {
        PyObject *m = PyImport_ImportModule(marks[i].module);
        PyObject *v = m ? PyObject_GetAttrString(m, marks[i].marker) : NULL;
        if (v)
            PyDict_SetItemString(w->dict, marks[i].attr, v);
        Py_XDECREF(v);
        Py_XDECREF(m);
        PyErr_Clear();
    }
}

PyObject *dft_wrap_new(ProfileObject *p, PyObject *func, PyObject *name, int force_static)
{
    PyTypeObject *tp = force_static ? &WrapStaticType : &WrapFunctionType;
    PyObject *target = func;
    if (Py_IS_TYPE(func, &PyStaticMethod_Type) || Py_IS_TYPE(func, &PyClassMethod_Type)) {
        tp = Py_IS_TYPE(func, &PyStaticMethod_Type) ? &WrapStaticType : &WrapClassType;
        target = PyObject_GetAttrString(func, "__func__");
        if (!target)
            return NULL;
    } else {
        Py_INCREF(target);
    }
    if (!PyCallable_Check(target)) {
        dft_pyargs_type_error("func", "callable", target);
        Py_DECREF(target);
        return NULL;
    }
    /* Without DFTRACER_ENABLE no trace can start (initialize_log and the lazy
     * start both require it), so the function itself is the cheapest wrapper:
     * a disabled decorator then costs nothing at all per call. */
    if (!dft_active() && !dft_config_env_enabled()) {
        PyObject *same = force_static && func == target ? PyStaticMethod_New(target)
                                                        : Py_NewRef(func);
        Py_DECREF(target);
        return same;
    }
    WrapperObject *w = PyObject_GC_New(WrapperObject, tp);
    if (!w) {
        Py_DECREF(target);
        return NULL;
    }
    w->vectorcall = wrap_vectorcall;
    w->profile = (ProfileObject *)Py_NewRef(p);
    w->func = target;
    w->func_vc = PyVectorcall_Function(target);
    w->wrapped = Py_NewRef(target);
    w->name = NULL;
    w->dict = NULL;
    w->weakreflist = NULL;
    w->kind = KIND_PLAIN;
    w->self_first = 0;
    w->wants_args = 0;
    PyObject_GC_Track(w);
    if (read_params(w) < 0)
        goto fail;
    if (name) {
        w->name = Py_NewRef(name);
    } else {
        w->name = PyObject_GetAttrString(target, "__qualname__");
        if (!w->name) {
            PyErr_Clear();
            w->name = PyObject_GetAttrString(target, "__name__");
        }
        if (!w->name) {
            PyErr_Clear();
            w->name = PyObject_Repr(target);
        }
        if (!w->name)
            goto fail;
        if (!PyUnicode_Check(w->name)) {
            Py_SETREF(w->name, PyObject_Str(w->name));
            if (!w->name)
                goto fail;
        }
    }
    /* functools.update_wrapper copies the function's __dict__ too. */
    w->dict = PyDict_New();
    if (!w->dict)
        goto fail;
    PyObject *fd = PyObject_GetAttrString(target, "__dict__");
    if (fd && PyDict_Check(fd) && PyDict_Update(w->dict, fd) < 0) {
        Py_DECREF(fd);
        goto fail;
    }
    Py_XDECREF(fd);
    PyErr_Clear();
    if (w->kind == KIND_CORO)
        mark_coroutine(w);
    return (PyObject *)w;
fail:
    Py_DECREF(w);
    return NULL;
}

static int wrap_traverse(PyObject *self, visitproc visit, void *arg)
{
    WrapperObject *w = (WrapperObject *)self;
    Py_VISIT(w->profile);
    Py_VISIT(w->func);
    Py_VISIT(w->wrapped);
    Py_VISIT(w->dict);
    return 0;
}

static int wrap_clear(PyObject *self)
{
    WrapperObject *w = (WrapperObject *)self;
    Py_CLEAR(w->profile);
    Py_CLEAR(w->func);
    Py_CLEAR(w->wrapped);
    Py_CLEAR(w->dict);
    return 0;
}

static void wrap_dealloc(PyObject *self)
{
    WrapperObject *w = (WrapperObject *)self;
    PyObject_GC_UnTrack(self);
    if (w->weakreflist)
        PyObject_ClearWeakRefs(self);
    wrap_clear(self);
    Py_CLEAR(w->name);
    PyObject_GC_Del(self);
}

static PyObject *bind_function(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *bind_static(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)obj;
    (void)type;
    return Py_NewRef(self);
}

static PyObject *bind_class(PyObject *self, PyObject *obj, PyObject *type)
{
    if (type == NULL || type == Py_None)
        type = (PyObject *)Py_TYPE(obj);
    return PyMethod_New(self, type);
}

/* __name__, __qualname__, __doc__, __module__, __annotations__: the wrapper's
 * own value once set, else the wrapped callable's. */
static PyObject *wrap_get_attr(PyObject *self, void *closure)
{
    WrapperObject *w = (WrapperObject *)self;
    PyObject *key = PyUnicode_InternFromString((const char *)closure);
    if (!key)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(w->dict, key);
    if (v) {
        Py_DECREF(key);
        return Py_NewRef(v);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    v = PyObject_GetAttr(w->wrapped, key);
    Py_DECREF(key);
    return v;
}

static int wrap_set_attr(PyObject *self, PyObject *value, void *closure)
{
    WrapperObject *w = (WrapperObject *)self;
    if (value)
        return PyDict_SetItemString(w->dict, (const char *)closure, value);
    if (PyDict_DelItemString(w->dict, (const char *)closure) < 0) {
        PyErr_Clear();
    }
    return 0;
}

static PyObject *wrap_get_wrapped(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((WrapperObject *)self)->wrapped);
}

static PyObject *wrap_get_profile(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((WrapperObject *)self)->profile);
}

static PyObject *wrap_get_event_name(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((WrapperObject *)self)->name);
}

static PyGetSetDef wrap_getset[] = {
    {"__name__", wrap_get_attr, wrap_set_attr, NULL, "__name__"},
    {"__qualname__", wrap_get_attr, wrap_set_attr, NULL, "__qualname__"},
    {"__doc__", wrap_get_attr, wrap_set_attr, NULL, "__doc__"},
    {"__module__", wrap_get_attr, wrap_set_attr, NULL, "__module__"},
    {"__annotations__", wrap_get_attr, wrap_set_attr, NULL, "__annotations__"},
    {"__wrapped__", wrap_get_wrapped, NULL, "The wrapped callable.", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"profile", wrap_get_profile, NULL, "The dft_fn writing this wrapper's events.", NULL},
    {"event_name", wrap_get_event_name, NULL, "The name of this wrapper's events.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Pickled by reference, like the function it wraps. */
static PyObject *wrap_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef wrap_methods[] = {
    {"__reduce__", wrap_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *wrap_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<traced %R>", ((WrapperObject *)self)->wrapped);
}

#define WRAP_TYPE(NAME, DESCR, EXTRA_FLAGS)                                                  \
    {                                                                                        \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = NAME,                                       \
        .tp_basicsize = sizeof(WrapperObject),                                               \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |   \
                    EXTRA_FLAGS,                                                             \
        .tp_vectorcall_offset = offsetof(WrapperObject, vectorcall),                         \
        .tp_call = PyVectorcall_Call, .tp_descr_get = DESCR,                                 \
        .tp_dictoffset = offsetof(WrapperObject, dict),                                      \
        .tp_weaklistoffset = offsetof(WrapperObject, weakreflist),                           \
        .tp_traverse = wrap_traverse, .tp_clear = wrap_clear, .tp_dealloc = wrap_dealloc,    \
        .tp_getset = wrap_getset, .tp_methods = wrap_methods, .tp_repr = wrap_repr,          \
    }

/* Binds like a function; the interpreter may call it unbound with self first. */
static PyTypeObject WrapFunctionType =
    WRAP_TYPE("dftracer._core.traced_function", bind_function, Py_TPFLAGS_METHOD_DESCRIPTOR);
static PyTypeObject WrapStaticType =
    WRAP_TYPE("dftracer._core.traced_staticmethod", bind_static, 0);
static PyTypeObject WrapClassType = WRAP_TYPE("dftracer._core.traced_classmethod", bind_class, 0);

int dft_wrap_ready(void)
{
    PyTypeObject *types[] = {&WrapFunctionType, &WrapStaticType, &WrapClassType, &TracedGenType,
                             &TracedCoroType};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0)
            return -1;
    return 0;
}
