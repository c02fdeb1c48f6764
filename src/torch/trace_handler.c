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
#include "integrations.h"
#include "torch/kineto.h"

#include <stdio.h>

/* Lanes already named in the current trace file (device, stream). */
#define LANES_MAX 256
static struct {
    uint64_t gen;
    int64_t pid, tid;
} named_lanes[LANES_MAX];
static size_t nnamed_lanes;
static pthread_mutex_t lanes_lock = PTHREAD_MUTEX_INITIALIZER; /* handlers run without the GIL */

/* The results object handled last, so that a second call for the same cycle
 * (a handler chained twice) writes nothing. */
static uint64_t last_gen;
static int64_t last_trace_start;
static PyObject *last_results; /* borrowed identity only, never dereferenced */

/* ---- writing (no GIL) ------------------------------------------------------ */

/* Names a device lane once per trace file.  Any thread, no GIL. */
static void name_lane(const pp_event *e, int64_t pid, uint64_t gen)
{
    pthread_mutex_lock(&lanes_lock);
    for (size_t i = 0; i < nnamed_lanes; i++)
        if (named_lanes[i].gen == gen && named_lanes[i].pid == pid && named_lanes[i].tid == e->tid) {
            pthread_mutex_unlock(&lanes_lock);
            return;
        }
    int new_pid = 1;
    for (size_t i = 0; i < nnamed_lanes; i++)
        if (named_lanes[i].gen == gen && named_lanes[i].pid == pid)
            new_pid = 0;
    if (nnamed_lanes == LANES_MAX) /* a new file: forget the old ones */
        nnamed_lanes = 0;
    named_lanes[nnamed_lanes].gen = gen;
    named_lanes[nnamed_lanes].pid = pid;
    named_lanes[nnamed_lanes].tid = e->tid;
    nnamed_lanes++;
    pthread_mutex_unlock(&lanes_lock);
    char buf[96];
    if (new_pid) {
        int len = snprintf(buf, sizeof buf, "%s:%d (pid %lld)", dft_pp_device_label(e->device_type),
                           (int)e->device_index, (long long)dft_g.pid);
        dft_arg args[2] = {
            {.key = "name", .type = DFT_ARG_STR, .v.s = {buf, (size_t)len}},
            {.key = "value", .type = DFT_ARG_STR, .v.s = {"process_name", 12}},
        };
        dft_event ev = {.name = "process_name", .name_len = 12, .cat = "dftracer", .cat_len = 8,
                        .ph = DFT_PH_METADATA, .pid = pid, .tid = e->tid, .args = args,
                        .nargs = 2};
        dft_emit(&ev);
    }
    snprintf(buf, sizeof buf, "%s:%d stream %lld", dft_pp_device_label(e->device_type),
             (int)e->device_index, (long long)e->tid);
    dft_name_lane(pid, e->tid, buf);
}

/* Writes the staged events; returns how many were recorded.  No GIL. */
static Py_ssize_t emit_all(const pp_vec *v, int64_t offset_ns)
{
    uint64_t gen = atomic_load(&dft_g.gen);
    Py_ssize_t written = 0;
    dft_arg args[DFT_PP_NARGS];
    for (size_t i = 0; i < v->n; i++) {
        const pp_event *e = &v->ev[i];
        dft_event ev;
        if (!dft_pp_to_event(e, offset_ns, args, &ev))
            continue;
        if (e->device_type != DEV_CPU) {
            ev.pid = dft_pp_device_lane_pid(dft_g.pid, e->device_index);
            name_lane(e, ev.pid, gen);
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
    if (!atomic_load_explicit(&dft_g.active, memory_order_relaxed) && dft_lazy_start() != 0) {
        if (atomic_load(&dft_g.state) == DFT_STATE_FINALIZED)
            return PyErr_Format(PyExc_RuntimeError,
                                "trace_handler: the trace was finalized before this profiler "
                                "cycle ended; its events were not written (%s is complete)",
                                dft_g.path ? dft_g.path : "the trace file");
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
    uint64_t gen = atomic_load(&dft_g.gen);
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
    written = emit_all(&v, offset_ns);
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
