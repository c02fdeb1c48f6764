/* reader/event_lines.c: _core._event_lines(path, names), the lines of a
 * trace whose event name is one of names, as written (bytes, escapes kept):
 * how a Python report that needs a few kinds of events whole (`summary
 * --windows`, dftracer/tools/windows.py) reads them without inflating the
 * trace itself (one reader per language, docs/architecture.md).  The file is
 * read without the GIL into a bounded buffer (EVL_BYTES of lines; what is
 * past it is left out and counted), then turned into bytes objects with it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/reader.h"
#include "reader/tools.h"

#define EVL_BYTES (64u << 20) /* lines kept, all together */
#define EVL_NAMES 16

typedef struct evl_list {
    char *text;       /* the kept lines back to back */
    size_t *end;      /* each line's end offset in text */
    size_t n, cap, len, tcap;
    uint64_t left_out;
} evl_list;

/* 0, or -1 out of memory.  No GIL. */
static int keep(evl_list *s, const char *text, size_t n)
{
    if (s->len + n > EVL_BYTES) {
        s->left_out++;
        return 0;
    }
    if (DFT_GROW(s->end, s->n, s->cap, 64) != 0)
        return -1;
    if (s->len + n > s->tcap) {
        size_t cap = s->tcap ? s->tcap : 65536;
        while (cap < s->len + n)
            cap *= 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return -1;
        s->text = t;
        s->tcap = cap;
    }
    memcpy(s->text + s->len, text, n);
    s->len += n;
    s->end[s->n++] = s->len;
    return 0;
}

/* Every line of path named one of names[0..nn).  0, or -1 with errno
 * (cannot open; ENOMEM).  No GIL. */
static int read_lines(const char *path, const dft_sv *names, size_t nn, evl_list *s)
{
    dft_rd rd;
    if (dft_rd_open_at(&rd, path, 0) < 0)
        return -1;
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_bad bad;
    memset(&bad, 0, sizeof bad);
    int rc = 0;
    while (rc == 0 && dft_rd_next_parsed(&rd, &text, &n, &l, &bad) == DFT_RD_OK)
        for (size_t i = 0; i < nn; i++)
            if (l.name.n == names[i].n && memcmp(l.name.p, names[i].p, names[i].n) == 0) {
                if (keep(s, text, n) < 0) {
                    rc = -1;
                    errno = ENOMEM;
                }
                break;
            }
    dft_rd_close(&rd);
    return rc;
}

static PyObject *event_lines(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *path, *seq, *bytes;
    if (!PyArg_ParseTuple(args, "OO:_event_lines", &path, &seq))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "_event_lines: names must be a sequence of str");
    if (!fast)
        return NULL;
    Py_ssize_t nn = PySequence_Fast_GET_SIZE(fast);
    if (nn > EVL_NAMES) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "_event_lines: at most %d names", EVL_NAMES);
    }
    dft_sv names[EVL_NAMES];
    for (Py_ssize_t i = 0; i < nn; i++) {
        Py_ssize_t len;
        const char *p = PyUnicode_Check(PySequence_Fast_GET_ITEM(fast, i))
                            ? PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(fast, i), &len)
                            : NULL;
        if (!p) {
            Py_DECREF(fast);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_event_lines: names must be str");
            return NULL;
        }
        names[i] = (dft_sv){p, (size_t)len};
    }
    if (!PyUnicode_FSConverter(path, &bytes)) {
        Py_DECREF(fast);
        return NULL;
    }
    evl_list s;
    memset(&s, 0, sizeof s);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_lines(PyBytes_AS_STRING(bytes), names, (size_t)nn, &s);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    Py_DECREF(fast); /* names point into its strings until here */
    PyObject *out = NULL;
    if (rc < 0) {
        if (errno == ENOMEM)
            PyErr_NoMemory();
        else
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    } else if ((out = PyList_New((Py_ssize_t)s.n)) != NULL) {
        size_t at = 0;
        for (size_t i = 0; out && i < s.n; i++) {
            PyObject *b = PyBytes_FromStringAndSize(s.text + at, (Py_ssize_t)(s.end[i] - at));
            if (!b)
                Py_CLEAR(out);
            else
                PyList_SET_ITEM(out, (Py_ssize_t)i, b);
            at = s.end[i];
        }
    }
    free(s.text);
    free(s.end);
    return out;
}

static PyMethodDef event_lines_methods[] = {
    {"_event_lines", event_lines, METH_VARARGS,
     "_event_lines(path, names) -> list[bytes]\n\nThe lines of a trace whose event name is one "
     "of names (at most 16), as written (dftracer.tools.windows)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_event_lines(PyObject *module)
{
    return PyModule_AddFunctions(module, event_lines_methods);
}
