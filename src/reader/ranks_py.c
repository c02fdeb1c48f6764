/* reader/ranks_py.c: _core._rank_file(path, step=None, sync_only=False), the Python
 * face of reader/ranks.c (used by dftracer/tools/ranks.py and merge's clock
 * alignment, tools/clock_align.py), and _core._RANK_CLASSES.
 *
 * What Python reads by name is a struct sequence (as CPython's _lsprof hands
 * its entries), never a position to compute:
 *   steps: _core.RankSteps, the file's steps as columns, each bytes of native
 *          int64 (memoryview(...).cast("q") reads them): number, ts, dur,
 *          cpu_us and wait_us (the step thread's CPU time and run-queue
 *          wait, -1: unknown), and by_class, top_key, top_us (a tuple of one
 *          column per class: the self time of each class, its top key, -1:
 *          none, and that key's self time).  Columns keep a step at 21 int64
 *          whatever the classes, as the flat rows did;
 *   keys:  [_core.RankKey(cat, name, cls, count, total, self_all,
 *          self_steps, io_bytes)];
 *   sync:  per sync point its key (a hash, as int64) and its end (bytes).
 * "last_sync" is [(group, seq, end)]: each group's newest sync point (the
 * group as written, escapes kept).
 * "hang" is reader/ranks_hang.h's state (hang_dict below). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/ranks.h"
#include "reader/tools.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define STEP_FIELDS (5 + 3 * DFT_RK_CLASSES)

/* The struct sequence types, made once at module set-up (one interpreter). */
static PyTypeObject *steps_type, *key_type;

static PyStructSequence_Field steps_fields[] = {
    {"number", "the step numbers (bytes of int64)"},
    {"ts", "each step's start, us"},
    {"dur", "each step's duration, us"},
    {"cpu_us", "the step thread's CPU time in the step, -1: unknown"},
    {"wait_us", "the step thread's run-queue wait in the step, -1: unknown"},
    {"by_class", "per class (_RANK_CLASSES), the self time of its events in each step"},
    {"top_key", "per class, the index into keys of its top event in each step, -1: none"},
    {"top_us", "per class, that event's self time in each step"},
    {NULL, NULL},
};
static PyStructSequence_Desc steps_desc = {
    "dftracer._core.RankSteps", "A trace's steps as named int64 columns (reader/ranks_py.c).",
    steps_fields, 8};

static PyStructSequence_Field key_fields[] = {
    {"cat", "the category, as written"},
    {"name", "the name, as written"},
    {"cls", "its class, an index into _RANK_CLASSES"},
    {"count", "its events"},
    {"total", "their total time, us"},
    {"self_all", "their self time, us"},
    {"self_steps", "their self time inside steps, us"},
    {"io_bytes", "the bytes its I/O calls moved"},
    {NULL, NULL},
};
static PyStructSequence_Desc key_desc = {
    "dftracer._core.RankKey", "One (cat, name) of a trace, summed (reader/ranks_py.c).",
    key_fields, 8};

enum { COL_NUMBER, COL_TS, COL_DUR, COL_CPU, COL_WAIT };

/* One int64 column of the steps: one field's value in each step. */
static PyObject *step_column(const dft_rk_result *r, int which)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(r->nsteps * 8));
    if (!b)
        return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    for (size_t i = 0; i < r->nsteps; i++) {
        const dft_rk_step *s = &r->steps[i];
        o[i] = which == COL_NUMBER ? s->number : which == COL_TS ? s->ts
             : which == COL_DUR ? s->dur : which == COL_CPU ? s->cpu_us : s->wait_us;
    }
    return b;
}

enum { COL_BY_CLASS, COL_TOP_KEY, COL_TOP_US };

/* Per class, one column of the steps: its self time, top key or top key's
 * self time in each step. */
static PyObject *class_columns(const dft_rk_result *r, int which)
{
    PyObject *t = PyTuple_New(DFT_RK_CLASSES);
    if (!t)
        return NULL;
    for (int c = 0; c < DFT_RK_CLASSES; c++) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(r->nsteps * 8));
        if (!b) {
            Py_DECREF(t);
            return NULL;
        }
        int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
        for (size_t i = 0; i < r->nsteps; i++) {
            const dft_rk_step *s = &r->steps[i];
            o[i] = which == COL_BY_CLASS ? s->by_class[c]
                 : which == COL_TOP_KEY ? (int64_t)s->top_key[c] : s->top_us[c];
        }
        PyTuple_SET_ITEM(t, c, b);
    }
    return t;
}

