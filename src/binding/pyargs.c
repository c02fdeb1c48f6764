/* binding/pyargs.c: Python call arguments -> dft_event.  Needs the GIL. */
#include "binding/pyargs.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(long) == 8, "dftracer needs an LP64 platform");

int dft_pyargs_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int nrequired,
                     PyObject **out)
{
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n,
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (!kwnames && nargs >= nrequired)
        return 0;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < n; i++) {
            if (PyUnicode_CompareWithASCIIString(kw, names[i]) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         kw);
            return -1;
        }
        if (out[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[found]);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < nrequired; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

PyObject *dft_pyargs_type_error(const char *arg, const char *expected, PyObject *got)
{
    PyErr_Format(PyExc_TypeError, "%s must be %s, not %.100s", arg, expected,
                 Py_TYPE(got)->tp_name);
    return NULL;
}

/* Reads small ints straight from their digits; NULL-safe fallback otherwise.
 * Timestamps in microseconds need two 30-bit digits. */
static inline int long_fast(PyObject *obj, int64_t *out)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)obj)) {
        *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)obj);
        return 1;
    }
#elif PY_VERSION_HEX >= 0x030900A0 && PYLONG_BITS_IN_DIGIT == 30
    Py_ssize_t size = Py_SIZE(obj);
    const digit *d = ((PyLongObject *)obj)->ob_digit;
    switch (size) {
    case 0: *out = 0; return 1;
    case 1: *out = (int64_t)d[0]; return 1;
    case -1: *out = -(int64_t)d[0]; return 1;
    case 2: *out = (int64_t)d[0] | ((int64_t)d[1] << 30); return 1;
    case -2: *out = -((int64_t)d[0] | ((int64_t)d[1] << 30)); return 1;
    default: break;
    }
#else
    (void)obj;
    (void)out;
#endif
    return 0;
}

int dft_pyargs_int64(PyObject *obj, const char *arg, int64_t *out)
{
    if (PyLong_CheckExact(obj) && long_fast(obj, out))
        return 0;
    if (PyLong_Check(obj)) {
        /* PyLong_AsLong walks the digits directly; AsLongLong goes through a
         * byte-array conversion (long is 64-bit on the LP64 targets we build for). */
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_OverflowError, "%s does not fit in a signed 64-bit integer",
                             arg);
            }
            return -1;
        }
        *out = v;
        return 0;
    }
    if (PyFloat_Check(obj)) {
        double d = PyFloat_AS_DOUBLE(obj);
        if (!(d > -9.2e18 && d < 9.2e18)) {
            PyErr_Format(PyExc_ValueError, "%s is out of range: %R", arg, obj);
            return -1;
        }
        *out = (int64_t)d;
        return 0;
    }
    dft_pyargs_type_error(arg, "an int", obj);
    return -1;
}

