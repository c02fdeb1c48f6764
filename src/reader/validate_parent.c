/* reader/validate_parent.c: _core._defined_hashes(path, hashes) -> dict.
 *
 * How `dftracer validate` checks a dftracer 2.x fork child against its
 * parent's file (docs/trace-format.md, "Valid files"): the library defines a
 * string once per process, so a child forked after its parent defined a
 * path or its command line uses that hash and never defines it.  One
 * streaming pass says which of the given hashes the file defines (HH, FH or
 * SH events) and who wrote it (host, pid, ppid, the start event's ts), so
 * the caller can walk from a child to its parent and on to theirs.  With no
 * hashes it reads only up to the start event: how the caller learns the
 * identity of the files beside a child.  Memory: the hashes asked for.  The
 * pass runs without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/identity.h"
#include "reader/reader.h"
#include "reader/tools.h"

#include <stdlib.h>
#include <string.h>

typedef struct lookup {
    dft_u64map wanted; /* the hashes asked for; value non-NULL once defined */
    size_t nwanted, nfound;
    dft_ident who;
    int64_t start_ts;
    int seen_start, numeric_ph;
    uint64_t events;
    dft_rd_bad bad;
} lookup;

#define NAME_IS(l, lit) ((l).name.n == sizeof(lit) - 1 && memcmp((l).name.p, lit, sizeof(lit) - 1) == 0)

/* Runs without the GIL.  Returns the reader's status (DFT_RD_OK: stopped
 * early, everything asked for found). */
static int scan_definitions(dft_rd *r, lookup *k)
{
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next_parsed(r, &text, &n, &l, &k->bad)) == DFT_RD_OK) {
        if (!k->events++)
            k->numeric_ph = (l.have & DFT_HAVE_NUMERIC_PH) != 0;
        dft_ident_line(&k->who, &l);
        if (l.ph == 'X' && !k->seen_start && NAME_IS(l, "start")) {
            k->seen_start = 1;
            k->start_ts = (l.have & DFT_HAVE_TS) ? l.ts : -1;
            if (k->nwanted == 0)
                break; /* the identity is all that was asked */
        }
        uint64_t h;
        size_t slot;
        if (l.ph != 'M' || !(NAME_IS(l, "HH") || NAME_IS(l, "FH") || NAME_IS(l, "SH")) ||
            dft_hash_token(l.a_value, &h) < 0 || dft_u64map_get(&k->wanted, h, 0, &slot) != 1 ||
            k->wanted.vals[slot])
            continue;
        k->wanted.vals[slot] = k; /* any non-NULL mark: defined here */
        if (++k->nfound == k->nwanted && k->seen_start)
            break;
    }
    return (int)st;
}

PyObject *dft_tools_defined_hashes(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *path, *hashes;
    if (!PyArg_ParseTuple(args, "OO:_defined_hashes", &path, &hashes))
        return NULL;
    lookup *k = calloc(1, sizeof *k);
    if (!k)
        return PyErr_NoMemory();
    dft_ident_init(&k->who);
    k->start_ts = -1;
    PyObject *result = NULL, *defined = NULL, *it = PyObject_GetIter(hashes), *item;
    if (!it)
        goto out;
    while ((item = PyIter_Next(it))) {
        unsigned long long h = PyLong_AsUnsignedLongLong(item);
        Py_DECREF(item);
        size_t slot;
        if (h == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "_defined_hashes: hashes must be ints in [0, 2**64)");
            break;
        }
        int f = dft_u64map_get(&k->wanted, (uint64_t)h, 1, &slot);
        if (f < 0) {
            PyErr_NoMemory();
            break;
        }
        k->nwanted += f == 0;
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        goto out;
    dft_rd r;
    if (dft_rd_open_path(&r, path) < 0)
        goto out;
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = scan_definitions(&r, k);
    Py_END_ALLOW_THREADS
    /* stopped early (DFT_RD_OK): what was read is whole */
    int status = st == DFT_RD_OK ? DFT_RD_EOF : st;
    defined = PyList_New(0);
    for (size_t i = 0; defined && i < k->wanted.cap; i++) {
        if (!k->wanted.keys[i] || !k->wanted.vals[i])
            continue;
        PyObject *h = PyLong_FromUnsignedLongLong(k->wanted.keys[i] - 1);
        if (!h || PyList_Append(defined, h) < 0)
            Py_CLEAR(defined);
        Py_XDECREF(h);
    }
    if (defined)
        result = Py_BuildValue("{s:O,s:s,s:N,s:K,s:O,s:N,s:N,s:L,s:L,s:L}", "path", path,
                               "status", dft_rd_status_name(status), "message",
                               dft_rd_message_str(&r), "events",
                               (unsigned long long)k->events, "numeric_ph",
                               k->numeric_ph ? Py_True : Py_False, "defined", defined, "host",
                               dft_rd_text(k->who.host, strlen(k->who.host)), "pid",
                               (long long)k->who.pid, "ppid", (long long)k->who.ppid, "start_ts",
                               (long long)k->start_ts);
    dft_rd_close(&r);
out:
    dft_u64map_free(&k->wanted, 0);
    free(k);
    return result;
}
