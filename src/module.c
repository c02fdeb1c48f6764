/* module.c: the dftracer._core module and its `dftracer` logger type
 * (exposed as dftracer.python.dftracer, compatible with pydftracer). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/clock.h"
#include "core/compress.h"
#include "core/core.h"
#define DFT_INTEGRATIONS_TABLE
#include "integrations.h"
#include "binding/pyargs.h"

#include <errno.h>
#include <signal.h>

/* ---- GIL hooks for the core's waits ------------------------------------ */

static void *release_gil(void)
{
    if (!Py_IsInitialized() || !PyGILState_Check())
        return NULL;
    return PyEval_SaveThread();
}

static void restore_gil(void *h)
{
    if (h)
        PyEval_RestoreThread((PyThreadState *)h);
}

/* ---- thread names ------------------------------------------------------ */

/* The core's thread_name hook (dft_set_python_hooks):
 * threading.current_thread().name, read as
 * threading._active[get_ident()]._name without running Python code (no call,
 * no import), so it is safe inside the tracer's emit path.  -1 when the
 * calling thread does not hold the GIL; 0 when it is not a threading thread.
 * Any pending exception is kept. */
static int py_thread_name(char *buf, size_t cap)
{
    if (!Py_IsInitialized() || !PyGILState_Check() || cap == 0)
        return -1;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing())
        return -1;
#endif
    int n = 0;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
#endif
    PyObject *threading = PyDict_GetItemString(PyImport_GetModuleDict(), "threading");
    PyObject *active = threading ? PyObject_GetAttrString(threading, "_active") : NULL;
    PyObject *key = active && PyDict_Check(active)
                        ? PyLong_FromUnsignedLong(PyThread_get_thread_ident())
                        : NULL;
    PyObject *thread = key ? PyDict_GetItemWithError(active, key) : NULL; /* borrowed */
    PyObject *name = thread ? PyObject_GetAttrString(thread, "_name") : NULL;
    Py_ssize_t len;
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
    if (s && len > 0) {
        size_t l = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
        while (l > 0 && l < (size_t)len && ((unsigned char)s[l] & 0xC0) == 0x80)
            l--; /* cut between UTF-8 characters */
        memcpy(buf, s, l);
        buf[l] = '\0';
        n = (int)l;
    }
    Py_XDECREF(name);
    Py_XDECREF(key);
    Py_XDECREF(active);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(et, ev, tb);
#endif
    return n;
}

/* ---- the logger type --------------------------------------------------- */

typedef struct {
    PyObject_HEAD
} LoggerObject;

static PyObject *logger_singleton; /* strong reference, created at module init */

static PyObject *logger_get_instance(PyObject *cls, PyObject *unused)
{
    (void)cls;
    (void)unused;
    return Py_NewRef(logger_singleton);
}

/* Exports the trace settings so spawned children (multiprocessing spawn,
 * DataLoader workers) trace into their own files under the same stem. */
static int export_env(void)
{
    PyObject *os = PyImport_ImportModule("os");
    if (!os)
        return -1;
    PyObject *environ = PyObject_GetAttrString(os, "environ");
    Py_DECREF(os);
    if (!environ)
        return -1;
    int rc = 0;
    struct {
        const char *key;
        const char *value;
    } items[] = {
        {"DFTRACER_ENABLE", "1"},
        {"DFTRACER_LOG_FILE", dft_trace_config()->log_file},
        {"DFTRACER_DATA_DIR", dft_trace_config()->data_dir},
    };
    for (size_t i = 0; i < sizeof items / sizeof *items && rc == 0; i++) {
        if (!items[i].value)
            continue;
        PyObject *v = PyUnicode_DecodeFSDefault(items[i].value);
        if (!v || PyMapping_SetItemString(environ, items[i].key, v) < 0)
            rc = -1;
        Py_XDECREF(v);
    }
    Py_DECREF(environ);
    return rc;
}

