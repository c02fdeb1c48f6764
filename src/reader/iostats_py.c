/* reader/iostats_py.c: _core._io_file(path, epoch_from=None, bounds=None),
 * the Python face of reader/iostats.c (used by dftracer/tools/iostats.py),
 * and _core._IO_COUNTERS, the names of its counters in order (the folds of
 * those counters over a job: reader/iostats_fold.c).
 *
 * Arrays go back as bytes of native int64 (array('q') reads them): per file
 * its counters (_IO_COUNTERS), and per epoch the byte ranges read (start,
 * end pairs).  bounds: bytes of int64 (epoch, first ts) pairs sorted by ts. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/iostats.h"
#include "reader/tools.h"

#include <errno.h>
#include <string.h>


static PyObject *int64s(const int64_t *v, size_t n)
{
    return PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * sizeof *v));
}

static PyObject *files_list(const dft_io_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nfiles);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nfiles; i++) {
        const dft_io_file *f = &r->files[i];
        PyObject *slots = PyList_New((Py_ssize_t)f->nslots);
        if (!slots)
            goto fail;
        for (size_t j = 0; j < f->nslots; j++) {
            const dft_io_slot *s = &f->slots[j];
            PyObject *epoch = s->epoch == INT64_MIN ? Py_NewRef(Py_None)
                                                    : PyLong_FromLongLong(s->epoch);
            PyObject *t = epoch ? Py_BuildValue("(NLLNi)", epoch, (long long)s->bytes,
                                                (long long)s->unplaced, int64s(s->iv.v, 2 * s->iv.n),
                                                s->iv.approx)
                                : NULL;
            if (!t) {
                Py_DECREF(slots);
                goto fail;
            }
            PyList_SET_ITEM(slots, (Py_ssize_t)j, t);
        }
        PyObject *t = Py_BuildValue("(NNN)", dft_rd_text(f->path, f->path_len),
                                    int64s(f->c, IO_NCOUNTERS), slots);
        if (!t)
            goto fail;
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static PyObject *marks_list(const dft_io_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nmarks);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nmarks; i++) {
        PyObject *t = Py_BuildValue("(iLL)", r->marks[i].kind, (long long)r->marks[i].epoch,
                                    (long long)r->marks[i].ts);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *io_file(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *kwlist[] = {"path", "epoch_from", "bounds", NULL};
    PyObject *path, *bytes;
    const char *epoch_from = NULL;
    Py_buffer bounds = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|zz*:_io_file", kwlist, &path, &epoch_from,
                                     &bounds))
        return NULL;
    if (bounds.buf && bounds.len % 16) {
        PyBuffer_Release(&bounds);
        PyErr_SetString(PyExc_ValueError, "bounds: int64 (epoch, ts) pairs expected");
        return NULL;
    }
    if (!PyUnicode_FSConverter(path, &bytes)) {
        PyBuffer_Release(&bounds);
        return NULL;
    }
    dft_io_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_io_read(PyBytes_AS_STRING(bytes), epoch_from, bounds.buf,
                     bounds.buf ? (size_t)bounds.len / 16 : 0, &r);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    PyBuffer_Release(&bounds);
    if (rc < 0)
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    if (r.status < 0) {
        dft_io_free(&r);
        return PyErr_NoMemory();
    }
    PyObject *read_ts = r.read_ts_min <= r.read_ts_max
                            ? Py_BuildValue("(LL)", (long long)r.read_ts_min,
                                            (long long)r.read_ts_max)
                            : Py_NewRef(Py_None);
    PyObject *out = read_ts ? Py_BuildValue(
        "{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:N,s:N,s:N}",
        "path", path, "status", dft_rd_status_name(r.status), "message", r.err, "members",
        (unsigned long long)r.members, "events", (unsigned long long)r.events, "io_events",
        (unsigned long long)r.io_events, "long_lines", (unsigned long long)r.long_lines,
        "read_ts", read_ts, "files",
        files_list(&r), "marks", marks_list(&r)) : NULL;
    if (out && (dft_rd_bad_add_to(out, &r.bad) < 0 || dft_ident_add_to(out, &r.who) < 0))
        Py_CLEAR(out);
    dft_io_free(&r);
    return out;
}

static PyMethodDef io_methods[] = {
    {"_io_file", (PyCFunction)(void (*)(void))io_file, METH_VARARGS | METH_KEYWORDS,
     "_io_file(path, epoch_from=None, bounds=None) -> dict\n\nOne trace's I/O per file: "
     "Darshan's counters, bytes read per epoch and their ranges (dftracer.tools.iostats)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_io(PyObject *module)
{
    PyObject *t = PyTuple_New(IO_NCOUNTERS);
    if (!t)
        return -1;
    for (int i = 0; i < IO_NCOUNTERS; i++) {
        PyObject *s = PyUnicode_FromString(dft_io_counter_names[i]);
        if (!s) {
            Py_DECREF(t);
            return -1;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    int rc = PyModule_AddObjectRef(module, "_IO_COUNTERS", t);
    Py_DECREF(t);
    if (rc < 0)
        return -1;
    if (PyModule_AddFunctions(module, io_methods) < 0)
        return -1;
    return dft_tools_register_io_fold(module);
}
