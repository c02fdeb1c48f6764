/* reader/iostats_fold.c: _core._io_add, _io_fold, _io_unfold, _io_sums:
 * the I/O summary's sums over a job (dftracer/tools/iofold.py, Fold and
 * FileRows), folded as each trace's result arrives instead of keeping every
 * (trace file, data file) pair's counters.  All GIL held. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "reader/iostats.h"
#include "reader/tools.h"

static PyObject *int64s(const int64_t *v, size_t n)
{
    return PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * sizeof *v));
}

/* The counters two files combine by the larger (Darshan's MAX_BYTE ones). */
static int is_max(int i)
{
    return i == IO_POSIX_MAX_BYTE_READ || i == IO_POSIX_MAX_BYTE_WRITTEN ||
           i == IO_STDIO_MAX_BYTE_READ || i == IO_STDIO_MAX_BYTE_WRITTEN;
}

static void add_counters(int64_t *into, const int64_t *c)
{
    for (int i = 0; i < IO_NCOUNTERS; i++)
        into[i] = is_max(i) ? (c[i] > into[i] ? c[i] : into[i]) : into[i] + c[i];
}

/* ---- packed rows: a path's counters summed over the job --------------------
 * Most of a file's 78 counters are zero (a file read is not written), so the
 * I/O summary keeps each path's sums packed: a bitmap of the nonzero
 * counters, then each of them as a zigzag LEB128 varint (about 60 bytes, not
 * 624; a million files fit the summary's memory). */

#define PACK_MAP ((IO_NCOUNTERS + 7) / 8)
#define PACK_MAX (PACK_MAP + IO_NCOUNTERS * 10) /* a varint: at most 10 bytes */

static size_t pack(const int64_t *c, unsigned char *out)
{
    memset(out, 0, PACK_MAP);
    size_t at = PACK_MAP;
    for (int i = 0; i < IO_NCOUNTERS; i++) {
        if (!c[i])
            continue;
        out[i / 8] |= (unsigned char)(1u << (i % 8));
        uint64_t z = ((uint64_t)c[i] << 1) ^ (uint64_t)(c[i] >> 63);
        do {
            unsigned char b = z & 0x7f;
            z >>= 7;
            out[at++] = (unsigned char)(b | (z ? 0x80 : 0));
        } while (z);
    }
    return at;
}

/* 0, or -1 (ValueError set) for bytes that are not a packed row. */
static int unpack(const unsigned char *p, size_t n, int64_t *c)
{
    memset(c, 0, IO_NCOUNTERS * sizeof *c);
    if (n == 0)
        return 0;
    size_t at = PACK_MAP;
    for (int i = 0; i < IO_NCOUNTERS && n >= PACK_MAP; i++) {
        if (!(p[i / 8] & (1u << (i % 8))))
            continue;
        uint64_t z = 0;
        int shift = 0;
        for (;;) {
            if (at >= n || shift > 63)
                goto bad;
            unsigned char b = p[at++];
            z |= (uint64_t)(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        c[i] = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    }
    if (n >= PACK_MAP && at == n)
        return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "row: not a packed counter row");
    return -1;
}

static int counters_arg(const Py_buffer *b, int64_t *c, const char *what)
{
    if (b->len != (Py_ssize_t)(IO_NCOUNTERS * sizeof *c)) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, %zd expected", what, b->len,
                     (Py_ssize_t)(IO_NCOUNTERS * sizeof *c));
        return -1;
    }
    memcpy(c, b->buf, IO_NCOUNTERS * sizeof *c); /* a copy: no alignment assumed */
    return 0;
}

/* _io_add(into, counters): one data file's counters (bytes of IO_NCOUNTERS
 * int64, as _io_file gives them) added into the writable buffer into (an
 * array('q') of as many).  GIL held. */