static PyObject *fs_path_or_none(PyObject *obj, const char *argname, PyObject **holder)
{
    *holder = NULL;
    if (obj == NULL || obj == Py_None)
        return Py_None;
    if (!PyUnicode_Check(obj) && !PyBytes_Check(obj) &&
        !PyObject_HasAttrString(obj, "__fspath__")) {
        PyErr_Format(PyExc_TypeError, "%s must be a str or path-like, not %.100s", argname,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (!PyUnicode_FSConverter(obj, holder))
        return NULL;
    return *holder;
}

static PyObject *logger_initialize_log(PyObject *unused, PyObject *args, PyObject *kwargs)
{
    (void)unused;
    static char *kwlist[] = {"logfile", "data_dir", "process_id", NULL};
    PyObject *logfile = Py_None, *data_dir = Py_None, *pid_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:initialize_log", kwlist, &logfile,
                                     &data_dir, &pid_obj))
        return NULL;
    long long process_id = -1;
    if (pid_obj && pid_obj != Py_None) {
        if (!PyLong_Check(pid_obj) || PyBool_Check(pid_obj)) {
            PyErr_Format(PyExc_TypeError, "process_id must be an int, not %.100s",
                         Py_TYPE(pid_obj)->tp_name);
            return NULL;
        }
        process_id = PyLong_AsLongLong(pid_obj);
        if (process_id == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_OverflowError,
                                "process_id does not fit in a signed 64-bit integer");
            }
            return NULL;
        }
    }
    PyObject *lf_holder, *dd_holder;
    PyObject *lf = fs_path_or_none(logfile, "logfile", &lf_holder);
    if (!lf)
        return NULL;
    PyObject *dd = fs_path_or_none(data_dir, "data_dir", &dd_holder);
    if (!dd) {
        Py_XDECREF(lf_holder);
        return NULL;
    }
    const char *lf_s = lf_holder ? PyBytes_AS_STRING(lf_holder) : NULL;
    const char *dd_s = dd_holder ? PyBytes_AS_STRING(dd_holder) : NULL;
    int was_active = dft_trace_state() == DFT_STATE_ACTIVE && dft_trace_explicit();
    if (was_active && lf_s) {
        char *stem = dft_config_stem(lf_s);
        const char *cur = dft_trace_config()->log_file;
        if (stem && cur && strcmp(stem, cur) != 0 &&
            PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "dftracer is already tracing to %s; initialize_log(%s) ignored "
                             "(call finalize() first)",
                             dft_trace_path(), lf_s) < 0) {
            free(stem);
            Py_XDECREF(lf_holder);
            Py_XDECREF(dd_holder);
            return NULL;
        }
        free(stem);
    }
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_start(lf_s, dd_s, process_id, 1, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_XDECREF(lf_holder);
    Py_XDECREF(dd_holder);
    if (rc < 0) {
        int e = errno;
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isz", e, err, dft_trace_path());
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    if (rc == 0 && export_env() < 0)
        return NULL;
    return Py_NewRef(logger_singleton);
}

static PyObject *logger_get_time(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLongLong(dft_clock_us());
}

static PyObject *logger_enter_event(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    dft_enter_scope();
    Py_RETURN_NONE;
}

static PyObject *logger_exit_event(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    dft_exit_scope();
    Py_RETURN_NONE;
}

/* log_event(name, cat, start_time, duration, int_args=None, float_args=None,
 *           string_args=None, relations=None): the hot path from Python.
 * relations (pydftracer's entity relations) must be None or a dict; the core
 * records no entities, so it is not written. */
static PyObject *logger_log_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)self;
    static const char *const names[] = {"name",     "cat",         "start_time", "duration",
                                        "int_args", "float_args",  "string_args",
                                        "relations"};
    PyObject *v[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (dft_pyargs_parse("log_event", args, nargs, kwnames, names, 8, 4, v) < 0)
        return NULL;
    if (v[7] && v[7] != Py_None && !PyDict_Check(v[7]))
        return dft_pyargs_type_error("relations", "a dict or None", v[7]);
    if (!dft_trace_ready()) {
        /* Inactive: still reject what would be rejected when active. */
        if (!PyUnicode_Check(v[0]) || !PyUnicode_Check(v[1]))
            return dft_pyargs_type_error(!PyUnicode_Check(v[0]) ? "name" : "cat", "str",
                                         !PyUnicode_Check(v[0]) ? v[0] : v[1]);
        Py_RETURN_NONE;
    }
    dft_pyevent pe;
    if (dft_pyevent_init(&pe, v[0], v[1]) < 0)
        return NULL;
    if (dft_pyargs_int64(v[2], "start_time", &pe.ev.ts) < 0 ||
        dft_pyargs_int64(v[3], "duration", &pe.ev.dur) < 0) {
        dft_pyevent_clear(&pe);
        return NULL;
    }
    pe.ev.ph = DFT_PH_COMPLETE;
    /* Most calls pass no args: no call for the dicts that are not there. */
    if (((v[4] && v[4] != Py_None) || (v[5] && v[5] != Py_None) || (v[6] && v[6] != Py_None)) &&
        (dft_pyevent_add_dict(&pe, v[4], "int_args", DFT_ARG_INT) < 0 ||
         dft_pyevent_add_dict(&pe, v[5], "float_args", DFT_ARG_FLOAT) < 0 ||
         dft_pyevent_add_dict(&pe, v[6], "string_args", DFT_ARG_STR) < 0)) {
        dft_pyevent_clear(&pe);
        return NULL;
    }
    dft_emit_logged(&pe.ev);
    dft_pyevent_clear(&pe);
    Py_RETURN_NONE;
}

