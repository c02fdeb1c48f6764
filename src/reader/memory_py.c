/* reader/memory_py.c: _core._memory_file(path), the Python face of the
 * memory pass (reader/memory.c), for dftracer/tools/memory.py.  Samples go
 * back as bytes of native int64 triples (ts, rss_bytes, step; step -1 for
 * the flusher's), which array('q') reads.  GIL held on entry; the pass runs
 * without it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/memory.h"
#include "reader/tools.h"

static PyObject *samples_bytes(const dft_mp_result *r)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(r->nsamples * 3 * 8));
    if (!b)
        return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    for (size_t i = 0; i < r->nsamples; i++) {
        *o++ = r->samples[i].ts;
        *o++ = r->samples[i].rss;
        *o++ = r->samples[i].step;
    }
    return b;
}

static PyObject *spans_list(const dft_mp_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nspans);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nspans; i++) {
        const dft_mp_span *s = &r->spans[i];
        PyObject *t = Py_BuildValue("(NNKL)", dft_rd_text(s->cat, s->cat_len),
                                    dft_rd_text(s->name, s->name_len),
                                    (unsigned long long)s->count, (long long)s->total);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *memory_file(PyObject *module, PyObject *path)
{
    (void)module;
    PyObject *bytes;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    dft_mp_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_mp_read(PyBytes_AS_STRING(bytes), &r);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc < 0)
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    if (r.status < 0) {
        dft_mp_free(&r);
        return PyErr_NoMemory();
    }
    PyObject *out = Py_BuildValue(
        "{s:O,s:s,s:s,s:K,s:K,s:K,s:O,s:i,s:O,s:O,s:L,s:L,s:L,s:s,s:N,s:K,s:N}", "path", path,
        "status", dft_rd_status_name(r.status), "message", r.err, "members",
        (unsigned long long)r.members, "events", (unsigned long long)r.events, "long_lines",
        (unsigned long long)r.long_lines, "finalized", r.finalized ? Py_True : Py_False,
        "end_signal", r.end_signal, "sigterm", r.sigterm ? Py_True : Py_False, "has_ts", r.have_ts ? Py_True : Py_False,
        "ts_min", (long long)r.ts_min, "ts_max", (long long)r.ts_max, "limit_bytes",
        (long long)(r.have_limit ? r.limit : -1), "limit_source", r.limit_source, "samples",
        samples_bytes(&r), "samples_dropped", (unsigned long long)r.dropped, "spans",
        spans_list(&r));
    if (out && (dft_rd_bad_add_to(out, &r.bad) < 0 || dft_ident_add_to(out, &r.who) < 0))
        Py_CLEAR(out);
    dft_mp_free(&r);
    return out;
}

static PyMethodDef memory_methods[] = {
    {"_memory_file", memory_file, METH_O,
     "_memory_file(path) -> dict\n\nOne trace's memory samples, limit, end and top spans "
     "(dftracer.tools.memory)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_memory(PyObject *module) { return PyModule_AddFunctions(module, memory_methods); }