const char *dft_pyargs_utf8(PyObject *s, Py_ssize_t *len, PyObject **holder)
{
    *holder = NULL;
    if (PyUnicode_IS_COMPACT_ASCII(s)) { /* the common case: no conversion at all */
        *len = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    const char *p = PyUnicode_AsUTF8AndSize(s, len);
    if (p)
        return p;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return NULL;
    PyErr_Clear();
    PyObject *b = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (!b)
        return NULL;
    *holder = b;
    *len = PyBytes_GET_SIZE(b);
    return PyBytes_AS_STRING(b);
}

static const char *hold_utf8(dft_pyevent *pe, PyObject *s, size_t *len)
{
    Py_ssize_t n;
    PyObject *h;
    const char *p = dft_pyargs_utf8(s, &n, &h);
    if (!p)
        return NULL;
    if (h)
        pe->holders[pe->nholders++] = h;
    *len = (size_t)n;
    return p;
}

int dft_pyevent_init(dft_pyevent *pe, PyObject *name, PyObject *cat)
{
    pe->ev.ts = pe->ev.dur = 0;
    pe->ev.ph = DFT_PH_COMPLETE;
    pe->ev.flags = 0;
    pe->ev.tid = pe->ev.pid = 0;
    pe->ev.nargs = 0;
    pe->nholders = 0;
    pe->ev.args = pe->args;
    if (!PyUnicode_Check(name)) {
        dft_pyargs_type_error("name", "str", name);
        return -1;
    }
    if (!PyUnicode_Check(cat)) {
        dft_pyargs_type_error("cat", "str", cat);
        return -1;
    }
    pe->ev.name = hold_utf8(pe, name, &pe->ev.name_len);
    if (!pe->ev.name)
        return -1;
    pe->ev.cat = hold_utf8(pe, cat, &pe->ev.cat_len);
    if (!pe->ev.cat) {
        dft_pyevent_clear(pe);
        return -1;
    }
    return 0;
}

/* A dict key's repr for a message: str's own repr, so a str subclass whose
 * __repr__ raises (or lies) cannot replace the error being reported.  New
 * reference, or NULL with an exception set. */
static PyObject *key_repr(PyObject *key)
{
    return PyUnicode_Type.tp_repr(key);
}

/* Raises exc with "<arg>[<key repr>] <what>". */
static int key_error(PyObject *exc, const char *arg, PyObject *key, const char *what)
{
    PyObject *r = key_repr(key);
    if (!r)
        return -1;
    PyErr_Format(exc, "%s[%U] %s", arg, r, what);
    Py_DECREF(r);
    return -1;
}

static const char *type_word(dft_arg_type t)
{
    return t == DFT_ARG_INT ? "int" : t == DFT_ARG_FLOAT ? "float" : "str";
}

int dft_pyevent_add_dict(dft_pyevent *pe, PyObject *dict, const char *arg, dft_arg_type type)
{
    if (!dict || dict == Py_None)
        return 0;
    if (!PyDict_Check(dict)) {
        dft_pyargs_type_error(arg, "a dict", dict);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError, "%s keys must be str, not %.100s", arg,
                         Py_TYPE(key)->tp_name);
            return -1;
        }
        /* pydftracer passes (tag_type, value) tuples. */
        if (PyTuple_Check(value) && PyTuple_GET_SIZE(value) == 2 &&
            PyLong_Check(PyTuple_GET_ITEM(value, 0)))
            value = PyTuple_GET_ITEM(value, 1);
        if (pe->ev.nargs >= DFT_PYARGS_MAX) { /* keep what fits, count the rest */
            dft_note_args_dropped(1);
            continue;
        }
        dft_arg *a = &pe->args[pe->ev.nargs];
        size_t klen;
        a->key = hold_utf8(pe, key, &klen);
        if (!a->key)
            return -1;
        a->key_len = klen;
        a->type = type;
        if (type == DFT_ARG_INT && PyLong_Check(value)) {
            long v = PyLong_AsLong(value);
            if (v == -1 && PyErr_Occurred()) {
                if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                    PyErr_Clear();
                    key_error(PyExc_OverflowError, arg, key,
                              "does not fit in a signed 64-bit integer");
                }
                return -1;
            }
            a->v.i = v;
        } else if (type == DFT_ARG_FLOAT && (PyFloat_Check(value) || PyLong_Check(value))) {
            double d = PyFloat_AsDouble(value);
            if (d == -1.0 && PyErr_Occurred()) {
                if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                    PyErr_Clear();
                    key_error(PyExc_OverflowError, arg, key, "is too large for a float");
                }
                return -1;
            }
            a->v.f = d;
        } else if (type == DFT_ARG_STR && PyUnicode_Check(value)) {
            a->v.s.ptr = hold_utf8(pe, value, &a->v.s.len);
            if (!a->v.s.ptr)
                return -1;
        } else {
            char what[160];
            snprintf(what, sizeof what, "must be %s, not %.100s", type_word(type),
                     Py_TYPE(value)->tp_name);
            return key_error(PyExc_TypeError, arg, key, what);
        }
        pe->ev.nargs++;
    }
    return 0;
}

void dft_pyevent_clear(dft_pyevent *pe)
{
    for (int i = 0; i < pe->nholders; i++)
        Py_DECREF(pe->holders[i]);
    pe->nholders = 0;
}
