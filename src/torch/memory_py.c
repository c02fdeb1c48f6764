/* torch/memory_py.c: dftracer._core's memory functions for
 * dftracer/python/torch/memory.py (MemoryTracker): the resident memory, the
 * kernel's high-water mark, the memory limit and the peak sampler.  GIL held
 * on entry; the reads run with it released. */
#include "integrations.h"
#include "core/core.h"

static PyObject *py_rss(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    int64_t v;
    Py_BEGIN_ALLOW_THREADS /* a /proc read: no GIL */
    v = dft_mem_rss();
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(v);
}

static PyObject *py_hwm(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    int64_t v;
    Py_BEGIN_ALLOW_THREADS
    v = dft_mem_hwm();
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(v);
}

static PyObject *py_limit(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    int64_t v;
    const char *source;
    Py_BEGIN_ALLOW_THREADS
    v = dft_mem_limit(&source);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Ls)", (long long)v, source);
}

static PyObject *py_watch_begin(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    int slot;
    Py_BEGIN_ALLOW_THREADS
    slot = dft_mem_watch_begin();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(slot);
}

static PyObject *py_watch_end(PyObject *m, PyObject *arg)
{
    (void)m;
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    int64_t v;
    Py_BEGIN_ALLOW_THREADS
    v = dft_mem_watch_end(slot < -1 || slot > 1 << 20 ? -1 : (int)slot);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(v);
}

static PyMethodDef memory_methods[] = {
    {"_mem_rss", py_rss, METH_NOARGS, "_mem_rss() -> int\n\nResident bytes now (-1: unknown)."},
    {"_mem_hwm", py_hwm, METH_NOARGS,
     "_mem_hwm() -> int\n\nThe kernel's high-water mark of resident bytes (-1: unknown)."},
    {"_mem_limit", py_limit, METH_NOARGS,
     "_mem_limit() -> (bytes, source)\n\nThe cgroup memory limit (0: none, -1: unknown)."},
    {"_mem_watch_begin", py_watch_begin, METH_NOARGS,
     "_mem_watch_begin() -> int\n\nStarts sampling the peak; the slot (-1: none free)."},
    {"_mem_watch_end", py_watch_end, METH_O,
     "_mem_watch_end(slot) -> int\n\nThe peak resident bytes sampled since begin."},
    {NULL, NULL, 0, NULL},
};

int dft_memory_register(PyObject *module) { return PyModule_AddFunctions(module, memory_methods); }
