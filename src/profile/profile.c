/* profile/profile.c: the dft_fn type (imported by users as `Profile`): a category and
 * name plus the epoch/step/image_idx/image_size/args values written with its
 * events; a context manager; the factory for decorators and loops.
 *
 * Unlike pydftracer, nothing per call is stored on the object: decorated calls
 * keep their state on the C stack and `with` blocks on a per-thread stack, so
 * one object can be used from many threads at once.  All functions need the
 * GIL. */
#include "profile/fn_object.h"
#include "format/grow.h"
#include "profile/emit.h"
#include "profile/loop.h"
#include "profile/wrap.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "integrations.h"
#include "binding/pyargs.h"

static PyObject *str_loop, *str_step, *str_dot_iter, *str_dot_yield;

/* ---- `with` frames: a per-thread stack --------------------------------- */

typedef struct cm_frame {
    ProfileObject *p; /* strong reference */
    int64_t t0;
    dft_scope_tok tok;
    int done;      /* flush() already wrote it */
    int64_t t_end; /* stopped while others were open above it; 0: open */
} cm_frame;

/* Heap-allocated: the module's static TLS block is small.  A thread's stack
 * is not freed when the thread ends (a few hundred bytes). */
static __thread cm_frame *cm_stack;
static __thread int cm_depth;    /* frames in cm_stack */
static __thread size_t cm_cap;
static __thread int cm_overflow; /* frames not recorded (out of memory) */

static int cm_push(ProfileObject *p)
{
    if (DFT_GROW(cm_stack, (size_t)cm_depth, cm_cap, 16) != 0) {
        cm_overflow++;
        return 0;
    }
    cm_frame *f = &cm_stack[cm_depth++];
    f->p = (ProfileObject *)Py_NewRef(p);
    f->done = 0;
    f->t_end = 0;
    dft_scope_open(&f->tok);
    f->t0 = dft_clock_us();
    return 0;
}

/* The innermost frame of p on this thread not already stopped, or -1. */
static int cm_find(ProfileObject *p)
{
    for (int i = cm_depth - 1; i >= 0; i--)
        if (cm_stack[i].p == p && !cm_stack[i].t_end)
            return i;
    return -1;
}

/* Writes and removes the innermost frame, ending at t. */
static void cm_pop(int64_t t, PyObject *exc_type)
{
    cm_frame f = cm_stack[--cm_depth];
    if (!f.done)
        dft_profile_emit(f.p, &f.tok, f.p->name, f.t0, t - f.t0, NULL, NULL, 0, exc_type);
    dft_scope_close(&f.tok);
    Py_DECREF(f.p); /* may run arbitrary code: f is a copy */
}

/* Closes p's innermost frame.  A frame with others still open above it (an
 * out-of-order stop()) only records its end: it is written when it becomes
 * the innermost one again, so every scope is closed in order and events keep
 * their own ids. */
static void cm_close(ProfileObject *p, PyObject *exc_type)
{
    int i = cm_find(p);
    if (i < 0)
        return;
    int64_t t = dft_clock_us();
    if (i != cm_depth - 1) {
        cm_stack[i].t_end = t;
        return;
    }
    cm_pop(t, exc_type);
    while (cm_depth > 0 && cm_stack[cm_depth - 1].t_end)
        cm_pop(cm_stack[cm_depth - 1].t_end, NULL);
}

static PyObject *profile_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    ProfileObject *p = (ProfileObject *)self;
    if (dft_profile_on(p))
        cm_push(p);
    return Py_NewRef(self);
}

static PyObject *profile_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (cm_overflow > 0 && (size_t)cm_depth == cm_cap) {
        cm_overflow--;
        Py_RETURN_FALSE;
    }
    if (cm_depth > 0)
        cm_close((ProfileObject *)self, nargs > 0 && args[0] != Py_None ? args[0] : NULL);
    Py_RETURN_FALSE;
}

