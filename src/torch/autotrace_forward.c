/* torch/autotrace_forward.c: the C forward of a top-level module
 * (dftracer/_autotrace/modules.py sets it).
 *
 *   _AtForward(module): set as the module's `forward` attribute, in its
 *     __dict__, so that torch's hook-free call path (Module._call_impl with
 *     no hooks) calls it: the `forward` event costs one C call, where module
 *     hooks send every call through torch's Python hook path.  Each call
 *     looks the class's forward up (a class whose forward is replaced later,
 *     or a module whose __class__ changes, is followed) and calls it with
 *     the module and the arguments untouched, and returns its result.
 *
 * It holds the module weakly: a module must not keep itself alive through
 * its own __dict__ (`del model` frees its parameters at once, as without
 * dftracer).  What programs read of a forward (__wrapped__, __func__,
 * __self__, __name__, __doc__, inspect.signature) reads through to the
 * bound method it stands for.  A module the program puts forward hooks on
 * later is handed back to modules.py (_at_forward_rehook), which times it by
 * hooks around the program's.  Everything needs the GIL. */
#include "torch/autotrace_steps.h"
#include "torch/autotrace_hooks.h"
#include "torch/parts.h"

#include <string.h>

static PyObject *forward_name; /* "forward" */
static PyObject *pre_hooks_name, *hooks_name; /* "_forward_pre_hooks", "_forward_hooks" */
/* modules.py's _rehook(module): a module the program hooked after we set
 * its forward is moved to hooks of ours around its own */
static PyObject *rehook;

/* Whether the module's attribute name is a non-empty dict (torch's hook
 * OrderedDicts).  GIL held. */
static int nonempty_dict(PyObject *module, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(module, name);
    if (!d) {
        PyErr_Clear();
        return 0;
    }
    int r = PyDict_Check(d) && PyDict_GET_SIZE(d) > 0;
    Py_DECREF(d);
    return r;
}

/* The program put forward hooks on the module after its forward became
 * ours: torch runs them outside this call, so from the next call on the
 * module is timed by hooks of ours around them (this call stays as it is).
 * Two attribute reads a top-level forward.  GIL held. */
static void hooked_since(PyObject *module)
{
    if (!rehook || !(nonempty_dict(module, pre_hooks_name) || nonempty_dict(module, hooks_name)))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *fn = Py_NewRef(rehook); /* the call may set another */
    PyObject *r = PyObject_CallOneArg(fn, module);
    Py_DECREF(fn);
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *module_ref; /* a weak reference to the module */
} ForwardWrapper;

/* The module (a new reference), or NULL with ReferenceError. */
static PyObject *module_of(ForwardWrapper *w)
{
    PyObject *module = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(w->module_ref, &module) < 0)
        return NULL;
#else
    module = PyWeakref_GetObject(w->module_ref);
    if (!module)
        return NULL;
    module = module == Py_None ? NULL : Py_NewRef(module);
#endif
    if (!module)
        PyErr_SetString(PyExc_ReferenceError,
                        "dftracer: the module of this forward no longer exists");
    return module;
}

/* type(module).forward bound to module: a new reference, or NULL. */
static PyObject *bound_forward(PyObject *module)
{
    PyObject *f = PyObject_GetAttr((PyObject *)Py_TYPE(module), forward_name);
    if (!f)
        return NULL;
    descrgetfunc get = Py_TYPE(f)->tp_descr_get;
    if (!get)
        return f;
    PyObject *bound = get(f, module, (PyObject *)Py_TYPE(module));
    Py_DECREF(f);
    return bound;
}

/* The class's forward called as module.forward(*args, **kwargs) would call
 * it: a function gets the module prepended, anything else is bound first. */
static PyObject *call_forward(PyObject *module, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames)
{
    PyObject *f = PyObject_GetAttr((PyObject *)Py_TYPE(module), forward_name);
    if (!f)
        return NULL;
    PyObject *r;
    if (!PyFunction_Check(f)) {
        Py_DECREF(f);
        PyObject *bound = bound_forward(module);
        r = bound ? PyObject_Vectorcall(bound, args, nargsf, kwnames) : NULL;
        Py_XDECREF(bound);
        return r;
    }
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    Py_ssize_t total = n + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (nargsf & PY_VECTORCALL_ARGUMENTS_OFFSET) { /* the caller lent args[-1] */
        PyObject **lent = (PyObject **)args - 1;
        PyObject *saved = lent[0];
        lent[0] = module;
        r = PyObject_Vectorcall(f, lent, (size_t)(n + 1), kwnames);
        lent[0] = saved;
    } else {
        PyObject *small[9];
        PyObject **a = total < 9 ? small : PyMem_Malloc((size_t)(total + 1) * sizeof *a);
        if (!a) {
            Py_DECREF(f);
            return PyErr_NoMemory();
        }
        a[0] = module;
        if (total)
            memcpy(a + 1, args, (size_t)total * sizeof *a);
        r = PyObject_Vectorcall(f, a, (size_t)(n + 1), kwnames);
        if (a != small)
            PyMem_Free(a);
    }
    Py_DECREF(f);
    return r;
}

