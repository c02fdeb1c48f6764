/* binding/pyargs.h: converting Python call arguments into dft_event fields.
 * Shared by the logger and the decorators; all functions need the GIL. */
#ifndef DFT_PYARGS_H
#define DFT_PYARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dftracer.h"

#define DFT_PYARGS_MAX 64

/* An event being built from Python objects; keeps the objects whose UTF-8
 * buffers it points into alive until dft_pyevent_clear(). */
typedef struct dft_pyevent {
    dft_event ev;
    dft_arg args[DFT_PYARGS_MAX];
    PyObject *holders[2 * DFT_PYARGS_MAX + 2];
    int nholders;
} dft_pyevent;

/* Parses fastcall arguments into out[0..n) by position or keyword; the first
 * nrequired are required.  Returns 0, or -1 with TypeError set. */
int dft_pyargs_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int nrequired,
                     PyObject **out);

/* Raises TypeError "<arg> must be <expected>, not <type>"; returns NULL. */
PyObject *dft_pyargs_type_error(const char *arg, const char *expected, PyObject *got);

/* An int (or float, truncated) as int64; -1 with TypeError otherwise. */
int dft_pyargs_int64(PyObject *obj, const char *arg, int64_t *out);

/* UTF-8 of a str; lone surrogates are passed through (and replaced when
 * written).  *holder receives a new reference to keep, or NULL. */
const char *dft_pyargs_utf8(PyObject *s, Py_ssize_t *len, PyObject **holder);

/* Sets name and cat (both must be str). */
int dft_pyevent_init(dft_pyevent *pe, PyObject *name, PyObject *cat);

/* Adds the items of a dict (or nothing for None/NULL); values may be plain or
 * pydftracer (tag_type, value) tuples.  type is DFT_ARG_INT/FLOAT/STR. */
int dft_pyevent_add_dict(dft_pyevent *pe, PyObject *dict, const char *arg, dft_arg_type type);

void dft_pyevent_clear(dft_pyevent *pe);

#endif