/* stop(): closes the innermost start() of this object on this thread. */
static PyObject *profile_stop_frame(PyObject *self, PyObject *unused)
{
    (void)unused;
    cm_close((ProfileObject *)self, NULL);
    Py_RETURN_NONE;
}

/* ---- the type ---------------------------------------------------------- */

static PyObject *profile_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    ProfileObject *p = (ProfileObject *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    p->cat = PyUnicode_FromString("default");
    p->name = PyUnicode_FromString("default");
    if (!p->cat || !p->name) {
        Py_DECREF(p);
        return NULL;
    }
    p->enable = 1;
    p->t1 = dft_clock_us();
    return (PyObject *)p;
}

static int set_val(dft_val *slot, PyObject *v, const char *arg, int as_int)
{
    if (v == NULL || v == Py_None)
        return 0;
    dft_val nv = {0};
    if (!dft_val_from(v, as_int, &nv)) {
        PyErr_Format(PyExc_TypeError, "%s must be a number, not %.100s", arg,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    *slot = nv;
    return 0;
}

/* A pydftracer TagValue (its _value) or (tag_type, value) tuple -> the value.
 * Returns a new reference, or NULL with an exception set. */
static PyObject *unwrap_tag(PyObject *v)
{
    if (PyUnicode_Check(v) || PyLong_Check(v) || PyFloat_Check(v))
        return Py_NewRef(v);
    if (PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2 && PyLong_Check(PyTuple_GET_ITEM(v, 0)))
        return Py_NewRef(PyTuple_GET_ITEM(v, 1));
    PyObject *inner = PyObject_GetAttrString(v, "_value");
    if (inner)
        return inner;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return NULL;
    PyErr_Clear();
    return Py_NewRef(v);
}

/* update(epoch=None, step=None, image_idx=None, image_size=None, args=None) */
static int apply_update(ProfileObject *p, PyObject *const *v)
{
    for (int k = 0; k < DFT_SA_N; k++)
        if (set_val(&p->base.v[k], v[k], dft_sa_keys[k], k != DFT_SA_IMAGE_SIZE) < 0)
            return -1;
    PyObject *args = v[DFT_SA_N];
    if (!args || args == Py_None)
        return 0;
    if (!PyDict_Check(args)) {
        dft_pyargs_type_error("args", "a dict", args);
        return -1;
    }
    if (!p->args && !(p->args = PyDict_New()))
        return -1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(args, &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError, "args keys must be str, not %.100s",
                         Py_TYPE(key)->tp_name);
            return -1;
        }
        /* pydftracer TagValue objects and (tag_type, value) tuples */
        PyObject *tv = unwrap_tag(value);
        if (!tv)
            return -1;
        PyObject *norm;
        dft_val dv = {0};
        if (PyUnicode_Check(tv) || (PyLong_Check(tv) && !PyBool_Check(tv)) ||
            PyFloat_Check(tv))
            norm = Py_NewRef(tv);
        else if (!PyBool_Check(tv) && dft_val_from(tv, 0, &dv))
            norm = dv.type == 'i' ? PyLong_FromLongLong(dv.i) : PyFloat_FromDouble(dv.f);
        else
            norm = PyObject_Str(tv);
        Py_DECREF(tv);
        if (!norm || PyDict_SetItem(p->args, key, norm) < 0) {
            Py_XDECREF(norm);
            return -1;
        }
        Py_DECREF(norm);
    }
    return 0;
}

/* The caller's function name, pydftracer's default for name=None. */
static PyObject *caller_name(void)
{
    PyFrameObject *f = PyEval_GetFrame();
    if (!f)
        return PyUnicode_FromString("default");
    PyCodeObject *co = PyFrame_GetCode(f);
    PyObject *n = PyObject_GetAttrString((PyObject *)co, "co_name");
    Py_DECREF(co);
    return n;
}

