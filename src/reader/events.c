/* reader/events.c: _core._EventReader(path), the complete events of a trace
 * file as compact tuples, and _core._sort_spans, for `dftracer report`
 * (dftracer/tools/analysis.py).
 *
 * Each iteration returns a list of up to 4096 tuples
 *     (cat, name, pid, tid, ts, dur, io_bytes)
 * for the complete ("ph":"X") events that have ts and dur, leaving out the
 * tracer's own `dftracer` category, in file order.  io_bytes is the event's
 * I/O volume as `dftracer summary` counts it (reader/parse.c), or -1.  Lines
 * that do not parse are skipped (summary counts them).  Afterwards .status
 * ("ok", "truncated", "corrupt", "error") and .message tell how the file
 * ended.  cat and name are interned per reader: repeated names cost one
 * string object. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/reader.h"
#include "reader/tools.h"

#include <string.h>

#define EVENT_BATCH 4096
#define EVENT_READ_CHUNK 256 /* lines parsed per GIL release */

typedef struct {
    PyObject_HEAD
    dft_rd rd;
    int open;
    int status;     /* -1 while reading, else the dft_rd_status that ended it */
    PyObject *strs; /* dict: bytes -> str, the interned cat and name strings */
} EventReaderObject;

typedef struct {
    dft_sv cat, name;
    int64_t pid, tid, ts, dur, io;
    char *buf; /* copies of cat and name (the reader's line buffer moves) */
} pending_event;

