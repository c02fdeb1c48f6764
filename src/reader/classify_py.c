/* reader/classify_py.c: _core._classify(cat, name), the Python face of
 * reader/classify.c, with its names and flags (_CLASSES, _STEP_KINDS,
 * _CLS_*, _IO_*), so that the Python readers (dftracer/tools/) use the same
 * classes as the C passes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/classify.h"
#include "reader/reader.h"
#include "reader/tools.h"

static PyObject *classify(PyObject *module, PyObject *args)
{
    PyObject *cat_o, *name_o;
    Py_ssize_t cn, nn;
    (void)module;
    if (!PyArg_ParseTuple(args, "UU:_classify", &cat_o, &name_o))
        return NULL; /* TypeError: cat and name are str */
    const char *cat = PyUnicode_AsUTF8AndSize(cat_o, &cn);
    const char *name = cat ? PyUnicode_AsUTF8AndSize(name_o, &nn) : NULL;
    if (!name)
        return NULL;
    int flags;
    int cls = dft_cls_class(cat, (size_t)cn, name, (size_t)nn, &flags);
    return Py_BuildValue("(iiii)", cls, flags, dft_cls_step_kind(cat, (size_t)cn, name, (size_t)nn),
                         dft_cls_io(cat, (size_t)cn, name, (size_t)nn));
}

/* One of ret, size, count: an int, or None (not given). */
static int io_arg(PyObject *o, const char *what, unsigned bit, int64_t *out, unsigned *have)
{
    if (o == Py_None)
        return 0;
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %.100s", what,
                         Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    *out = (int64_t)v;
    *have |= bit;
    return 0;
}

/* _io_bytes(cat, name, ret, size, count): reader/iobytes.c's rule for
 * Python (dftracer top's live tail), so it is written once. */
static PyObject *io_bytes(PyObject *module, PyObject *args)
{
    PyObject *cat_o, *name_o, *ret_o, *size_o, *count_o;
    Py_ssize_t cn, nn;
    (void)module;
    if (!PyArg_ParseTuple(args, "UUOOO:_io_bytes", &cat_o, &name_o, &ret_o, &size_o, &count_o))
        return NULL;
    const char *cat = PyUnicode_AsUTF8AndSize(cat_o, &cn);
    const char *name = cat ? PyUnicode_AsUTF8AndSize(name_o, &nn) : NULL;
    if (!name)
        return NULL;
    dft_io_args a = {0};
    if (io_arg(ret_o, "ret", DFT_IO_RET, &a.ret, &a.have) < 0 ||
        io_arg(size_o, "size", DFT_IO_SIZE, &a.size, &a.have) < 0 ||
        io_arg(count_o, "count", DFT_IO_COUNT, &a.count, &a.have) < 0)
        return NULL;
    int64_t bytes = 0;
    dft_sv c = {cat, (size_t)cn}, n = {name, (size_t)nn};
    if (!dft_io_bytes(c, n, &a, &bytes) || bytes < 0)
        bytes = 0;
    return PyLong_FromLongLong((long long)bytes);
}

static PyMethodDef classify_methods[] = {
    {"_io_bytes", io_bytes, METH_VARARGS,
     "_io_bytes(cat, name, ret, size, count) -> int\n\nThe bytes an event moved (docs/cli.md, "
     "\"I/O bytes\"; None: the argument is not given); 0 when it moves none."},
    {"_classify", classify, METH_VARARGS,
     "_classify(cat, name) -> (class, flags, step kind, io)\n\nWhat an event is: its index "
     "in _CLASSES, _CLS_* flags, its index in _STEP_KINDS (0: not a step) and the _IO_* "
     "flags of a POSIX/STDIO call that moves data (docs/cli.md, \"Event classes\")."},
    {NULL, NULL, 0, NULL},
};

static PyObject *names_tuple(const char *const *names, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *s = names[i] ? PyUnicode_FromString(names[i]) : Py_NewRef(Py_None);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static int add_tuple(PyObject *module, const char *name, PyObject *t)
{
    if (!t)
        return -1;
    int rc = PyModule_AddObjectRef(module, name, t);
    Py_DECREF(t);
    return rc;
}

int dft_tools_register_classify(PyObject *module)
{
    static const char *const classes[] = DFT_CLS_NAMES;
    static const char *const kinds[] = DFT_STEP_NAMES;
    static const struct {
        const char *name;
        int value;
    } ints[] = {
        {"_CLS_CONTAINER", DFT_CLS_CONTAINER}, {"_CLS_TRACER", DFT_CLS_TRACER},
        {"_IO_READ", DFT_CLS_IO_READ},         {"_IO_WRITE", DFT_CLS_IO_WRITE},
        {"_IO_BYTES", DFT_CLS_IO_BYTES},       {"_IO_ITEMS", DFT_CLS_IO_ITEMS},
        {"_IO_CHAR", DFT_CLS_IO_CHAR},         {"_IO_STRING", DFT_CLS_IO_STRING},
    };
    if (add_tuple(module, "_CLASSES", names_tuple(classes, DFT_CLS_N)) < 0 ||
        add_tuple(module, "_STEP_KINDS", names_tuple(kinds, DFT_STEP_NKINDS)) < 0)
        return -1;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (PyModule_AddIntConstant(module, ints[i].name, ints[i].value) < 0)
            return -1;
    return PyModule_AddFunctions(module, classify_methods);
}
