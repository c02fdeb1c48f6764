/* torch/trace_handler.c: dftracer.python.torch.trace_handler, the
 * on_trace_ready of torch.profiler.
 *
 * torch.profiler calls it once per finished cycle.  It reads the raw Kineto
 * results (torch/kineto.c), derives what FunctionEvent would hold (memory
 * attributed to ops, CPU/device time shares: torch/profiler_records.c), moves
 * Kineto's epoch nanoseconds onto the tracer clock and writes one "PP"
 * complete event per profiler event, device events on lanes of their own.
 * docs/torch-profiler.md describes the fields and where this departs from
 * FunctionEvent. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/clock.h"
#include "core/core.h"
#include "dftracer.h"
#include "torch/parts.h"
#include "torch/kineto.h"
#include "torch/trace_handler.h"

#include <stdio.h>

/* The results object handled last, so that a second call for the same cycle
 * (a handler chained twice) writes nothing. */
static uint64_t last_gen;
static int64_t last_trace_start;
static PyObject *last_results; /* borrowed identity only, never dereferenced */

/* ---- writing (no GIL) ------------------------------------------------------ */

/* Names the lane of device event e (on lane pid) the first time it appears
 * in the trace file.  Any thread, no GIL. */
static void name_lane(const pp_event *e, int64_t pid)
{
    char process_name[96], stream_name[96];
    const char *label = dft_pp_device_label(e->device_type);
    snprintf(process_name, sizeof process_name, "%s:%d (pid %lld)", label, (int)e->device_index,
             (long long)dft_trace_pid());
    snprintf(stream_name, sizeof stream_name, "%s:%d stream %lld", label, (int)e->device_index,
             (long long)e->tid);
    dft_name_lane_once(pid, e->tid, stream_name, process_name);
}

/* No GIL. */
Py_ssize_t dft_torch_write(const pp_vec *v, int64_t offset_ns)
{
    Py_ssize_t written = 0;
    dft_arg args[DFT_PP_NARGS];
    int64_t named_pid = 0, named_tid = 0; /* the lane named last: kernels come in runs */
    for (size_t i = 0; i < v->n; i++) {
        const pp_event *e = &v->ev[i];
        dft_event ev;
        if (!dft_pp_to_event(e, offset_ns, args, &ev))
            continue;
        if (e->device_type != DEV_CPU) {
            ev.pid = dft_pp_device_lane_pid(dft_trace_pid(), e->device_index);
            if (ev.pid != named_pid || e->tid != named_tid) {
                name_lane(e, ev.pid);
                named_pid = ev.pid;
                named_tid = e->tid;
            }
        }
        if (dft_emit(&ev) == 0)
            written++;
    }
    return written;
}

/* ---- the entry point ------------------------------------------------------- */

/* _torch_trace_handler(prof) -> int: writes the finished cycle of prof as PP
 * events and returns how many were written (0 when tracing is off). */
static PyObject *torch_trace_handler(PyObject *mod, PyObject *prof)
{
    (void)mod;
    if (!dft_trace_ready()) {
        if (dft_trace_state() == DFT_STATE_FINALIZED) {
            const char *path = dft_trace_path();
            return PyErr_Format(PyExc_RuntimeError,
                                "trace_handler: the trace was finalized before this profiler "
                                "cycle ended; its events were not written (%s is complete)",
                                path ? path : "the trace file");
        }
        return PyLong_FromLong(0);
    }
    PyObject *profiler = NULL;
    PyObject *results = dft_kineto_results(prof, &profiler);
    if (!results)
        return NULL;
    pp_vec v = {0};
    PyObject *ret = NULL;
    PyObject *start = PyObject_CallMethod(results, "trace_start_ns", NULL);
    int64_t trace_start = 0;
    if (!start || dft_kineto_i64(start, &trace_start) < 0)
        goto done;
    uint64_t gen = dft_trace_gen();
    if (results == last_results && trace_start == last_trace_start && gen == last_gen) {
        ret = PyLong_FromLong(0); /* this cycle was written already */
        goto done;
    }
    int use_device = 0;
    if (dft_kineto_read(profiler, results, &v, &use_device) < 0)
        goto done;
    if (dft_pp_attribute_memory(&v) < 0 || dft_pp_compute_shares(&v, use_device) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t written;
    /* Kineto's clock is the wall clock (epoch ns); ours is the wall clock read
     * at start-up advanced by CLOCK_MONOTONIC: their difference is what NTP
     * moved the wall clock since start-up. */
    int64_t offset_ns = dft_clock_minus_realtime_ns();
    Py_BEGIN_ALLOW_THREADS
    written = dft_torch_write(&v, offset_ns);
    Py_END_ALLOW_THREADS
    last_results = results;
    last_trace_start = trace_start;
    last_gen = gen;
    ret = PyLong_FromSsize_t(written);
done:
    dft_kineto_free(&v);
    Py_XDECREF(start);
    Py_DECREF(results);
    Py_DECREF(profiler);
    return ret;
}

static PyMethodDef torch_methods[] = {
    {"_torch_trace_handler", torch_trace_handler, METH_O,
     "_torch_trace_handler(prof) -> int\n\nWrites the finished cycle of a torch.profiler.profile "
     "as PP events on the tracer clock; returns how many were written."},
    {NULL, NULL, 0, NULL},
};

int dft_torch_profiler_register(PyObject *module)
{
    return PyModule_AddFunctions(module, torch_methods);
}