static PyObject *steps_seq(const dft_rk_result *r)
{
    PyObject *cols[8] = {step_column(r, COL_NUMBER), step_column(r, COL_TS),
                         step_column(r, COL_DUR), step_column(r, COL_CPU),
                         step_column(r, COL_WAIT), class_columns(r, COL_BY_CLASS),
                         class_columns(r, COL_TOP_KEY), class_columns(r, COL_TOP_US)};
    PyObject *s = PyStructSequence_New(steps_type);
    int ok = s != NULL;
    for (int i = 0; i < 8; i++)
        ok = ok && cols[i] != NULL;
    if (!ok) {
        for (int i = 0; i < 8; i++)
            Py_XDECREF(cols[i]);
        Py_XDECREF(s);
        return NULL;
    }
    for (int i = 0; i < 8; i++)
        PyStructSequence_SET_ITEM(s, i, cols[i]);
    return s;
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

static PyObject *last_list(const dft_rk_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nlast);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nlast; i++) {
        const dft_rk_last *l = &r->last[i];
        PyObject *t = Py_BuildValue("(NLL)", dft_rd_text(l->group, l->group_len),
                                    (long long)l->seq, (long long)l->end);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *keys_list(const dft_rk_result *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nkeys);
    if (!list)
        return NULL;
    for (size_t i = 0; i < r->nkeys; i++) {
        const dft_rk_key *k = &r->keys[i];
        PyObject *t = PyStructSequence_New(key_type);
        PyObject *v[8] = {NULL};
        if (t) {
            v[0] = dft_rd_text(k->cat, k->cat_len);
            v[1] = dft_rd_text(k->name, k->name_len);
            v[2] = PyLong_FromLong(k->cls);
            v[3] = PyLong_FromUnsignedLongLong((unsigned long long)k->count);
            v[4] = PyLong_FromLongLong((long long)k->total);
            v[5] = PyLong_FromLongLong((long long)k->self_all);
            v[6] = PyLong_FromLongLong((long long)k->self_steps);
            v[7] = PyLong_FromLongLong((long long)k->io_bytes);
        }
        int ok = t != NULL;
        for (int f = 0; f < 8; f++)
            ok = ok && v[f] != NULL;
        if (!ok) {
            for (int f = 0; f < 8; f++)
                Py_XDECREF(v[f]);
            Py_XDECREF(t);
            Py_DECREF(list);
            return NULL;
        }
        for (int f = 0; f < 8; f++)
            PyStructSequence_SET_ITEM(t, f, v[f]);
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

/* One span of a snapshot: the keys of an `open` event's args it has. */
static PyObject *span_dict(const dft_hg *hg, const dft_hg_span *s)
{
    PyObject *d = Py_BuildValue("{s:N}", "value", dft_rd_text(s->value, strlen(s->value)));
    static const struct {
        unsigned bit;
        const char *key;
        size_t off;
    } ints[] = {
        {DFT_HG_DEPTH, "depth", offsetof(dft_hg_span, depth)},
        {DFT_HG_SINCE, "since", offsetof(dft_hg_span, since)},
        {DFT_HG_SEQ, "seq", offsetof(dft_hg_span, seq)},
        {DFT_HG_STEP, "step", offsetof(dft_hg_span, step)},
        {DFT_HG_BUCKET, "bucket", offsetof(dft_hg_span, bucket)},
    };
    for (size_t i = 0; d && i < sizeof ints / sizeof *ints; i++) {
        if (!(s->have & ints[i].bit))
            continue;
        int64_t v;
        memcpy(&v, (const char *)s + ints[i].off, sizeof v);
        PyObject *o = PyLong_FromLongLong((long long)v);
        if (!o || PyDict_SetItemString(d, ints[i].key, o) < 0)
            Py_CLEAR(d);
        Py_XDECREF(o);
    }
    const char *file = (s->have & DFT_HG_FHASH) ? dft_hg_file(hg, s->fhash) : NULL;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)s->fhash);
    const struct {
        int on;
        const char *key, *text;
    } strs[] = {
        {(s->have & DFT_HG_CAT) != 0, "span_cat", s->cat},
        {(s->have & DFT_HG_GROUP_SET) != 0, "group", s->group},
        {(s->have & DFT_HG_FHASH) != 0, "fhash", hex},
        {file != NULL, "file", file},
    };
    for (size_t i = 0; d && i < sizeof strs / sizeof *strs; i++) {
        if (!strs[i].on)
            continue;
        PyObject *o = dft_rd_text(strs[i].text, strlen(strs[i].text));
        if (!o || PyDict_SetItemString(d, strs[i].key, o) < 0)
            Py_CLEAR(d);
        Py_XDECREF(o);
    }
    return d;
}

/* The hang state (reader/ranks_hang.h) as {"threads": [(tid, at, [span])],
 * "stacks": [{tid, name, why, frames}], "stack_at", "stack_req", "sigterm",
 * "last_at", "dropped"}; strings as written (escapes kept). */
