/* io/module.c: turns I/O tracing on and off with the trace, records the
 * wrappers' events, and exposes the state to Python for tests.
 *
 * io_start/io_stop run from the core's lifecycle hooks (core/core.h), under
 * life_lock, when a trace file opens and before finalize writes the end event. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>

#include "core/core.h"
#include "integrations.h"
#include "io/wrap.h"

/* ---- lifecycle --------------------------------------------------------------- */

static int installed_posix, installed_stdio;

/* Every wrapper table, with the category its events carry. */
static const struct {
    const char *cat;
    const dft_io_hook *hooks;
    const size_t *n;
} tables[] = {
    {"POSIX", dft_io_posix_hooks, &dft_io_posix_nhooks},
    {"POSIX", dft_io_posix_data_hooks, &dft_io_posix_data_nhooks},
    {"POSIX", dft_io_process_hooks, &dft_io_process_nhooks},
    {"STDIO", dft_io_stdio_hooks, &dft_io_stdio_nhooks},
};
#define NTABLES (sizeof tables / sizeof *tables)
#define MAX_WRAPPERS 250

/* Under life_lock, tracing active. */
static void io_start(void)
{
    const dft_config *c = dft_trace_config();
    if (c->disable_io || (c->disable_posix && c->disable_stdio))
        return;
    int np = dft_io_filter_init(c->data_dir);
    if (np < 0) {
        dft_log(DFT_LOG_ERROR, "dftracer: out of memory reading DFTRACER_DATA_DIR; I/O not traced");
        return;
    }
    if (np == 0) {
        dft_log(DFT_LOG_INFO, "dftracer: DFTRACER_DATA_DIR is not set; I/O not traced");
        return;
    }
    dft_io_hook list[MAX_WRAPPERS];
    size_t n = 0;
    for (size_t t = 0; t < NTABLES; t++) {
        int posix = strcmp(tables[t].cat, "POSIX") == 0;
        if (posix ? c->disable_posix : c->disable_stdio)
            continue;
        for (size_t i = 0; i < *tables[t].n && n < MAX_WRAPPERS; i++)
            list[n++] = tables[t].hooks[i];
    }
    if (!c->disable_posix)
        dft_io_process_start();
    int r = dft_got_install(list, n);
    if (r < 0)
        dft_log(DFT_LOG_ERROR, "dftracer: out of memory rewriting the GOT; some I/O not traced");
    installed_posix = !c->disable_posix;
    installed_stdio = !c->disable_stdio;
    dft_log(DFT_LOG_INFO, "dftracer: I/O tracing on (%d GOT slots)", r);
}

/* Under life_lock. */
static void io_stop(void)
{
    if (!dft_got_installed())
        return;
    dft_got_uninstall();
    dft_io_filter_reset();
    installed_posix = installed_stdio = 0;
}

/* Without the GIL, on the thread starting or finalizing the trace. */
static void io_lifecycle(dft_hook_event ev)
{
    if (ev == DFT_HOOK_OPENED)
        io_start();
    else if (ev == DFT_HOOK_RECONFIGURED) {
        io_stop(); /* the filter again, from initialize_log's data_dir */
        io_start();
    }
    else if (ev == DFT_HOOK_FINALIZING || ev == DFT_HOOK_ABANDONED) {
        if (ev == DFT_HOOK_FINALIZING)
            dft_io_filter_warn_missing();
        io_stop();
    }
}

/* ---- Python: state for tests ----------------------------------------------------- */

static PyObject *io_installed(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("{s:O,s:O,s:n}", "posix", installed_posix ? Py_True : Py_False, "stdio",
                         installed_stdio ? Py_True : Py_False, "slots",
                         (Py_ssize_t)dft_got_patched());
}

typedef struct slot_list {
    PyObject *list;
    int failed;
} slot_list;

static void add_slot(const char *object, uintptr_t slot, uintptr_t value, void *ctx)
{
    slot_list *s = ctx;
    if (s->failed)
        return;
    PyObject *t = Py_BuildValue("(sKK)", object, (unsigned long long)slot,
                                (unsigned long long)value);
    if (!t || PyList_Append(s->list, t) < 0)
        s->failed = 1;
    Py_XDECREF(t);
}

/* _io_got_slots(name) -> [(object, slot address, value)] */
static PyObject *io_got_slots(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    slot_list s = {PyList_New(0), 0};
    if (!s.list)
        return NULL;
    dft_got_slots(name, add_slot, &s);
    if (s.failed) {
        Py_DECREF(s.list);
        return NULL;
    }
    return s.list;
}

/* _io_wrapper(name) -> the wrapper's address, or None */
static PyObject *io_wrapper(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    for (size_t t = 0; t < NTABLES; t++)
        for (size_t i = 0; i < *tables[t].n; i++)
            if (strcmp(tables[t].hooks[i].name, name) == 0)
                return PyLong_FromUnsignedLongLong(
                    (unsigned long long)(uintptr_t)tables[t].hooks[i].wrapper);
    Py_RETURN_NONE;
}

/* io_calls() -> [(name, cat, defined)]: every libc function dftracer
 * intercepts, the category of its events, and whether this process's libc
 * defines it (a name libc lacks is never installed).  GIL held. */
static PyObject *io_calls(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (size_t t = 0; t < NTABLES; t++)
        for (size_t i = 0; i < *tables[t].n; i++) {
            const char *name = tables[t].hooks[i].name;
            PyObject *row = Py_BuildValue("(ssO)", name, tables[t].cat,
                                          dlsym(RTLD_DEFAULT, name) ? Py_True : Py_False);
            if (!row || PyList_Append(list, row) < 0) {
                Py_XDECREF(row);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(row);
        }
    return list;
}

/* _io_traced_path(path) -> the normalised path when it is under the data dir */
static PyObject *io_traced_path(PyObject *m, PyObject *arg)
{
    (void)m;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    char out[PATH_MAX];
    size_t n = dft_io_path_traced(AT_FDCWD, PyBytes_AS_STRING(bytes), out, sizeof out);
    Py_DECREF(bytes);
    if (!n)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefaultAndSize(out, (Py_ssize_t)n);
}

static PyMethodDef io_methods[] = {
    {"_io_installed", io_installed, METH_NOARGS,
     "State of I/O interception: {'posix': bool, 'stdio': bool, 'slots': int}."},
    {"_io_got_slots", io_got_slots, METH_O,
     "_io_got_slots(name) -> [(object, slot, value)] for every GOT slot importing name."},
    {"_io_wrapper", io_wrapper, METH_O, "_io_wrapper(name) -> address of dftracer's wrapper."},
    {"io_calls", io_calls, METH_NOARGS,
     "io_calls() -> [(name, cat, defined)]: the libc functions whose calls on traced files "
     "are recorded (docs/io-tracing.md), the category of their events, and whether this "
     "process's libc defines them."},
    {"_io_traced_path", io_traced_path, METH_O,
     "_io_traced_path(path) -> normalised path if traced now, else None."},
    {NULL, NULL, 0, NULL},
};

int dft_io_register(PyObject *module)
{
    for (PyMethodDef *d = io_methods; d->ml_name; d++) {
        PyObject *f = PyCFunction_New(d, NULL);
        if (!f || PyModule_AddObject(module, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    dft_got_atfork();
    if (dft_add_lifecycle_hook(io_lifecycle) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "no room for the I/O lifecycle hook");
        return -1;
    }
    return 0;
}
