/* reader/module.c: registers the trace readers in dftracer._core
 * (_summarize_file, _validate_file, _LineReader) for the `dftracer`
 * command line. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/reader.h"
#include "reader/tools.h"

#include <string.h>

#define BATCH_LINES 4096

/* _LineReader(path): iterates over lists of up to 4096 lines (bytes, without
 * '\n'; lines over the line limit skipped, see .long_lines); afterwards .status ("ok", "truncated", "corrupt", "error"),
 * .message and .members describe how the file ended. */
typedef struct {
    PyObject_HEAD
    dft_rd rd;
    int open;
    int status;
} LineReaderObject;

static PyObject *linereader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *path;
    static char *kwlist[] = {"path", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:_LineReader", kwlist, &path))
        return NULL;
    LineReaderObject *self = (LineReaderObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    if (dft_rd_open_path(&self->rd, path) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->open = 1;
    self->status = -1;
    return (PyObject *)self;
}

static void linereader_dealloc(LineReaderObject *self)
{
    if (self->open)
        dft_rd_close(&self->rd);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *linereader_next(LineReaderObject *self)
{
    if (self->status >= 0)
        return NULL;
    PyObject *batch = PyList_New(0);
    if (!batch)
        return NULL;
    const char *line;
    size_t n;
    for (int i = 0; i < BATCH_LINES; i++) {
        dft_rd_status st = dft_rd_next(&self->rd, &line, &n);
        if (st != DFT_RD_OK) {
            self->status = (int)st;
            break;
        }
        PyObject *b = PyBytes_FromStringAndSize(line, (Py_ssize_t)n);
        if (!b || PyList_Append(batch, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(batch);
            return NULL;
        }
        Py_DECREF(b);
    }
    if (PyList_GET_SIZE(batch) == 0 && self->status >= 0) {
        Py_DECREF(batch);
        return NULL;
    }
    return batch;
}

static PyObject *linereader_status(LineReaderObject *self, void *unused)
{
    (void)unused;
    return dft_rd_status_str(self->status);
}

static PyObject *linereader_message(LineReaderObject *self, void *unused)
{
    (void)unused;
    return dft_rd_message_str(&self->rd);
}

static PyObject *linereader_members(LineReaderObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(self->rd.members);
}

static PyObject *linereader_long_lines(LineReaderObject *self, void *unused)
{
    (void)unused;
    return Py_BuildValue("(KK)", (unsigned long long)self->rd.long_lines,
                         (unsigned long long)self->rd.first_long_line);
}

static PyGetSetDef linereader_getset[] = {
    {"long_lines", (getter)linereader_long_lines, NULL,
     "(count, first line number) of the lines skipped as longer than the line limit.", NULL},
    {"status", (getter)linereader_status, NULL, "How the file ended.", NULL},
    {"message", (getter)linereader_message, NULL, "Why it ended early, or ''.", NULL},
    {"members", (getter)linereader_members, NULL, "Gzip members fully decoded.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LineReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._LineReader",
    .tp_basicsize = sizeof(LineReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "_LineReader(path): batches of lines of a plain or gzip trace file.",
    .tp_new = linereader_new,
    .tp_dealloc = (destructor)linereader_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)linereader_next,
    .tp_getset = linereader_getset,
};

static PyMethodDef tools_methods[] = {
    {"_summarize_file", dft_tools_summarize_file, METH_O,
     "_summarize_file(path) -> dict\n\nAggregates one trace file (see dftracer.tools.summary)."},
    {"_validate_file", dft_tools_validate_file, METH_O,
     "_validate_file(path) -> dict\n\nChecks one trace file against docs/trace-format.md."},
    {"_defined_hashes", dft_tools_defined_hashes, METH_VARARGS,
     "_defined_hashes(path, hashes) -> dict\n\nWhich of hashes (ints) the trace defines, and "
     "who wrote it (host, pid, ppid, start_ts); no hashes: reads only up to its start event."},
    {"_rewrite_file", (PyCFunction)(void (*)(void))dft_tools_rewrite_file,
     METH_VARARGS | METH_KEYWORDS,
     "_rewrite_file(path, part, fmt, old_pid, new_pid, nfiles, index, ts_offset=0) -> dict\n\n"
     "Writes one trace's events, hashes resolved, into part (see dftracer.tools.merge)."},
    {NULL, NULL, 0, NULL},
};

int dft_tools_register(PyObject *module)
{
    if (PyType_Ready(&LineReaderType) < 0 ||
        PyModule_AddObjectRef(module, "_LineReader", (PyObject *)&LineReaderType) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "_HIST_BINS", DFT_HIST_BINS) < 0 ||
        PyModule_AddIntConstant(module, "_LINE_MAX", (long)DFT_RD_LINE_MAX) < 0)
        return -1;
    if (dft_tools_register_events(module) < 0 || dft_tools_register_ranks(module) < 0 ||
        dft_tools_register_io(module) < 0 || dft_tools_register_classify(module) < 0 ||
        dft_tools_register_stacks_tail(module) < 0 ||
        dft_tools_register_event_lines(module) < 0 ||
        dft_tools_register_memory(module) < 0)
        return -1;
    return PyModule_AddFunctions(module, tools_methods);
}
