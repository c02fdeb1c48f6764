/* gpu/module.c: the Python face of GPU activity tracing
 * (dftracer._core._cupti_*; the public module is dftracer.python.cupti).  The
 * test entry points that feed synthetic activity records through the same
 * conversion and emission are the test extension's (src/testing/cupti.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>
#include <sys/stat.h>

#include "gpu/cupti_tracer.h"
#include "integrations.h"

static PyObject *cupti_enable(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    char reason[DFT_CUPTI_REASON_MAX] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_cupti_enable(reason, sizeof reason);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "GPU activity tracing (CUPTI) is unavailable: %s",
                     reason);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *cupti_disable(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    dft_cupti_disable();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *cupti_reason(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    char reason[DFT_CUPTI_REASON_MAX] = "";
    Py_BEGIN_ALLOW_THREADS
    dft_cupti_probe(reason, sizeof reason);
    Py_END_ALLOW_THREADS
    return PyUnicode_DecodeUTF8(reason, (Py_ssize_t)strlen(reason), "replace");
}

static PyObject *cupti_available(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    char reason[DFT_CUPTI_REASON_MAX];
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = dft_cupti_probe(reason, sizeof reason);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

static PyObject *cupti_running(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(dft_cupti_running());
}

static PyObject *cupti_pause(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int was;
    Py_BEGIN_ALLOW_THREADS
    was = dft_cupti_pause();
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(was);
}

static PyObject *cupti_resume(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int running;
    Py_BEGIN_ALLOW_THREADS
    running = dft_cupti_resume();
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(running);
}

static PyMethodDef cupti_methods[] = {
    {"_cupti_enable", cupti_enable, METH_NOARGS,
     "Records GPU activity (raises RuntimeError with the reason when unavailable)."},
    {"_cupti_disable", cupti_disable, METH_NOARGS, "Stops recording GPU activity."},
    {"_cupti_available", cupti_available, METH_NOARGS, "True when CUPTI and a GPU can be used."},
    {"_cupti_reason", cupti_reason, METH_NOARGS, "Why CUPTI is unavailable ('' when it is)."},
    {"_cupti_running", cupti_running, METH_NOARGS, "True while GPU activity is recorded."},
    {"_cupti_pause", cupti_pause, METH_NOARGS,
     "Steps aside for another CUPTI client; True if recording was running."},
    {"_cupti_resume", cupti_resume, METH_NOARGS,
     "Takes CUPTI back after _cupti_pause(); True if recording runs again."},
    {NULL, NULL, 0, NULL},
};

/* Torch's pip wheels bundle libcupti under site-packages/nvidia/...: remember
 * those directories (a stat per sys.path entry) for the loader. */
static void add_site_packages_dirs(void)
{
    static const char *const subs[] = {"nvidia/cuda_cupti/lib", "nvidia/cu13/lib",
                                       "nvidia/cu12/lib"};
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    if (!path || !PyList_Check(path))
        return;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(path); i++) {
        PyObject *entry = PyList_GET_ITEM(path, i);
        if (!PyUnicode_Check(entry))
            continue;
        const char *base = PyUnicode_AsUTF8(entry);
        if (!base) {
            PyErr_Clear();
            continue;
        }
        for (size_t s = 0; s < sizeof subs / sizeof *subs; s++) {
            char dir[4096];
            struct stat st;
            if (snprintf(dir, sizeof dir, "%s/%s", base, subs[s]) < (int)sizeof dir &&
                stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
                dft_cupti_add_search_dir(dir);
        }
    }
}

int dft_cupti_register(PyObject *module)
{
    if (PyModule_AddFunctions(module, cupti_methods) < 0)
        return -1;
    static int installed;
    if (!installed) {
        installed = 1;
        add_site_packages_dirs();
        dft_cupti_install();
    }
    return 0;
}