static int profile_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cat", "name", "epoch", "step", "image_idx", "image_size",
                             "enable", NULL};
    ProfileObject *p = (ProfileObject *)self;
    PyObject *cat, *name = Py_None, *v[DFT_SA_N + 1] = {NULL, NULL, NULL, NULL, NULL};
    int enable = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOOOp:dft_fn", kwlist, &cat, &name, &v[0],
                                     &v[1], &v[2], &v[3], &enable))
        return -1;
    if (!PyUnicode_Check(cat)) {
        dft_pyargs_type_error("cat", "str", cat);
        return -1;
    }
    if (name != Py_None && !PyUnicode_Check(name)) {
        dft_pyargs_type_error("name", "a str or None", name);
        return -1;
    }
    /* None or "": the calling function's name, as in pydftracer. */
    PyObject *n = name == Py_None || PyUnicode_GET_LENGTH(name) == 0 ? caller_name()
                                                                    : Py_NewRef(name);
    if (!n)
        return -1;
    Py_SETREF(p->name, n);
    Py_SETREF(p->cat, Py_NewRef(cat));
    p->enable = enable;
    memset(&p->base, 0, sizeof p->base);
    Py_CLEAR(p->args);
    if (apply_update(p, v) < 0)
        return -1;
    p->t1 = dft_clock_us();
    p->flushed = 0;
    return 0;
}

static int profile_traverse(PyObject *self, visitproc visit, void *arg)
{
    ProfileObject *p = (ProfileObject *)self;
    /* Not Py_TYPE(self): the type is static, and subtype_traverse visits a
     * Python subclass itself. */
    Py_VISIT(p->args);
    Py_VISIT(p->parent);
    return 0;
}

static int profile_clear(PyObject *self)
{
    ProfileObject *p = (ProfileObject *)self;
    Py_CLEAR(p->args);
    Py_CLEAR(p->parent);
    return 0;
}

static void profile_dealloc(PyObject *self)
{
    ProfileObject *p = (ProfileObject *)self;
    PyObject_GC_UnTrack(self);
    profile_clear(self);
    Py_CLEAR(p->cat);
    Py_CLEAR(p->name);
    /* A Python subclass's subtype_dealloc releases its type, not this. */
    Py_TYPE(self)->tp_free(self);
}

static PyObject *profile_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"epoch", "step", "image_idx", "image_size", "args"};
    PyObject *v[5] = {NULL, NULL, NULL, NULL, NULL};
    if (dft_pyargs_parse("update", args, nargs, kwnames, names, 5, 0, v) < 0)
        return NULL;
    if (apply_update((ProfileObject *)self, v) < 0)
        return NULL;
    return Py_NewRef(self);
}

/* The name= keyword of log(func=None, *, name=None) and friends. */
static PyObject *decorate(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, const char *fname, int force_static)
{
    PyObject *func = nargs > 0 ? args[0] : NULL, *name = NULL;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 1 positional argument", fname);
        return NULL;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(kw, "name") == 0) {
            name = args[nargs + i];
        } else if (!func && PyUnicode_CompareWithASCIIString(kw, "func") == 0) {
            func = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         kw);
            return NULL;
        }
    }
    if (name == Py_None)
        name = NULL;
    if (name && !PyUnicode_Check(name))
        return dft_pyargs_type_error("name", "a str or None", name);
    if (func && func != Py_None)
        return dft_wrap_new((ProfileObject *)self, func, name, force_static);
    /* @p.log(name=...): a decorator waiting for the function. */
    PyObject *functools = PyImport_ImportModule("functools");
    if (!functools)
        return NULL;
    PyObject *partial = PyObject_GetAttrString(functools, "partial");
    Py_DECREF(functools);
    PyObject *method = partial ? PyObject_GetAttrString(self, fname) : NULL;
    PyObject *r = NULL;
    if (method) {
        PyObject *kw = name ? Py_BuildValue("{sO}", "name", name) : NULL;
        PyObject *a = PyTuple_Pack(1, method);
        if (a && (!name || kw))
            r = PyObject_Call(partial, a, kw);
        Py_XDECREF(a);
        Py_XDECREF(kw);
    }
    Py_XDECREF(method);
    Py_XDECREF(partial);
    return r;
}

