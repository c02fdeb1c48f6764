/* testing/walk.c: the stack walker (hang/walk.c) called directly, with the
 * copy it would use or the pipe it falls back to where process_vm_readv is
 * refused: the tests check both on this interpreter, and that a copy from
 * memory unmapped a moment ago fails instead of faulting.  GIL held (the
 * walker needs none; it reads the same structures either way). */
#include "testing/testing.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hang/walk.h"

/* _walk_for_test(pipe_only, cap=100) -> [(ident, native, [(file, line,
 * function), ... innermost first, at most cap], the address of the bottom
 * frame the walk reached or 0, the frames it went through), ...] for every
 * thread, the main thread first. */
static PyObject *walk_for_test(PyObject *m, PyObject *args)
{
    (void)m;
    int pipe_only, cap = DFT_WALK_MAX_FRAMES;
    if (!PyArg_ParseTuple(args, "p|i:_walk_for_test", &pipe_only, &cap))
        return NULL;
    if (cap < 1 || cap > DFT_WALK_MAX_FRAMES)
        return PyErr_Format(PyExc_ValueError, "_walk_for_test: cap must be 1 to %d, not %d",
                            DFT_WALK_MAX_FRAMES, cap);
    dft_walker w;
    if (dft_walk_open(&w, pipe_only) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    dft_walk_thread threads[64];
    dft_walk_frame *frames = PyMem_Malloc(DFT_WALK_MAX_FRAMES * sizeof *frames);
    PyObject *out = frames ? PyList_New(0) : PyErr_NoMemory();
    int n = out ? dft_walk_threads(&w, PyInterpreterState_Get(), threads, 64) : 0;
    for (int k = 0; k < n && out; k++) {
        int nf = dft_walk_stack(&w, threads[k].tstate, frames, cap);
        PyObject *fl = PyList_New(nf);
        for (int i = 0; fl && i < nf; i++) {
            PyObject *t = Py_BuildValue("(sis)", frames[i].file, frames[i].line, frames[i].func);
            if (!t)
                Py_CLEAR(fl);
            else
                PyList_SET_ITEM(fl, i, t);
        }
        PyObject *row = fl ? Py_BuildValue("(klNNi)", threads[k].ident, threads[k].native, fl,
                                           PyLong_FromVoidPtr((void *)(uintptr_t)w.bottom),
                                           w.depth)
                           : NULL;
        if (!row || PyList_Append(out, row) < 0)
            Py_CLEAR(out);
        Py_XDECREF(row);
    }
    PyMem_Free(frames);
    dft_walk_close(&w);
    return out;
}

/* _walk_bottom_here_for_test() -> the address of this thread's bottom frame. */
static PyObject *walk_bottom_here_for_test(PyObject *m, PyObject *noargs)
{
    (void)m;
    (void)noargs;
    return PyLong_FromVoidPtr((void *)(uintptr_t)dft_walk_bottom_here());
}

/* _walk_copy_for_test(pipe_only) -> (mapped copy ok, unmapped copy refused). */
static PyObject *walk_copy_for_test(PyObject *m, PyObject *arg)
{
    (void)m;
    int pipe_only = PyObject_IsTrue(arg);
    if (pipe_only < 0)
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    memset(p, 7, (size_t)page);
    dft_walker w;
    if (dft_walk_open(&w, pipe_only) != 0) {
        munmap(p, (size_t)page);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    char buf[64] = {0};
    int mapped = dft_walk_copy(&w, buf, p + 8, sizeof buf) == 0 && buf[0] == 7 && buf[63] == 7;
    munmap(p, (size_t)page);
    int refused = dft_walk_copy(&w, buf, p + 8, sizeof buf) != 0;
    /* the pipe is left empty after a refused copy: the next one still works */
    long v = 5, got = 0;
    mapped = mapped && dft_walk_copy(&w, &got, &v, sizeof v) == 0 && got == 5;
    dft_walk_close(&w);
    return Py_BuildValue("(OO)", mapped ? Py_True : Py_False, refused ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"_walk_for_test", walk_for_test, METH_VARARGS,
     "_walk_for_test(pipe_only, cap=100) -> [(ident, native, [(file, line, function)], bottom, "
     "depth)]: the stacks walker's view of every thread, innermost frame first."},
    {"_walk_bottom_here_for_test", walk_bottom_here_for_test, METH_NOARGS,
     "_walk_bottom_here_for_test() -> the address of this thread's bottom frame."},
    {"_walk_copy_for_test", walk_copy_for_test, METH_O,
     "_walk_copy_for_test(pipe_only) -> (mapped copy ok, copy of unmapped memory refused)."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (module init). */
int dft_testing_walk_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