static PyObject *eventreader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *path;
    static char *kwlist[] = {"path", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:_EventReader", kwlist, &path))
        return NULL;
    EventReaderObject *self = (EventReaderObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->status = -1;
    self->strs = PyDict_New();
    if (!self->strs || dft_rd_open_path(&self->rd, path) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->open = 1;
    return (PyObject *)self;
}

static void eventreader_dealloc(EventReaderObject *self)
{
    if (self->open)
        dft_rd_close(&self->rd);
    Py_XDECREF(self->strs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The interned str for a raw cat/name (invalid UTF-8 from the older tools
 * decodes with replacement).  Returns a new reference, or NULL. */
static PyObject *intern_sv(EventReaderObject *self, const char *p, size_t n)
{
    PyObject *key = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
    if (!key)
        return NULL;
    PyObject *s = PyDict_GetItemWithError(self->strs, key);
    if (s) {
        Py_DECREF(key);
        Py_INCREF(s);
        return s;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    s = PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "replace");
    if (!s || PyDict_SetItem(self->strs, key, s) < 0) {
        Py_XDECREF(s);
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    return s;
}

/* Reads lines until up to `max` events are in ev (each with its own copy of
 * cat and name) or the file ends.  Runs without the GIL.  Returns the number
 * of events, or -1 when out of memory. */
static int read_events(EventReaderObject *self, pending_event *ev, int max)
{
    int k = 0;
    const char *text;
    size_t n;
    dft_line l;
    while (k < max) {
        const char *why;
        dft_rd_status st = dft_rd_next_event(&self->rd, &text, &n, &l, &why);
        if (st != DFT_RD_OK) {
            self->status = (int)st;
            break;
        }
        if (why)
            continue;
        if (l.ph != 'X' || (l.have & (DFT_HAVE_TS | DFT_HAVE_DUR)) != (DFT_HAVE_TS | DFT_HAVE_DUR))
            continue;
        if (l.cat.n == 8 && memcmp(l.cat.p, "dftracer", 8) == 0)
            continue;
        char *buf = malloc(l.cat.n + l.name.n + 1);
        if (!buf) {
            while (k > 0)
                free(ev[--k].buf);
            return -1;
        }
        if (l.cat.n)
            memcpy(buf, l.cat.p, l.cat.n);
        if (l.name.n)
            memcpy(buf + l.cat.n, l.name.p, l.name.n);
        pending_event *e = &ev[k++];
        e->buf = buf;
        e->cat.p = buf;
        e->cat.n = l.cat.n;
        e->name.p = buf + l.cat.n;
        e->name.n = l.name.n;
        e->pid = (l.have & DFT_HAVE_PID) ? l.pid : 0;
        e->tid = (l.have & DFT_HAVE_TID) ? l.tid : 0;
        e->ts = l.ts;
        e->dur = l.dur;
        e->io = (l.have & DFT_HAVE_IO) ? l.io_bytes : -1;
    }
    return k;
}

static PyObject *eventreader_next(EventReaderObject *self)
{
    if (self->status >= 0)
        return NULL;
    PyObject *batch = PyList_New(0);
    if (!batch)
        return NULL;
    pending_event ev[EVENT_READ_CHUNK];
    while (self->status < 0 && PyList_GET_SIZE(batch) < EVENT_BATCH) {
        int k;
        Py_BEGIN_ALLOW_THREADS
        k = read_events(self, ev, EVENT_READ_CHUNK);
        Py_END_ALLOW_THREADS
        if (k < 0) {
            Py_DECREF(batch);
            return PyErr_NoMemory();
        }
        int failed = 0;
        for (int i = 0; i < k; i++) {
            if (!failed) {
                PyObject *cat = intern_sv(self, ev[i].cat.p, ev[i].cat.n);
                PyObject *name = cat ? intern_sv(self, ev[i].name.p, ev[i].name.n) : NULL;
                PyObject *t = NULL;
                if (cat && name)
                    t = Py_BuildValue("(OOLLLLL)", cat, name, (long long)ev[i].pid,
                                      (long long)ev[i].tid, (long long)ev[i].ts,
                                      (long long)ev[i].dur, (long long)ev[i].io);
                Py_XDECREF(cat);
                Py_XDECREF(name);
                if (!t || PyList_Append(batch, t) < 0)
                    failed = 1;
                Py_XDECREF(t);
            }
            free(ev[i].buf);
        }
        if (failed) {
            Py_DECREF(batch);
            return NULL;
        }
    }
    if (PyList_GET_SIZE(batch) == 0) {
        Py_DECREF(batch);
        return NULL;
    }
    return batch;
}

static PyObject *eventreader_status(EventReaderObject *self, void *unused)
{
    (void)unused;
    return dft_rd_status_str(self->status);
}

static PyObject *eventreader_message(EventReaderObject *self, void *unused)
{
    (void)unused;
    return dft_rd_message_str(&self->rd);
}

static PyGetSetDef eventreader_getset[] = {
    {"status", (getter)eventreader_status, NULL, "How the file ended.", NULL},
    {"message", (getter)eventreader_message, NULL, "Why it ended early, or ''.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EventReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._EventReader",
    .tp_basicsize = sizeof(EventReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "_EventReader(path): batches of (cat, name, pid, tid, ts, dur, io_bytes) "
              "tuples, the complete events of a trace file.",
    .tp_new = eventreader_new,
    .tp_dealloc = (destructor)eventreader_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)eventreader_next,
    .tp_getset = eventreader_getset,
};

/* ---- _sort_spans(ts, dur, order) ------------------------------------------
 * Fills order (a writable buffer of int64) with the indices 0..n-1 of the
 * spans (ts[i], dur[i]) sorted by start, longest first among equal starts:
 * the order in which an enclosing span comes before the spans inside it.
 * report.py's nesting sweep uses it instead of sorting in Python, so that
 * its memory stays near 8 bytes an event. */

typedef struct {
    int64_t ts, dur, idx;
} span_key;

static int span_cmp(const void *a, const void *b)
{
    const span_key *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur)
        return x->dur > y->dur ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static int int64_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS |
                                          (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Format(PyExc_TypeError, "_sort_spans: %s must be a%s buffer of int64 "
                     "(array('q'))", what, writable ? " writable" : "");
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (view->itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "_sort_spans: %s must hold int64 items (array('q'))",
                     what);
        return -1;
    }
    return 0;
}

static PyObject *dft_sort_spans(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ts_obj, *dur_obj, *order_obj;
    if (!PyArg_ParseTuple(args, "OOO:_sort_spans", &ts_obj, &dur_obj, &order_obj))
        return NULL;
    Py_buffer ts, dur, order;
    if (int64_buffer(ts_obj, &ts, 0, "ts") < 0)
        return NULL;
    if (int64_buffer(dur_obj, &dur, 0, "dur") < 0) {
        PyBuffer_Release(&ts);
        return NULL;
    }
    if (int64_buffer(order_obj, &order, 1, "order") < 0) {
        PyBuffer_Release(&ts);
        PyBuffer_Release(&dur);
        return NULL;
    }
    PyObject *result = NULL;
    span_key *keys = NULL;
    Py_ssize_t n = ts.len / 8;
    if (dur.len / 8 != n || order.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "_sort_spans: ts, dur and order differ in length");
        goto done;
    }
    keys = n ? malloc((size_t)n * sizeof *keys) : NULL;
    if (n && !keys) {
        PyErr_NoMemory();
        goto done;
    }
    /* runs without the GIL: plain memory only */
    Py_BEGIN_ALLOW_THREADS
    const int64_t *t = ts.buf, *d = dur.buf;
    int64_t *o = order.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        keys[i].ts = t[i];
        keys[i].dur = d[i];
        keys[i].idx = (int64_t)i;
    }
    if (n > 1)
        qsort(keys, (size_t)n, sizeof *keys, span_cmp);
    for (Py_ssize_t i = 0; i < n; i++)
        o[i] = keys[i].idx;
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(keys);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&order);
    return result;
}

static PyMethodDef events_methods[] = {
    {"_sort_spans", dft_sort_spans, METH_VARARGS,
     "_sort_spans(ts, dur, order) -> None\n\nFills order with the span indices sorted by "
     "start, longest first (see dftracer.tools.analysis)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_events(PyObject *module)
{
    if (PyType_Ready(&EventReaderType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "_EventReader", (PyObject *)&EventReaderType) < 0)
        return -1;
    return PyModule_AddFunctions(module, events_methods);
}