static PyObject *hang_dict(const dft_hg *hg)
{
    PyObject *threads = PyList_New(0), *stacks = PyList_New(0);
    for (size_t i = 0; threads && i < hg->nthreads; i++) {
        const dft_hg_thread *t = &hg->threads[i];
        PyObject *spans = PyList_New((Py_ssize_t)t->nspans);
        for (size_t k = 0; spans && k < t->nspans; k++) {
            PyObject *s = span_dict(hg, &t->spans[k]);
            if (!s)
                Py_CLEAR(spans);
            else
                PyList_SET_ITEM(spans, (Py_ssize_t)k, s);
        }
        PyObject *e = spans ? Py_BuildValue("(LLN)", (long long)t->tid, (long long)t->at, spans)
                            : NULL;
        if (!e || PyList_Append(threads, e) < 0)
            Py_CLEAR(threads);
        Py_XDECREF(e);
    }
    for (size_t i = 0; stacks && i < hg->nstacks; i++) {
        const dft_hg_stack *s = &hg->stacks[i];
        PyObject *e = Py_BuildValue("{s:L,s:N,s:N,s:N}", "tid", (long long)s->tid, "name",
                                    dft_rd_text(s->name, strlen(s->name)), "why",
                                    dft_rd_text(s->why, strlen(s->why)), "frames",
                                    dft_rd_text(s->frames, strlen(s->frames)));
        if (!e || PyList_Append(stacks, e) < 0)
            Py_CLEAR(stacks);
        Py_XDECREF(e);
    }
    if (!threads || !stacks) {
        Py_XDECREF(threads);
        Py_XDECREF(stacks);
        return NULL;
    }
    PyObject *last = hg->have_last ? PyLong_FromLongLong((long long)hg->last_at) : Py_NewRef(Py_None);
    if (!last) {
        Py_DECREF(threads);
        Py_DECREF(stacks);
        return NULL;
    }
    /* the step-end memory samples, oldest first */
    size_t nm = hg->nmem < DFT_HG_MEM_STEPS ? hg->nmem : DFT_HG_MEM_STEPS;
    PyObject *mem = PyList_New((Py_ssize_t)nm);
    for (size_t i = 0; mem && i < nm; i++) {
        size_t k = (hg->nmem - nm + i) % DFT_HG_MEM_STEPS;
        PyObject *e = Py_BuildValue("(LL)", (long long)hg->mem_step[k], (long long)hg->mem_rss[k]);
        if (!e)
            Py_CLEAR(mem);
        else
            PyList_SET_ITEM(mem, (Py_ssize_t)i, e);
    }
    PyObject *rss = mem && hg->have_rss ? PyLong_FromLongLong((long long)hg->rss)
                                        : Py_NewRef(Py_None);
    if (!mem || !rss) {
        Py_XDECREF(mem);
        Py_XDECREF(rss);
        Py_DECREF(threads);
        Py_DECREF(stacks);
        Py_DECREF(last);
        return NULL;
    }
    return Py_BuildValue("{s:N,s:N,s:L,s:L,s:O,s:N,s:K,s:N,s:N}", "threads", threads, "stacks",
                         stacks, "stack_at", (long long)(hg->have_stack ? hg->stack_at : -1),
                         "stack_req", (long long)hg->stack_req, "sigterm",
                         hg->sigterm ? Py_True : Py_False, "last_at", last, "dropped",
                         (unsigned long long)hg->dropped, "rss_bytes", rss, "rss_steps", mem);
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
        "{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:O,s:i,s:O,s:L,s:L,s:z,s:N,s:i,s:N,s:N,s:N,"
        "s:(KLLL),s:N}",
        "path", path, "status", dft_rd_status_name(r.status), "message", r.err, "members",
        (unsigned long long)r.members, "events", (unsigned long long)r.events, "long_lines",
        (unsigned long long)r.long_lines, "first_long_line",
        (unsigned long long)r.first_long_line, "finalized",
        r.finalized ? Py_True : Py_False, "end_signal", r.end_signal, "has_ts", r.have_ts ? Py_True : Py_False, "ts_min",
        (long long)r.ts_min, "end_max", (long long)r.end_max, "step_kind", r.step_kind,
        "steps", steps_seq(&r), "step_fields", STEP_FIELDS, "sync", sync_bytes(&r), "last_sync", last_list(&r), "keys",
        keys_list(&r), "clock", (unsigned long long)r.clock_pairs, (long long)r.clock_first,
        (long long)r.clock_min, (long long)r.clock_max, "hang", hang_dict(&r.hang));
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
    if (rc < 0)
        return -1;
    if (!steps_type && !(steps_type = PyStructSequence_NewType(&steps_desc)))
        return -1;
    if (!key_type && !(key_type = PyStructSequence_NewType(&key_desc)))
        return -1;
    if (PyModule_AddObjectRef(module, "RankSteps", (PyObject *)steps_type) < 0 ||
        PyModule_AddObjectRef(module, "RankKey", (PyObject *)key_type) < 0 ||
        PyModule_AddIntConstant(module, "_RANK_STEP_FIELDS", STEP_FIELDS) < 0 ||
        PyModule_AddIntConstant(module, "_RANK_SYNC_MAX", DFT_RK_SYNC_MAX) < 0)
        return -1;
    return PyModule_AddFunctions(module, ranks_methods);
}