static PyObject *io_add(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer into = {0}, add = {0};
    if (!PyArg_ParseTuple(args, "w*y*:_io_add", &into, &add))
        return NULL;
    int64_t a[IO_NCOUNTERS], b[IO_NCOUNTERS];
    PyObject *out = NULL;
    if (counters_arg(&into, a, "into") == 0 && counters_arg(&add, b, "counters") == 0) {
        add_counters(a, b);
        memcpy(into.buf, a, sizeof a);
        out = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&into);
    PyBuffer_Release(&add);
    return out;
}

/* _io_fold(row, counters) -> row: the packed row (b"" for none yet) with one
 * data file's counters added.  GIL held. */
static PyObject *io_fold(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer row = {0}, add = {0};
    if (!PyArg_ParseTuple(args, "y*y*:_io_fold", &row, &add))
        return NULL;
    int64_t a[IO_NCOUNTERS], b[IO_NCOUNTERS];
    unsigned char packed[PACK_MAX];
    PyObject *out = NULL;
    if (unpack(row.buf, (size_t)row.len, a) == 0 && counters_arg(&add, b, "counters") == 0) {
        add_counters(a, b);
        out = PyBytes_FromStringAndSize((const char *)packed, (Py_ssize_t)pack(a, packed));
    }
    PyBuffer_Release(&row);
    PyBuffer_Release(&add);
    return out;
}

/* _io_unfold(row) -> bytes of IO_NCOUNTERS int64.  GIL held. */
static PyObject *io_unfold(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer row = {0};
    if (PyObject_GetBuffer(arg, &row, PyBUF_SIMPLE) < 0)
        return NULL;
    int64_t c[IO_NCOUNTERS];
    int rc = unpack(row.buf, (size_t)row.len, c);
    PyBuffer_Release(&row);
    return rc < 0 ? NULL : int64s(c, IO_NCOUNTERS);
}

/* _io_sums(rows, indexes) -> bytes of one int64 per row: the sum of those
 * counters of each packed row (the summary's sort keys, without a Python
 * object per counter).  GIL held. */
static PyObject *io_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rows, *indexes;
    if (!PyArg_ParseTuple(args, "O!O!:_io_sums", &PyList_Type, &rows, &PyTuple_Type, &indexes))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows), k = PyTuple_GET_SIZE(indexes);
    int at[IO_NCOUNTERS];
    if (k > IO_NCOUNTERS) {
        PyErr_SetString(PyExc_ValueError, "indexes: more than the counters");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        long i = PyLong_AsLong(PyTuple_GET_ITEM(indexes, j));
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (i < 0 || i >= IO_NCOUNTERS) {
            PyErr_Format(PyExc_ValueError, "indexes: %ld is not a counter", i);
            return NULL;
        }
        at[j] = (int)i;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!out)
        return NULL;
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *b = PyList_GET_ITEM(rows, r);
        int64_t c[IO_NCOUNTERS], sum = 0;
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "rows: bytes expected");
            Py_DECREF(out);
            return NULL;
        }
        if (unpack((const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b),
                   c) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        for (Py_ssize_t j = 0; j < k; j++)
            sum += c[at[j]];
        memcpy(dst + r * (Py_ssize_t)sizeof sum, &sum, sizeof sum);
    }
    return out;
}

static PyMethodDef fold_methods[] = {
    {"_io_add", io_add, METH_VARARGS,
     "_io_add(into, counters): one data file's counters added into the array('q') into "
     "(the MAX_BYTE counters: the larger)."},
    {"_io_fold", io_fold, METH_VARARGS,
     "_io_fold(row, counters) -> row: a packed row of summed counters with one file's added."},
    {"_io_unfold", io_unfold, METH_O, "_io_unfold(row) -> bytes of the row's int64 counters."},
    {"_io_sums", io_sums, METH_VARARGS,
     "_io_sums(rows, indexes) -> bytes of int64: per packed row, the sum of those counters."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register_io_fold(PyObject *module)
{
    return PyModule_AddFunctions(module, fold_methods);
}
