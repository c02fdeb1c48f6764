/* reader/stacks_tail.c: _core._stack_events(path, offset), the `stack`
 * events (docs/trace-format.md, "Stacks") a trace holds from byte offset on:
 * how `dftracer stacks` reads the answers a process appended to its trace
 * since it was asked (dftracer/tools/stacks.py).  The file is read without
 * the GIL into a bounded list (STK_MAX events, STK_BYTES of frames in all;
 * what is past them is left out), then turned into Python dicts with it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/identity.h"
#include "reader/reader.h"
#include "reader/tools.h"

#define STK_MAX 4096            /* events kept */
#define STK_BYTES (16u << 20)   /* frames text kept, all events together */
#define STK_NAME 256

enum { K_AT = 1, K_REQ = 2, K_K = 4, K_N = 8, K_VALUE = 16, K_WHY = 32, K_FRAMES = 64 };

typedef struct stk_args {
    unsigned have;
    int64_t at, req, k, n;
    dft_sv value, why, frames;
} stk_args;

typedef struct stk_ev {
    unsigned have;
    int64_t tid, at, req, k, n;
    char value[STK_NAME], why[STK_NAME];
    char *frames; /* malloc'd, NUL-terminated */
} stk_ev;

typedef struct stk_list {
    stk_ev *ev;
    size_t n, cap, bytes;
} stk_list;

static void arg_value(void *ctx, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
#define INT(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(stk_args, f), DFT_ARG_FIELD_INT)
#define STR(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(stk_args, f), DFT_ARG_FIELD_STR)
    static const dft_arg_field fields[] = {
        INT("at", K_AT, at), INT("req", K_REQ, req), INT("k", K_K, k), INT("n", K_N, n),
        STR("value", K_VALUE, value), STR("why", K_WHY, why), STR("frames", K_FRAMES, frames),
    };
#undef INT
#undef STR
    stk_args *a = ctx;
    static dft_arg_table table = DFT_ARG_TABLE(fields);
    dft_arg_table_read(&table, a, &a->have, key, vp, vend, str, is_str);
}

/* One `stack` line into the list; -1 out of memory.  No GIL. */
static int keep(stk_list *s, const dft_line *l)
{
    stk_args a;
    memset(&a, 0, sizeof a);
    if (dft_line_args(l, arg_value, &a) < 0 || s->n >= STK_MAX)
        return 0;
    size_t fn = (a.have & K_FRAMES) ? a.frames.n : 0;
    if (s->bytes + fn > STK_BYTES)
        return 0;
    if (DFT_GROW(s->ev, s->n, s->cap, 16) != 0)
        return -1;
    stk_ev *e = &s->ev[s->n];
    e->frames = malloc(fn + 1);
    if (!e->frames)
        return -1;
    dft_copy_sv(e->frames, fn + 1, (a.have & K_FRAMES) ? a.frames : (dft_sv){"", 0});
    e->have = a.have;
    e->tid = (l->have & DFT_HAVE_TID) ? l->tid : -1;
    e->at = a.at;
    e->req = a.req;
    e->k = a.k;
    e->n = a.n;
    dft_copy_sv(e->value, sizeof e->value, (a.have & K_VALUE) ? a.value : (dft_sv){"", 0});
    dft_copy_sv(e->why, sizeof e->why, (a.have & K_WHY) ? a.why : (dft_sv){"", 0});
    s->bytes += fn;
    s->n++;
    return 0;
}

/* The pass: every `stack` event of the file from offset on.  0, or -1 with
 * errno (cannot open; ENOMEM).  No GIL. */
static int read_stacks(const char *path, uint64_t offset, stk_list *s)
{
    dft_rd rd;
    if (dft_rd_open_at(&rd, path, offset) < 0)
        return -1;
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_bad bad;
    memset(&bad, 0, sizeof bad);
    int rc = 0;
    while (dft_rd_next_parsed(&rd, &text, &n, &l, &bad) == DFT_RD_OK)
        if (l.ph == 'M' && l.name.n == 5 && memcmp(l.name.p, "stack", 5) == 0 &&
            l.cat.n == 8 && memcmp(l.cat.p, "dftracer", 8) == 0 && keep(s, &l) < 0) {
            rc = -1;
            errno = ENOMEM;
            break;
        }
    dft_rd_close(&rd);
    return rc;
}

static void free_list(stk_list *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->ev[i].frames);
    free(s->ev);
}

/* {"tid", "args": {"value", "at", "req", "k", "n", "why", "frames"}}: the
 * keys the event had (strings as written, escapes kept). */
static PyObject *event_dict(const stk_ev *e)
{
    PyObject *args = Py_BuildValue("{s:N,s:N}", "value", dft_rd_text(e->value, strlen(e->value)),
                                   "frames", dft_rd_text(e->frames, strlen(e->frames)));
    static const struct {
        unsigned bit;
        const char *key;
        size_t off;
    } ints[] = {
        {K_AT, "at", offsetof(stk_ev, at)}, {K_REQ, "req", offsetof(stk_ev, req)},
        {K_K, "k", offsetof(stk_ev, k)}, {K_N, "n", offsetof(stk_ev, n)},
    };
    for (size_t i = 0; args && i < sizeof ints / sizeof *ints; i++) {
        if (!(e->have & ints[i].bit))
            continue;
        int64_t v;
        memcpy(&v, (const char *)e + ints[i].off, sizeof v);
        PyObject *o = PyLong_FromLongLong((long long)v);
        if (!o || PyDict_SetItemString(args, ints[i].key, o) < 0)
            Py_CLEAR(args);
        Py_XDECREF(o);
    }
    if (args && (e->have & K_WHY)) {
        PyObject *o = dft_rd_text(e->why, strlen(e->why));
        if (!o || PyDict_SetItemString(args, "why", o) < 0)
            Py_CLEAR(args);
        Py_XDECREF(o);
    }
    if (!args)
        return NULL;
    PyObject *tid = e->tid >= 0 ? PyLong_FromLongLong((long long)e->tid) : Py_NewRef(Py_None);
    return tid ? Py_BuildValue("{s:N,s:N}", "tid", tid, "args", args) : (Py_DECREF(args), NULL);
}

static PyObject *stack_events(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *path, *bytes;
    unsigned long long offset;
    if (!PyArg_ParseTuple(args, "OK:_stack_events", &path, &offset))
        return NULL;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    stk_list s;
    memset(&s, 0, sizeof s);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_stacks(PyBytes_AS_STRING(bytes), (uint64_t)offset, &s);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc < 0) {
        free_list(&s);
        return errno == ENOMEM ? PyErr_NoMemory()
                               : PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    }
    PyObject *out = PyList_New((Py_ssize_t)s.n);
    for (size_t i = 0; out && i < s.n; i++) {
        PyObject *d = event_dict(&s.ev[i]);
        if (!d)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, d);
    }
    free_list(&s);
    return out;
}

static PyMethodDef stacks_tail_methods[] = {
    {"_stack_events", stack_events, METH_VARARGS,
     "_stack_events(path, offset) -> list\n\nThe `stack` events of a trace from byte offset "
     "on, as {tid, args} (dftracer.tools.stacks)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_stacks_tail(PyObject *module)
{
    return PyModule_AddFunctions(module, stacks_tail_methods);
}