static PyObject *profile_log(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return decorate(self, args, nargs, kwnames, "log", 0);
}

static PyObject *profile_log_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    return decorate(self, args, nargs, kwnames, "log_init", 0);
}

static PyObject *profile_log_static(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    return decorate(self, args, nargs, kwnames, "log_static", 1);
}

static PyObject *suffixed(PyObject *name, PyObject *suffix)
{
    return PyUnicode_Concat(name, suffix);
}

/* iter(iterable, name="loop", iter_name="step") */
static PyObject *profile_iter(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    static const char *const names[] = {"func", "name", "iter_name"};
    PyObject *v[3] = {NULL, NULL, NULL};
    if (dft_pyargs_parse("iter", args, nargs, kwnames, names, 3, 1, v) < 0)
        return NULL;
    PyObject *name = v[1] ? v[1] : str_loop, *key = v[2] ? v[2] : str_step;
    if (!PyUnicode_Check(name))
        return dft_pyargs_type_error("name", "str", name);
    if (!PyUnicode_Check(key))
        return dft_pyargs_type_error("iter_name", "str", key);
    PyObject *in = suffixed(name, str_dot_iter);
    PyObject *yn = in ? suffixed(name, str_dot_yield) : NULL;
    PyObject *r = yn ? dft_loop_new((ProfileObject *)self, v[0], in, yn, key) : NULL;
    Py_XDECREF(in);
    Py_XDECREF(yn);
    return r;
}

/* _loop(iterable, iter_event, block_event, counter_key): the general form
 * behind iter() here and in dftracer.python.ai (either event may be None). */
static PyObject *profile_loop(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_loop() takes 4 arguments");
        return NULL;
    }
    for (int i = 1; i < 4; i++)
        if (args[i] != Py_None && !PyUnicode_Check(args[i]))
            return dft_pyargs_type_error(i == 3 ? "counter_key" : "event name", "str", args[i]);
    if (args[3] == Py_None)
        return dft_pyargs_type_error("counter_key", "str", args[3]);
    return dft_loop_new((ProfileObject *)self, args[0], args[1] == Py_None ? NULL : args[1],
                        args[2] == Py_None ? NULL : args[2], args[3]);
}

static PyObject *profile_flush(PyObject *self, PyObject *unused)
{
    (void)unused;
    ProfileObject *p = (ProfileObject *)self;
    if (cm_depth > 0 && cm_stack[cm_depth - 1].p == p) {
        cm_frame *f = &cm_stack[cm_depth - 1];
        if (!f->done) {
            dft_profile_emit(p, &f->tok, p->name, f->t0, dft_clock_us() - f->t0, NULL, NULL, 0,
                             NULL);
            f->done = 1;
        }
        return Py_NewRef(self);
    }
    if (dft_profile_on(p)) {
        int64_t t = dft_clock_us();
        dft_profile_emit(p, NULL, p->name, p->t1, t - p->t1, NULL, NULL, 0, NULL);
    }
    p->flushed = 1;
    return Py_NewRef(self);
}

static PyObject *profile_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    ProfileObject *p = (ProfileObject *)self;
    p->t1 = dft_clock_us();
    p->flushed = 0;
    return Py_NewRef(self);
}

