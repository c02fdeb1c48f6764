/* testing/torch.c: the test extension's entry points into the torch.profiler
 * handler without torch: synthetic profiler events through its pure part
 * (torch/profiler_records.c: the PP events they would be written as), and
 * through its writing (torch/trace_handler.c: into the trace, device lanes
 * named).  GIL held unless noted. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "testing/testing.h"
#include "torch/profiler_records.h"
#include "torch/trace_handler.h"

/* One synthetic event: the fields torch/kineto.c reads from a KinetoEvent. */
static int read_synthetic(PyObject *d, pp_vec *v)
{
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "each event must be a dict, not %.100s", Py_TYPE(d)->tp_name);
        return -1;
    }
    PyObject *name = PyDict_GetItemString(d, "name");
    if (!name || !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "event['name'] must be a str");
        return -1;
    }
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &len);
    if (!utf8)
        return -1;
    pp_event *e = dft_pp_push(v);
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->utf8 = utf8; /* the caller's list keeps the str alive */
    e->len = (size_t)len;
    int64_t kind = KIND_OP, dt = DEV_CPU, di = 0, async = 0, annotation = 0;
    if (dft_testing_dict_i64(d, "event", "kind", &kind) < 0 || dft_testing_dict_i64(d, "event", "start_ns", &e->start_ns) < 0 ||
        dft_testing_dict_i64(d, "event", "end_ns", &e->end_ns) < 0 || dft_testing_dict_i64(d, "event", "tid", &e->tid) < 0 ||
        dft_testing_dict_i64(d, "event", "device_type", &dt) < 0 || dft_testing_dict_i64(d, "event", "device_index", &di) < 0 ||
        dft_testing_dict_i64(d, "event", "corr", &e->corr) < 0 || dft_testing_dict_i64(d, "event", "linked", &e->linked) < 0 ||
        dft_testing_dict_i64(d, "event", "input_size", &e->input_size) < 0 || dft_testing_dict_i64(d, "event", "flops", &e->flops) < 0 ||
        dft_testing_dict_i64(d, "event", "cpu_mem", &e->cpu_mem) < 0 || dft_testing_dict_i64(d, "event", "dev_mem", &e->dev_mem) < 0 ||
        dft_testing_dict_i64(d, "event", "is_async", &async) < 0 || dft_testing_dict_i64(d, "event", "is_annotation", &annotation) < 0)
        return -1;
    if (kind != KIND_OP && kind != KIND_MEMORY && kind != KIND_OOM) {
        PyErr_SetString(PyExc_ValueError, "event['kind'] must be 0 (op), 1 (memory) or 2 (OOM)");
        return -1;
    }
    e->kind = (uint8_t)kind;
    e->device_type = (int32_t)dt;
    e->device_index = (int32_t)di;
    e->is_async = async != 0;
    e->is_annotation = annotation != 0;
    e->thread = e->tid;
    if (e->end_ns < e->start_ns)
        e->end_ns = e->start_ns;
    if (kind == KIND_MEMORY && dft_pp_note_memory(v) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The PP event of e as a dict (name, ts, dur, args), or None when not written. */
static PyObject *written(const pp_event *e, int64_t offset_ns)
{
    dft_arg args[DFT_PP_NARGS];
    dft_event ev;
    if (!dft_pp_to_event(e, offset_ns, args, &ev))
        Py_RETURN_NONE;
    PyObject *a = PyDict_New();
    if (!a)
        return NULL;
    for (unsigned i = 0; i < ev.nargs; i++) {
        PyObject *x = args[i].type == DFT_ARG_FLOAT ? PyFloat_FromDouble(args[i].v.f)
                                                    : PyLong_FromLongLong(args[i].v.i);
        if (!x || PyDict_SetItemString(a, args[i].key, x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(a);
            return NULL;
        }
        Py_DECREF(x);
    }
    return Py_BuildValue("{s:s#,s:L,s:L,s:L,s:N}", "name", ev.name, (Py_ssize_t)ev.name_len,
                         "ts", (long long)ev.ts, "dur", (long long)ev.dur, "tid",
                         (long long)ev.tid, "args", a);
}

/* Reads and analyses events into v; 0, or -1 with an exception (free v). */
static int stage(PyObject *events, int use_device, pp_vec *v)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++)
        if (read_synthetic(PyList_GET_ITEM(events, i), v) < 0)
            return -1;
    if (dft_pp_attribute_memory(v) < 0 || dft_pp_compute_shares(v, use_device) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* _torch_records_for_test(events, use_device=False, offset_ns=0) -> list:
 * events are dicts of the fields torch/kineto.c reads (name, kind 0 op /
 * 1 memory / 2 OOM, start_ns, end_ns, tid, device_type, device_index, corr,
 * linked, input_size, flops, cpu_mem, dev_mem, is_async, is_annotation);
 * returns, per event, the PP event that would be written (a dict) or None. */
static PyObject *torch_records_for_test(PyObject *m, PyObject *args, PyObject *kwargs)
{
    (void)m;
    static char *kwlist[] = {"events", "use_device", "offset_ns", NULL};
    PyObject *events;
    int use_device = 0;
    long long offset_ns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|pL:_torch_records_for_test", kwlist,
                                     &PyList_Type, &events, &use_device, &offset_ns))
        return NULL;
    pp_vec v = {0};
    PyObject *out = NULL;
    if (stage(events, use_device, &v) < 0)
        goto done;
    out = PyList_New((Py_ssize_t)v.n);
    for (size_t i = 0; out && i < v.n; i++) {
        PyObject *w = written(&v.ev[i], offset_ns);
        if (!w)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, w);
    }
done:
    dft_pp_free(&v);
    return out;
}

/* _torch_write_for_test(events, use_device=False) -> int: writes synthetic
 * profiler events into the trace as the handler does (Kineto clock = the
 * tracer clock); returns how many were recorded. */
static PyObject *torch_write_for_test(PyObject *m, PyObject *args, PyObject *kwargs)
{
    (void)m;
    static char *kwlist[] = {"events", "use_device", NULL};
    PyObject *events;
    int use_device = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|p:_torch_write_for_test", kwlist,
                                     &PyList_Type, &events, &use_device))
        return NULL;
    pp_vec v = {0};
    PyObject *out = NULL;
    if (stage(events, use_device, &v) == 0) {
        Py_ssize_t written;
        Py_BEGIN_ALLOW_THREADS
        written = dft_torch_write(&v, 0);
        Py_END_ALLOW_THREADS
        out = PyLong_FromSsize_t(written);
    }
    dft_pp_free(&v);
    return out;
}

static PyMethodDef torch_test_methods[] = {
    {"_torch_write_for_test", (PyCFunction)(void (*)(void))torch_write_for_test,
     METH_VARARGS | METH_KEYWORDS,
     "Writes synthetic profiler events as the handler does; returns how many were recorded."},
    {"_torch_records_for_test", (PyCFunction)(void (*)(void))torch_records_for_test,
     METH_VARARGS | METH_KEYWORDS,
     "The PP events synthetic profiler events would be written as (None: not written)."},
    {NULL, NULL, 0, NULL},
};

int dft_testing_torch_register(PyObject *module)
{
    return PyModule_AddFunctions(module, torch_test_methods);
}
