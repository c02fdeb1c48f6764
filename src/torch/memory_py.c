/* torch/memory_py.c: dftracer._core's memory functions for
 * dftracer/python/torch/memory.py (MemoryTracker): the resident memory, the
 * kernel's high-water mark, the memory limit and the peak sampler; and the
 * CUDA allocator's figures at each iteration's end under `dftracer run`.
 * GIL held on entry; the reads run with it released. */
#include "torch/parts.h"
#include "core/core.h"

/* ---- the CUDA allocator at each step's end ------------------------------- */

/* The reader set by _at_cuda_mem_setup (dftracer/_autotrace/steps.py):
 * reader() -> (device, allocated, reserved, peak allocated, peak reserved)
 * of torch's current device, or None.  It is called only once torch.cuda
 * says it is initialized: a CPU job pays one attribute read a step. */
static struct {
    PyObject *reader, *cuda, *initialized_name, *cuda_name;
} C;

/* The stepping thread, GIL held.  A failure turns the reader off (one
 * info line from Python would need the GIL's owner: the reader reports its
 * own failures and returns None). */
void dft_at_cuda_mem_step(int64_t step)
{
    if (!C.reader || !dft_mem_counters_on() || !dft_trace_active())
        return;
    if (!C.cuda) {
        C.cuda = PyImport_GetModule(C.cuda_name); /* sys.modules["torch.cuda"] */
        if (!C.cuda) {
            PyErr_Clear();
            return;
        }
    }
    PyObject *init = PyObject_GetAttr(C.cuda, C.initialized_name);
    int on = init ? PyObject_IsTrue(init) : -1;
    Py_XDECREF(init);
    if (on <= 0) {
        PyErr_Clear();
        return;
    }
    PyObject *r = PyObject_CallNoArgs(C.reader);
    long long v[5];
    if (r && r != Py_None &&
        PyArg_ParseTuple(r, "LLLLL", &v[0], &v[1], &v[2], &v[3], &v[4])) {
        int64_t fig[4] = {v[1], v[2], v[3], v[4]};
        dft_mem_cuda_step(step, v[0], fig);
    } else if (!r || r != Py_None) {
        Py_CLEAR(C.reader); /* not what it should give: no more calls */
    }
    Py_XDECREF(r);
    PyErr_Clear();
}

static PyObject *py_cuda_mem_setup(PyObject *m, PyObject *arg)
{
    (void)m;
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_at_cuda_mem_setup(reader): reader must be callable or None");
        return NULL;
    }
    if (!C.initialized_name &&
        (!(C.initialized_name = PyUnicode_InternFromString("_initialized")) ||
         !(C.cuda_name = PyUnicode_InternFromString("torch.cuda"))))
        return NULL;
    Py_XSETREF(C.reader, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_CLEAR(C.cuda);
    Py_RETURN_NONE;
}

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

/* ---- MemoryTracker's blocks: one capsule each ---------------------------- */

#define WATCH_CAPSULE "dftracer._core.mem_watch"

/* A block dropped without its end (an abandoned generator, a tracker
 * collected inside its block) leaves the watcher's list.  GIL held. */
static void watch_capsule_free(PyObject *cap)
{
    dft_mem_watch *b = PyCapsule_GetPointer(cap, WATCH_CAPSULE);
    if (!b) {
        PyErr_Clear();
        return;
    }
    if (b->open)
        dft_mem_watch_end(b);
    free(b);
}

static PyObject *py_watch_begin(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    dft_mem_watch *b = calloc(1, sizeof *b);
    if (!b)
        return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(b, WATCH_CAPSULE, watch_capsule_free);
    if (!cap) {
        free(b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    dft_mem_watch_begin(b);
    Py_END_ALLOW_THREADS
    return cap;
}

static PyObject *py_watch_end(PyObject *m, PyObject *arg)
{
    (void)m;
    if (!PyCapsule_IsValid(arg, WATCH_CAPSULE))
        return PyErr_Format(PyExc_TypeError,
                            "_mem_watch_end: block must be what _mem_watch_begin returned, "
                            "not %.100s", Py_TYPE(arg)->tp_name);
    dft_mem_watch *b = PyCapsule_GetPointer(arg, WATCH_CAPSULE);
    if (!b)
        return NULL;
    int64_t v;
    Py_BEGIN_ALLOW_THREADS
    v = dft_mem_watch_end(b);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(v);
}

static PyMethodDef memory_methods[] = {
    {"_at_cuda_mem_setup", py_cuda_mem_setup, METH_O,
     "_at_cuda_mem_setup(reader)\n\nreader() -> (device, allocated, reserved, peak allocated, "
     "peak reserved) or None, called at each iteration's end once torch.cuda is initialized."},
    {"_mem_rss", py_rss, METH_NOARGS, "_mem_rss() -> int\n\nResident bytes now (-1: unknown)."},
    {"_mem_hwm", py_hwm, METH_NOARGS,
     "_mem_hwm() -> int\n\nThe kernel's high-water mark of resident bytes (-1: unknown)."},
    {"_mem_limit", py_limit, METH_NOARGS,
     "_mem_limit() -> (bytes, source)\n\nThe cgroup memory limit (0: none, -1: unknown)."},
    {"_mem_watch_begin", py_watch_begin, METH_NOARGS,
     "_mem_watch_begin() -> block\n\nStarts sampling the peak of one block (any number may be "
     "open); dropping the block ends it."},
    {"_mem_watch_end", py_watch_end, METH_O,
     "_mem_watch_end(block) -> int\n\nEnds the block: the peak resident bytes sampled since its "
     "begin (at least those now)."},
    {NULL, NULL, 0, NULL},
};

int dft_memory_register(PyObject *module) { return PyModule_AddFunctions(module, memory_methods); }
