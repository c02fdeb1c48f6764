/* reader/ranks_py.c: _core._rank_file(path, step=None, sync_only=False), the Python
 * face of reader/ranks.c (used by dftracer/tools/ranks.py and merge's clock
 * alignment), and _core._RANK_CLASSES.
 *
 * Arrays go back as bytes of native int64 (array('q') reads them):
 *   steps: per step number, ts, dur, the self time of each class, the top
 *          key of each class (-1: none) and its self time (_RANK_STEP_FIELDS);
 *   sync:  per sync point its key (a hash, as int64) and its end. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/ranks.h"
#include "reader/tools.h"

#include <errno.h>
#include <string.h>

#define STEP_FIELDS (3 + 3 * DFT_RK_CLASSES)


static PyObject *steps_bytes(const dft_rk_result *r)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(r->nsteps * STEP_FIELDS * 8));
    if (!b)
        return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    for (size_t i = 0; i < r->nsteps; i++) {
        const dft_rk_step *s = &r->steps[i];
        *o++ = s->number;
        *o++ = s->ts;
        *o++ = s->dur;
        for (int c = 0; c < DFT_RK_CLASSES; c++)
            *o++ = s->by_class[c];
        for (int c = 0; c < DFT_RK_CLASSES; c++)
            *o++ = s->top_key[c];
        for (int c = 0; c < DFT_RK_CLASSES; c++)
            *o++ = s->top_us[c];
    }
    return b;
}

static PyObject *sync_bytes(const dft_rk_result *r)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(r->nsync * 16));
    if (!b)
        return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    for (size_t i = 0; i < r->nsync; i++) {
        *o++ = (int64_t)r->sync[i].key;
        *o++ = r->sync[i].end;
    }
    return b;
}

static PyObject *keys_list(const dft_rk_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nkeys);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nkeys; i++) {
        const dft_rk_key *k = &r->keys[i];
        PyObject *t = Py_BuildValue("(NNiKLLLL)", dft_rd_text(k->cat, k->cat_len),
                                    dft_rd_text(k->name, k->name_len), k->cls,
                                    (unsigned long long)k->count, (long long)k->total,
                                    (long long)k->self_all, (long long)k->self_steps,
                                    (long long)k->io_bytes);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *rank_file(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *kwlist[] = {"path", "step", "sync_only", NULL};
    PyObject *path, *bytes;
    const char *step = NULL;
    int sync_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|zp:_rank_file", kwlist, &path, &step,
                                     &sync_only))
        return NULL;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    dft_rk_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_rk_read(PyBytes_AS_STRING(bytes), step, sync_only, &r);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc < 0)
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    if (r.status < 0) {
        dft_rk_free(&r);
        return PyErr_NoMemory();
    }
    PyObject *out = Py_BuildValue(
        "{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:O,s:O,s:L,s:L,s:z,s:N,s:i,s:N,s:N,"
        "s:(KLLL)}",
        "path", path, "status", dft_rd_status_name(r.status), "message", r.err, "members",
        (unsigned long long)r.members, "events", (unsigned long long)r.events, "long_lines",
        (unsigned long long)r.long_lines, "first_long_line",
        (unsigned long long)r.first_long_line, "finalized",
        r.finalized ? Py_True : Py_False, "has_ts", r.have_ts ? Py_True : Py_False, "ts_min",
        (long long)r.ts_min, "end_max", (long long)r.end_max, "step_kind", r.step_kind,
        "steps", steps_bytes(&r), "step_fields", STEP_FIELDS, "sync", sync_bytes(&r), "keys",
        keys_list(&r), "clock", (unsigned long long)r.clock_pairs, (long long)r.clock_first,
        (long long)r.clock_min, (long long)r.clock_max);
    if (out && (dft_rd_bad_add_to(out, &r.bad) < 0 || dft_ident_add_to(out, &r.who) < 0))
        Py_CLEAR(out);
    dft_rk_free(&r);
    return out;
}

static PyMethodDef ranks_methods[] = {
    {"_rank_file", (PyCFunction)(void (*)(void))rank_file, METH_VARARGS | METH_KEYWORDS,
     "_rank_file(path, step=None, sync_only=False) -> dict\n\nOne trace as one rank of a "
     "job: identity, steps split by class, sync points, clock pairs (dftracer.tools.ranks)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_ranks(PyObject *module)
{
    static const char *names[] = DFT_RK_CLASS_NAMES;
    PyObject *t = PyTuple_New(DFT_RK_CLASSES);
    if (!t)
        return -1;
    for (int i = 0; i < DFT_RK_CLASSES; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) {
            Py_DECREF(t);
            return -1;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    int rc = PyModule_AddObjectRef(module, "_RANK_CLASSES", t);
    Py_DECREF(t);
    if (rc < 0 ||
        PyModule_AddIntConstant(module, "_RANK_STEP_FIELDS", STEP_FIELDS) < 0 ||
        PyModule_AddIntConstant(module, "_RANK_SYNC_MAX", DFT_RK_SYNC_MAX) < 0)
        return -1;
    return PyModule_AddFunctions(module, ranks_methods);
}