static PyObject *forward_wrapper_vc(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    PyObject *module = module_of((ForwardWrapper *)self);
    if (!module)
        return NULL;
    if (!dft_at_on[DFT_AT_MODULES]) {
        PyObject *r = call_forward(module, args, nargsf, kwnames);
        Py_DECREF(module);
        return r;
    }
    hooked_since(module);
    dft_at_forward_pre(module);
    PyObject *out = call_forward(module, args, nargsf, kwnames);
    if (out) {
        dft_at_forward_post(module, out);
    } else { /* the program's exception, kept across our bookkeeping */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        dft_at_forward_post(module, Py_None);
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    Py_DECREF(module);
    return out;
}

static PyObject *forward_wrapper_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    PyObject *module;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "_AtForward takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "_AtForward", 1, 1, &module))
        return NULL;
    PyObject *ref = PyWeakref_NewRef(module, NULL); /* TypeError: not weakly referable */
    if (!ref)
        return NULL;
    ForwardWrapper *w = (ForwardWrapper *)tp->tp_alloc(tp, 0);
    if (!w) {
        Py_DECREF(ref);
        return NULL;
    }
    w->vectorcall = forward_wrapper_vc;
    w->module_ref = ref;
    return (PyObject *)w;
}

static int forward_wrapper_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((ForwardWrapper *)self)->module_ref);
    return 0;
}

static int forward_wrapper_clear(PyObject *self)
{
    Py_CLEAR(((ForwardWrapper *)self)->module_ref);
    return 0;
}

static void forward_wrapper_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    forward_wrapper_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* The bound method this forward stands for: a new reference, or NULL. */
static PyObject *stands_for(PyObject *self)
{
    PyObject *module = module_of((ForwardWrapper *)self);
    if (!module)
        return NULL;
    PyObject *bound = bound_forward(module);
    Py_DECREF(module);
    return bound;
}

/* Our own attributes first, then those of the bound method. */
static PyObject *forward_wrapper_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    PyObject *bound = stands_for(self);
    if (!bound)
        return NULL;
    r = PyObject_GetAttr(bound, name);
    Py_DECREF(bound);
    return r;
}

static PyObject *forward_wrapper_wrapped(PyObject *self, void *unused)
{
    (void)unused;
    return stands_for(self);
}

static PyObject *forward_wrapper_doc(PyObject *self, void *unused)
{
    (void)unused;
    PyObject *bound = stands_for(self);
    if (!bound)
        return NULL;
    PyObject *doc = PyObject_GetAttrString(bound, "__doc__");
    Py_DECREF(bound);
    return doc;
}

static PyObject *forward_wrapper_repr(PyObject *self)
{
    PyObject *bound = stands_for(self);
    if (!bound) {
        PyErr_Clear();
        return PyUnicode_FromString("<dftracer forward timing of a module that no longer exists>");
    }
    PyObject *r = PyUnicode_FromFormat("<dftracer forward timing of %R>", bound);
    Py_DECREF(bound);
    return r;
}

static PyGetSetDef forward_wrapper_getset[] = {
    {"__wrapped__", forward_wrapper_wrapped, NULL, "the forward it stands for", NULL},
    {"__doc__", forward_wrapper_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ForwardWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._AtForward",
    .tp_basicsize = sizeof(ForwardWrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_vectorcall_offset = offsetof(ForwardWrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = forward_wrapper_new,
    .tp_traverse = forward_wrapper_traverse,
    .tp_clear = forward_wrapper_clear,
    .tp_dealloc = forward_wrapper_dealloc,
    .tp_getattro = forward_wrapper_getattro,
    .tp_repr = forward_wrapper_repr,
    .tp_getset = forward_wrapper_getset,
};

static PyObject *py_forward_rehook(PyObject *m, PyObject *arg)
{
    (void)m;
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_at_forward_rehook(fn): fn must be callable or None");
        return NULL;
    }
    Py_XSETREF(rehook, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyMethodDef forward_methods[] = {
    {"_at_forward_rehook", py_forward_rehook, METH_O,
     "_at_forward_rehook(fn)\n\nfn(module) when a module whose forward is an _AtForward has "
     "forward hooks of the program's."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core, through torch/module.c). */
int dft_at_forward_register(PyObject *module)
{
    if (PyType_Ready(&ForwardWrapperType) < 0)
        return -1;
    if (!forward_name && !(forward_name = PyUnicode_InternFromString("forward")))
        return -1;
    if (!pre_hooks_name && !(pre_hooks_name = PyUnicode_InternFromString("_forward_pre_hooks")))
        return -1;
    if (!hooks_name && !(hooks_name = PyUnicode_InternFromString("_forward_hooks")))
        return -1;
    if (PyModule_AddFunctions(module, forward_methods) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "_AtForward", (PyObject *)&ForwardWrapperType);
}