/* log_metadata(key, value): a CM metadata event; non-str values are str()-ed. */
static PyObject *profile_log_metadata(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    static const char *const names[] = {"key", "value"};
    PyObject *v[2] = {NULL, NULL};
    if (dft_pyargs_parse("log_metadata", args, nargs, kwnames, names, 2, 2, v) < 0)
        return NULL;
    if (!PyUnicode_Check(v[0]))
        return dft_pyargs_type_error("key", "str", v[0]);
    if (!dft_profile_on((ProfileObject *)self))
        Py_RETURN_NONE;
    PyObject *val = PyObject_Str(v[1]);
    if (!val)
        return NULL;
    Py_ssize_t kl, vl;
    PyObject *kh = NULL, *vh = NULL;
    const char *k = dft_pyargs_utf8(v[0], &kl, &kh);
    const char *s = k ? dft_pyargs_utf8(val, &vl, &vh) : NULL;
    if (s)
        dft_emit_metadata("CM", k, (size_t)kl, s, (size_t)vl);
    Py_XDECREF(kh);
    Py_XDECREF(vh);
    Py_DECREF(val);
    if (!s)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef profile_methods[] = {
    {"log", (PyCFunction)(void (*)(void))profile_log, METH_FASTCALL | METH_KEYWORDS,
     "log(func=None, *, name=None)\n\nDecorator: one event per call, named name or the "
     "function's __qualname__."},
    {"log_init", (PyCFunction)(void (*)(void))profile_log_init, METH_FASTCALL | METH_KEYWORDS,
     "log_init(init=None, *, name=None)\n\nDecorator for __init__."},
    {"log_static", (PyCFunction)(void (*)(void))profile_log_static,
     METH_FASTCALL | METH_KEYWORDS,
     "log_static(func=None, *, name=None)\n\nDecorator for static methods (never binds)."},
    {"iter", (PyCFunction)(void (*)(void))profile_iter, METH_FASTCALL | METH_KEYWORDS,
     "iter(iterable, name='loop', iter_name='step')\n\nYields the items, writing "
     "<name>.iter (waiting for an item) and <name>.yield (the loop body) events."},
    {"_loop", (PyCFunction)(void (*)(void))profile_loop, METH_FASTCALL,
     "_loop(iterable, iter_event, block_event, counter_key) -> iterator"},
    {"update", (PyCFunction)(void (*)(void))profile_update, METH_FASTCALL | METH_KEYWORDS,
     "update(epoch=None, step=None, image_idx=None, image_size=None, args=None)\n\n"
     "Sets values written with every later event; returns self."},
    {"flush", profile_flush, METH_NOARGS,
     "flush()\n\nWrites the event of the current with-block, or of the region since "
     "construction/reset(); returns self."},
    {"reset", profile_reset, METH_NOARGS, "reset()\n\nRestarts the flush() region."},
    {"log_metadata", (PyCFunction)(void (*)(void))profile_log_metadata,
     METH_FASTCALL | METH_KEYWORDS, "log_metadata(key, value)\n\nWrites a CM metadata event."},
    {"__enter__", profile_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))profile_exit, METH_FASTCALL, NULL},
    {"_stop", profile_stop_frame, METH_NOARGS,
     "Closes this object's innermost open with-block/start() on this thread."},
    {NULL, NULL, 0, NULL},
};

static PyObject *get_cat(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((ProfileObject *)self)->cat);
}

static PyObject *get_name(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((ProfileObject *)self)->name);
}

static int set_str(PyObject **slot, PyObject *v, const char *what)
{
    if (!v || !PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return -1;
    }
    Py_SETREF(*slot, Py_NewRef(v));
    return 0;
}

static int set_cat(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_str(&((ProfileObject *)self)->cat, v, "cat");
}

static int set_name(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_str(&((ProfileObject *)self)->name, v, "name");
}

static PyObject *get_enable(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((ProfileObject *)self)->enable);
}

static int set_enable(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    int b = v ? PyObject_IsTrue(v) : -1;
    if (b < 0) {
        if (!v)
            PyErr_SetString(PyExc_TypeError, "enabled cannot be deleted");
        return -1;
    }
    ((ProfileObject *)self)->enable = b;
    return 0;
}

static PyObject *get_parent(PyObject *self, void *c)
{
    (void)c;
    ProfileObject *p = ((ProfileObject *)self)->parent;
    return Py_NewRef(p ? (PyObject *)p : Py_None);
}