static PyObject *logger_log_metadata_event(PyObject *self, PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    static const char *const names[] = {"key", "value"};
    PyObject *v[2] = {NULL, NULL};
    if (dft_pyargs_parse("log_metadata_event", args, nargs, kwnames, names, 2, 2, v) < 0)
        return NULL;
    Py_ssize_t kl, vl;
    if (!PyUnicode_Check(v[0]))
        return dft_pyargs_type_error("key", "str", v[0]);
    if (!PyUnicode_Check(v[1]))
        return dft_pyargs_type_error("value", "str", v[1]);
    if (!dft_trace_ready())
        Py_RETURN_NONE;
    PyObject *kb = NULL, *vb = NULL;
    const char *k = dft_pyargs_utf8(v[0], &kl, &kb);
    const char *s = k ? dft_pyargs_utf8(v[1], &vl, &vb) : NULL;
    if (k && s)
        dft_emit_metadata("CM", k, (size_t)kl, s, (size_t)vl);
    Py_XDECREF(kb);
    Py_XDECREF(vb);
    if (!k || !s)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *logger_finalize(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    dft_finalize();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *logger_flush(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    dft_flush();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *logger_is_active(PyObject *self, void *closure)
{
    (void)self;
    (void)closure;
    return PyBool_FromLong(dft_active());
}

static PyObject *logger_trace_path(PyObject *self, void *closure)
{
    (void)self;
    (void)closure;
    int state = dft_trace_state();
    const char *path = dft_trace_path();
    if (state == DFT_STATE_UNINIT || state == DFT_STATE_DISABLED || !path)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(path);
}

static PyMethodDef logger_methods[] = {
    {"get_instance", logger_get_instance, METH_NOARGS | METH_CLASS,
     "get_instance() -> dftracer\n\nThe process-wide logger."},
    {"initialize_log", (PyCFunction)(void (*)(void))logger_initialize_log,
     METH_VARARGS | METH_KEYWORDS | METH_STATIC,
     "initialize_log(logfile=None, data_dir=None, process_id=-1) -> dftracer\n\n"
     "Starts tracing when DFTRACER_ENABLE is set; returns the logger."},
    {"get_time", logger_get_time, METH_NOARGS,
     "get_time() -> int\n\nMicroseconds since the Unix epoch on the tracer clock."},
    {"enter_event", logger_enter_event, METH_NOARGS, "Opens a nesting scope on this thread."},
    {"exit_event", logger_exit_event, METH_NOARGS,
     "Closes the innermost scope opened by enter_event() on this thread."},
    {"log_event", (PyCFunction)(void (*)(void))logger_log_event, METH_FASTCALL | METH_KEYWORDS,
     "log_event(name, cat, start_time, duration, int_args=None, float_args=None, "
     "string_args=None, relations=None)\n\nRecords a complete event (times in microseconds)."},
    {"log_metadata_event", (PyCFunction)(void (*)(void))logger_log_metadata_event,
     METH_FASTCALL | METH_KEYWORDS, "log_metadata_event(key, value)\n\nRecords a CM event."},
    {"finalize", logger_finalize, METH_NOARGS,
     "finalize()\n\nWrites everything buffered and the end event; later calls do nothing."},
    {"flush", logger_flush, METH_NOARGS, "flush()\n\nWrites every buffered event now."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef logger_getset[] = {
    {"active", logger_is_active, NULL, "True while events are being recorded.", NULL},
    {"trace_path", logger_trace_path, NULL, "The trace file, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LoggerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core.dftracer",
    .tp_basicsize = sizeof(LoggerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The process-wide trace logger (use dftracer.get_instance() or initialize_log()).",
    .tp_methods = logger_methods,
    .tp_getset = logger_getset,
};

/* ---- module functions -------------------------------------------------- */

static PyObject *mod_get_time(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(dft_clock_us());
}

/* _compression_backend() -> (name, version, level) of the deflate library
 * the writer was built with (docs/performance.md). */
static PyObject *mod_compression_backend(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("(ssi)", dft_compress_backend(), dft_compress_version(),
                         dft_compress_level());
}

static PyObject *mod_finalize(PyObject *m, PyObject *unused)
{
    return logger_finalize(m, unused);
}

static PyObject *mod_is_active(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(dft_active());
}

/* The two variables that decide whether a process traces from start-up, read
 * by the core's rules: an unusable value warns once per process in the core's
 * table, so the core's own reading when a trace starts does not warn again. */
static PyObject *mod_start_env(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int enabled = dft_config_env_enabled();
    int preload = dft_config_init_mode() == DFT_INIT_PRELOAD;
    return Py_BuildValue("(OO)", enabled ? Py_True : Py_False, preload ? Py_True : Py_False);
}

/* _parse_interval(value, default): DFTRACER_FLUSH_INTERVAL's grammar, the
 * core's (config.c), for dftracer top. */
static PyObject *mod_parse_interval(PyObject *m, PyObject *args)
{
    (void)m;
    const char *v = NULL, *why;
    double dflt;
    if (!PyArg_ParseTuple(args, "zd:_parse_interval", &v, &dflt))
        return NULL;
    double x = dft_config_interval(v, dflt, DFT_MIN_FLUSH_INTERVAL, DFT_MAX_FLUSH_INTERVAL, &why);
    return Py_BuildValue("(dz)", x, why);
}

static PyObject *mod_clock_info(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("{s:s,s:L}", "source", dft_clock_source(), "offset_ns",
                         (long long)dft_clock_offset_ns);
}

/* _record_rank(rank, world_size=-1, local_rank=-1, job_id=None,
 * source="torch.distributed"): the `rank` metadata event for a rank learnt
 * after start-up (docs/trace-format.md, "Ranks and clocks"). */
static PyObject *mod_record_rank(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"rank", "world_size", "local_rank", "job_id", "source", NULL};
    long long rank, world = -1, local = -1;
    const char *job = NULL, *source = "torch.distributed";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "L|LLzs:_record_rank", kwlist, &rank, &world,
                                     &local, &job, &source))
        return NULL;
    if (rank < 0)
        return PyErr_Format(PyExc_ValueError, "_record_rank: rank must be >= 0, not %lld", rank);
    dft_rank_info ri = {.rank = rank, .local_rank = local < 0 ? -1 : local,
                        .world_size = world < 0 ? -1 : world, .job_id = job, .source = source};
    dft_identity_learn_rank(&ri, dft_trace_active() || dft_lazy_start() == 0);
    Py_RETURN_NONE;
}

/* _record_worker(id, num_workers=-1, loader=-1, dataset=None): the `worker`
 * metadata event of a DataLoader worker (docs/trace-format.md, "Workers"). */
static PyObject *mod_record_worker(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"id", "num_workers", "loader", "dataset", NULL};
    long long id, num = -1, loader = -1;
    const char *dataset = NULL;
    Py_ssize_t dataset_len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "L|LLz#:_record_worker", kwlist, &id, &num,
                                     &loader, &dataset, &dataset_len))
        return NULL;
    if (id < 0)
        return PyErr_Format(PyExc_ValueError, "_record_worker: id must be >= 0, not %lld", id);
    if (dft_trace_active() || dft_lazy_start() == 0)
        dft_identity_emit_worker(id, num < 0 ? -1 : num, loader < 0 ? -1 : loader, dataset,
                                 (size_t)dataset_len);
    Py_RETURN_NONE;
}

/* _signal_ends_process(signum): the handler now installed for signum ends
 * the process when it runs (torch's DataLoader worker handler); dftracer's
 * handler, chained in front of it, finalizes the trace first. */
static PyObject *mod_signal_ends_process(PyObject *m, PyObject *arg)
{
    (void)m;
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred())
        return NULL;
    if (sig != SIGTERM && sig != SIGHUP)
        return PyErr_Format(PyExc_ValueError,
                            "_signal_ends_process: signum must be SIGTERM or SIGHUP, not %ld", sig);
    if (dft_signals_handler_ends_process((int)sig) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* ---- the tracer's threads after os.fork() (core/park.c) -------------------
 *
 * The helper threads parked for a fork start again once CPython has counted
 * the threads for its fork warning (3.12+: 3.12 and 3.14 count right after
 * fork(), 3.13 after the after-fork hooks) and the program's own
 * after_in_parent hooks have run (they may count threads too, and ours,
 * registered at import, would run first): os.fork and os.forkpty are
 * wrapped (as _lifecycle.py wraps os._exit) and resume them when the real
 * call returns.  The after_in_parent hook resumes them after the forks that
 * do not go through os.fork (subprocess's with a preexec_fn).  A C
 * function: the warning names the program's line, as untraced. */

/* Inside the os.fork wrapper on this thread: the resume comes when it returns. */
static __thread int in_os_fork;

/* _after_fork_parent(): the after_in_parent hook.  GIL held. */
static PyObject *mod_after_fork_parent(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    if (!in_os_fork) /* subprocess's fork with a preexec_fn: no wrapper resumes */
        dft_threads_resume_after_fork();
    Py_RETURN_NONE;
}

static PyObject *real_fork, *real_forkpty;

/* The real call, then (in the parent) the resume.  GIL held. */
static PyObject *call_and_resume(PyObject *real)
{
    in_os_fork = 1;
    PyObject *r = PyObject_CallNoArgs(real);
    in_os_fork = 0;
    PyObject *pid = r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) > 0 ? PyTuple_GET_ITEM(r, 0) : r;
    if (pid && PyLong_Check(pid)) {
        long v = PyLong_AsLong(pid);
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
        else if (v > 0)
            dft_threads_resume_after_fork();
    }
    return r;
}

static PyObject *mod_fork(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return call_and_resume(real_fork);
}

static PyObject *mod_forkpty(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return call_and_resume(real_forkpty);
}

static PyMethodDef fork_wrappers[] = {
    {"fork", mod_fork, METH_NOARGS,
     "fork()\n--\n\nFork a child process (os.fork; dftracer starts its threads again in the "
     "parent once the call returns)."},
    {"forkpty", mod_forkpty, METH_NOARGS,
     "forkpty()\n--\n\nFork a new process with a new pseudo-terminal (os.forkpty; dftracer "
     "starts its threads again in the parent once the call returns)."},
};

/* os.<name> = the wrapper, keeping the real one in *real.  0, or -1 with an
 * exception set.  GIL held. */
static int wrap_os(PyObject *os, PyObject *m, PyMethodDef *def, PyObject **real)
{
    PyObject *fn = PyObject_GetAttrString(os, def->ml_name);
    if (!fn) {
        PyErr_Clear(); /* no such call here */
        return 0;
    }
    PyObject *w = PyCFunction_NewEx(def, m, NULL);
    int r = w ? PyObject_SetAttrString(os, def->ml_name, w) : -1;
    Py_XDECREF(w);
    if (r < 0) {
        Py_DECREF(fn);
        return -1;
    }
    *real = fn;
    return 0;
}

/* Once per process; GIL held, at import. */
static int install_fork_resume(PyObject *m)
{
    static int installed;
    if (installed)
        return 0;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *reg = os ? PyObject_GetAttrString(os, "register_at_fork") : NULL;
    PyObject *fn = reg ? PyObject_GetAttrString(m, "_after_fork_parent") : NULL;
    PyObject *kw = fn ? Py_BuildValue("{sO}", "after_in_parent", fn) : NULL;
    PyObject *args = kw ? PyTuple_New(0) : NULL;
    PyObject *r = args ? PyObject_Call(reg, args, kw) : NULL;
    int ok = r != NULL;
    ok = ok && wrap_os(os, m, &fork_wrappers[0], &real_fork) == 0 &&
         wrap_os(os, m, &fork_wrappers[1], &real_forkpty) == 0;
    Py_XDECREF(r);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(fn);
    Py_XDECREF(reg);
    Py_XDECREF(os);
    if (ok)
        installed = 1;
    return ok ? 0 : -1;
}

static PyMethodDef module_methods[] = {
    {"_after_fork_parent", mod_after_fork_parent, METH_NOARGS,
     "_after_fork_parent()\n\nStarts the tracer's helper threads again in a parent after fork()."},
    {"_signal_ends_process", mod_signal_ends_process, METH_O,
     "_signal_ends_process(signum)\n\nThe handler now installed for signum (SIGTERM, SIGHUP) "
     "ends the process: the trace is finalized before it runs."},
    {"_record_rank", (PyCFunction)(void (*)(void))mod_record_rank, METH_VARARGS | METH_KEYWORDS,
     "_record_rank(rank, world_size=-1, local_rank=-1, job_id=None, source='torch.distributed')"
     "\n\nWrites a `rank` metadata event (a rank learnt after start-up)."},
    {"_record_worker", (PyCFunction)(void (*)(void))mod_record_worker,
     METH_VARARGS | METH_KEYWORDS,
     "_record_worker(id, num_workers=-1, loader=-1, dataset=None)\n\nWrites a `worker` "
     "metadata event (a DataLoader worker's id, its loader's number and dataset class)."},
    {"get_time", mod_get_time, METH_NOARGS, "Microseconds since the epoch (tracer clock)."},
    {"finalize", mod_finalize, METH_NOARGS, "Finalizes the trace (used at exit)."},
    {"is_active", mod_is_active, METH_NOARGS, "True while events are being recorded."},
    {"_start_env", mod_start_env, METH_NOARGS,
     "_start_env()\n\n(DFTRACER_ENABLE is on, DFTRACER_INIT is PRELOAD), by the core's rules: "
     "an unusable value of either warns once, naming the value used."},
    {"_parse_interval", mod_parse_interval, METH_VARARGS,
     "_parse_interval(value, default) -> (seconds, why)\n\nDFTRACER_FLUSH_INTERVAL's "
     "grammar, the core's: why is None for a usable value, else the reason for the value "
     "used instead."},
    {"_clock_info", mod_clock_info, METH_NOARGS,
     "{'source': 'tsc' or 'monotonic', 'offset_ns': wall minus monotonic clock}."},
    {"_compression_backend", mod_compression_backend, METH_NOARGS,
     "(name, version, level) of the deflate library the writer uses."},
    {NULL, NULL, 0, NULL},
};

/* A C audit hook: a process about to exec() loses its buffers, so write them. */
static int audit_hook(const char *event, PyObject *args, void *data)
{
    (void)args;
    (void)data;
    if (event[0] == 'o' && strcmp(event, "os.exec") == 0 && dft_active()) {
        Py_BEGIN_ALLOW_THREADS
        dft_flush();
        Py_END_ALLOW_THREADS
    }
    return 0;
}

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dftracer._core",
    .m_doc = "dftracer's native core: clock, buffers, writers and the logger.",
    .m_size = -1,
};

/* GIL held, at import. */
PyObject *dft_core_module_create(struct PyModuleDef *def)
{
    if (PyType_Ready(&LoggerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(def);
    if (!m)
        return NULL;
    if (!logger_singleton) {
        logger_singleton = PyType_GenericAlloc(&LoggerType, 0);
        if (!logger_singleton)
            goto fail;
    }
#ifdef Py_GIL_DISABLED
    /* Py_mod_gil, declared the way a single-phase module does: the module
     * needs the GIL (docs/architecture.md, "Threads and the GIL"). */
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_USED) < 0)
        goto fail;
#endif
    dft_clock_init();
    dft_set_python_hooks(release_gil, restore_gil, py_thread_name);
    if (PyModule_AddFunctions(m, module_methods) < 0 ||
        PyModule_AddObjectRef(m, "dftracer", (PyObject *)&LoggerType) < 0 ||
        PyModule_AddObjectRef(m, "logger", logger_singleton) < 0 ||
        PyModule_AddStringConstant(m, "__version__", DFT_VERSION) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof dft_integrations / sizeof *dft_integrations; i++)
        if (dft_integrations[i] && dft_integrations[i](m) < 0)
            goto fail;
    if (install_fork_resume(m) < 0) { /* the helpers then resume at the next event */
        PyErr_Clear();
        dft_log(DFT_LOG_ERROR, "no after-fork hook; the tracer's threads start again after a "
                               "fork at the next event");
    }
    static int hooked;
    if (!hooked) {
        hooked = 1;
        if (PySys_AddAuditHook(audit_hook, NULL) < 0)
            PyErr_Clear(); /* only costs the flush before exec */
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

PyMODINIT_FUNC PyInit__core(void) { return dft_core_module_create(&core_module); }
