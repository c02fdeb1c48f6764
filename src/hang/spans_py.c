/* hang/spans_py.c: open spans for Python hooks (dftracer/_autotrace: the
 * collectives, iterations, forwards, optimizer steps, fetches), as
 * _core._span_open / _core._span_close (core/open_spans.c).  GIL held. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/core.h"
#include "hang/parts.h"

/* _span_open(name, cat, ts, group=None, seq=-1) -> token (int; 0: none).
 * GIL held. */
static PyObject *span_open(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n < 3 || n > 5) {
        PyErr_SetString(PyExc_TypeError, "_span_open(name, cat, ts, group=None, seq=-1)");
        return NULL;
    }
    if (!dft_trace_active())
        return PyLong_FromLong(0);
    dft_open_desc d = {.seq = -1};
    d.name = PyUnicode_AsUTF8AndSize(args[0], (Py_ssize_t *)&d.name_len);
    if (!d.name)
        return NULL;
    d.cat = PyUnicode_AsUTF8AndSize(args[1], (Py_ssize_t *)&d.cat_len);
    if (!d.cat)
        return NULL;
    d.ts = PyLong_AsLongLong(args[2]);
    if (d.ts == -1 && PyErr_Occurred())
        return NULL;
    if (n > 3 && args[3] != Py_None) {
        d.group = PyUnicode_AsUTF8AndSize(args[3], (Py_ssize_t *)&d.group_len);
        if (!d.group)
            return NULL;
    }
    if (n > 4) {
        d.seq = PyLong_AsLongLong(args[4]);
        if (d.seq == -1 && PyErr_Occurred())
            return NULL;
    }
    return PyLong_FromLongLong(dft_open_begin(&d));
}

/* GIL held. */
static PyObject *span_close(PyObject *m, PyObject *tok)
{
    (void)m;
    long long t = PyLong_AsLongLong(tok);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    dft_open_end(t);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_span_open", (PyCFunction)(void (*)(void))span_open, METH_FASTCALL,
     "_span_open(name, cat, ts, group=None, seq=-1) -> int\n\n"
     "Marks a span open on this thread (docs/trace-format.md, \"Open spans\")."},
    {"_span_close", span_close, METH_O, "_span_close(token)\n\nMarks it closed."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core). */
int dft_hang_spans_register(PyObject *module)
{
    return PyModule_AddFunctions(module, methods);
}