static int set_parent(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    ProfileObject *p = (ProfileObject *)self;
    if (v == NULL || v == Py_None) {
        Py_CLEAR(p->parent);
        return 0;
    }
    if (!PyObject_TypeCheck(v, &DftProfileType)) {
        dft_pyargs_type_error("_parent", "a dft_fn or None", v);
        return -1;
    }
    for (ProfileObject *q = (ProfileObject *)v; q; q = q->parent)
        if (q == p) {
            PyErr_SetString(PyExc_ValueError, "_parent would make a cycle");
            return -1;
        }
    Py_XSETREF(p->parent, (ProfileObject *)Py_NewRef(v));
    return 0;
}

static PyObject *val_obj(const dft_val *v)
{
    if (v->type == 'i')
        return PyLong_FromLongLong(v->i);
    if (v->type == 'f')
        return PyFloat_FromDouble(v->f);
    Py_RETURN_NONE;
}

/* A dict, not four attributes: ai nodes have children named step and epoch. */
static PyObject *get_values(PyObject *self, void *c)
{
    (void)c;
    ProfileObject *p = (ProfileObject *)self;
    PyObject *d = PyDict_New();
    for (int k = 0; d && k < DFT_SA_N; k++) {
        PyObject *v = val_obj(&p->base.v[k]);
        if (!v || PyDict_SetItem(d, dft_sa_names[k], v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *get_args(PyObject *self, void *c)
{
    (void)c;
    ProfileObject *p = (ProfileObject *)self;
    return p->args ? PyDict_Copy(p->args) : PyDict_New();
}

static PyGetSetDef profile_getset[] = {
    {"cat", get_cat, set_cat, "The category of this object's events.", NULL},
    {"name", get_name, set_name, "The name of with-block and flush() events.", NULL},
    {"_cat", get_cat, set_cat, "pydftracer spelling of cat.", NULL},
    {"_name", get_name, set_name, "pydftracer spelling of name.", NULL},
    {"enabled", get_enable, set_enable, "False: this object writes nothing.", NULL},
    {"_enable", get_enable, set_enable, "pydftracer spelling of enabled.", NULL},
    {"_parent", get_parent, set_parent,
     "A dft_fn whose values (and enabled flag) this one inherits.", NULL},
    {"_values", get_values, NULL,
     "epoch/step/image_idx/image_size as set by the constructor and update().", NULL},
    {"args", get_args, NULL, "A copy of the extra event args set by update(args=...).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *profile_repr(PyObject *self)
{
    ProfileObject *p = (ProfileObject *)self;
    return PyUnicode_FromFormat("<%s cat=%R name=%R%s>", Py_TYPE(self)->tp_name, p->cat, p->name,
                                p->enable ? "" : " disabled");
}

PyTypeObject DftProfileType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core.dft_fn",
    .tp_basicsize = sizeof(ProfileObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "dft_fn(cat, name=None, epoch=None, step=None, image_idx=None, image_size=None, "
              "enable=True)\n\nEvents of one category: decorators (log, log_init, log_static), "
              "loops (iter) and a context manager.",
    .tp_new = profile_new,
    .tp_init = profile_init,
    .tp_dealloc = profile_dealloc,
    .tp_traverse = profile_traverse,
    .tp_clear = profile_clear,
    .tp_methods = profile_methods,
    .tp_getset = profile_getset,
    .tp_repr = profile_repr,
};

int dft_profile_register(PyObject *m)
{
    if (dft_emit_ready() < 0)
        return -1;
    if (!str_loop) {
        str_loop = PyUnicode_InternFromString("loop");
        str_step = PyUnicode_InternFromString("step");
        str_dot_iter = PyUnicode_InternFromString(".iter");
        str_dot_yield = PyUnicode_InternFromString(".yield");
        if (!str_loop || !str_step || !str_dot_iter || !str_dot_yield)
            return -1;
    }
    if (PyType_Ready(&DftProfileType) < 0 || dft_wrap_ready() < 0 || dft_loop_ready() < 0)
        return -1;
    return PyModule_AddObjectRef(m, "dft_fn", (PyObject *)&DftProfileType);
}
