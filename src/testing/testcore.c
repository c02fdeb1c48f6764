/* testing/testcore.c: _dftracer_testcore, the test extension (testing.h).
 *
 * Everything dftracer._core holds (dft_core_module_create, module.c), built
 * from the same sources with DFT_TESTING, plus the entry points tests and
 * benchmarks need and a user never does: the JSON escaper and XXH64 on their
 * own, the writer's format + compress loop timed alone, the cost of a clock
 * read, and the core's test hooks (a clock that jumps, a wide hand-off
 * window).  A test whose program needs a hook runs that program on this
 * module in place of dftracer._core (tests/tracefile.py, USE_TESTCORE). */
#include "testing/testing.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/compress.h"
#include "core/config.h"
#include "binding/pyargs.h"
#include "core/core.h"
#include "format/json.h"
#include "hang/sampler.h"
#include "integrations.h"
#include "testing/writer_bench.h"

/* _json_string(bytes) -> str: the JSON string dftracer writes for bytes. */
static PyObject *json_string(PyObject *m, PyObject *arg)
{
    (void)m;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    dft_sbuf b = {0};
    dft_json_string(&b, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    if (b.failed)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_DecodeUTF8(b.data, (Py_ssize_t)b.len, "strict");
    dft_sbuf_free(&b);
    return r;
}

/* _hash64(bytes) -> int: XXH64 (seed 0), as in hhash/fhash/SH values. */
/* _config_for_test() -> {"log_level": 0-3 (DEBUG..ERROR), "flush_interval":
 * seconds}: the environment read as tracing would read it now (its
 * warnings printed), for the tests that hold Python's copies of those rules
 * (dftracer/_envflag.py, tools/follow.py) to the core's. */
static PyObject *config_for_test(PyObject *m, PyObject *noargs)
{
    (void)m;
    (void)noargs;
    dft_config c;
    dft_config_load(&c);
    PyObject *out = Py_BuildValue("{sisd}", "log_level", c.log_level, "flush_interval",
                                  c.flush_interval);
    dft_config_free(&c);
    return out;
}

static PyObject *hash64(PyObject *m, PyObject *arg)
{
    (void)m;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint64_t h = dft_hash64(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

/* _clock_read_cost(n) -> float: ns per tracer-clock read, over n reads timed
 * with CLOCK_MONOTONIC (GIL released). */
static PyObject *clock_read_cost(PyObject *m, PyObject *arg)
{
    (void)m;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "n must be a positive number of reads");
        return NULL;
    }
    volatile int64_t sink = 0;
    struct timespec a, b;
    Py_BEGIN_ALLOW_THREADS
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        sink += dft_clock_ns();
    clock_gettime(CLOCK_MONOTONIC, &b);
    Py_END_ALLOW_THREADS
    (void)sink;
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    return PyFloat_FromDouble(ns / (double)n);
}

/* _clock_skew_for_test(ns) -> bool: moves the fitted TSC clock by ns. */
static PyObject *clock_skew(PyObject *m, PyObject *arg)
{
    (void)m;
    long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(dft_clock_skew_for_test((int64_t)ns));
}

/* A delay in microseconds from arg into *slot; NULL with ValueError when out
 * of range. */
static PyObject *set_delay(_Atomic int *slot, PyObject *arg)
{
    long us = PyLong_AsLong(arg);
    if (us == -1 && PyErr_Occurred())
        return NULL;
    if (us < 0 || us > 10000000) {
        PyErr_SetString(PyExc_ValueError, "delay_us must be within 0..10000000");
        return NULL;
    }
    atomic_store(slot, (int)us);
    Py_RETURN_NONE;
}

/* _handoff_delay_for_test(delay_us): each hand-off of a buffer sleeps that
 * long between leaving its thread and reaching the writer queue. */
static PyObject *handoff_delay(PyObject *m, PyObject *arg)
{
    (void)m;
    return set_delay(&dft_test_handoff_delay_us, arg);
}

/* _reclaim_delay_for_test(delay_us): the writer sleeps that long between
 * finding the trace file's descriptor closed and opening the file again. */
static PyObject *reclaim_delay(PyObject *m, PyObject *arg)
{
    (void)m;
    return set_delay(&dft_test_reclaim_delay_us, arg);
}

/* The int64 items of seq (a tuple) into a new array; NULL with an exception. */
static int64_t *int64_items(PyObject *seq, const char *what)
{
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    int64_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out)
        return (int64_t *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(seq, i); /* borrowed */
        if (!PyLong_Check(v) || dft_pyargs_int64(v, what, &out[i]) < 0) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s must be ints", what);
            }
            PyMem_Free(out);
            return NULL;
        }
    }
    return out;
}

/* The dft_encoder called name; -1 and a ValueError naming fn for another. */
static int encoder_arg(const char *fn, const char *name)
{
    static const char *const names[] = {[DFT_ENCODER_AUTO] = "auto", [DFT_ENCODER_LINES] = "lines",
                                        [DFT_ENCODER_LIBRARY] = "library",
                                        [DFT_ENCODER_FASTEST] = "fastest"};
    for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
        if (strcmp(name, names[k]) == 0)
            return k;
    PyErr_Format(PyExc_ValueError,
                 "%s: encoder must be 'auto', 'fastest', 'lines' or 'library', not '%s'", fn, name);
    return -1;
}

/* _compress_member(data, encoder="auto") -> bytes: one gzip member of data,
 * as the writer deflates it ("auto"; "fastest" while it falls behind), or by
 * the line encoder or the library alone ("lines", "library"): for the tests
 * that check it against zlib, and the benchmarks. */
static PyObject *compress_member(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"data", "encoder", NULL};
    Py_buffer view;
    const char *which = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|s:_compress_member", kwlist, &view, &which))
        return NULL;
    int enc = encoder_arg("_compress_member", which);
    if (enc < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    size_t n = (size_t)view.len, cap = dft_compress_bound(n), len = 0;
    dft_compressor *c = dft_compressor_new();
    char *out = malloc(cap);
    if (c && out) {
        Py_BEGIN_ALLOW_THREADS
        len = dft_compress_member_with(c, view.buf, n, out, cap, (dft_encoder)enc);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    dft_compressor_free(c);
    PyObject *r = NULL;
    if (!c || !out)
        PyErr_NoMemory();
    else if (!len)
        PyErr_SetString(PyExc_RuntimeError, "_compress_member: compression failed");
    else
        r = PyBytes_FromStringAndSize(out, (Py_ssize_t)len);
    free(out);
    return r;
}

/* _bench_writer(n, names, durations_us, input_sizes, compress=True, args=True,
 * encoder="auto") -> dict: the writer's format + compress work on n events
 * drawn from the op mix (benchmarks/core/op_mix.py), timed alone on this
 * thread (GIL released); encoder as for _compress_member. */
static PyObject *bench_writer(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"n", "names", "durations_us", "input_sizes", "compress", "args",
                             "encoder", NULL};
    long long n;
    PyObject *names_in, *durs_in, *sizes_in;
    int compress = 1, with_args = 1;
    const char *encoder = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LOOO|pps:_bench_writer", kwlist, &n, &names_in,
                                     &durs_in, &sizes_in, &compress, &with_args, &encoder))
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "_bench_writer: n must be positive");
        return NULL;
    }
    int enc = encoder_arg("_bench_writer", encoder);
    if (enc < 0)
        return NULL;
    if (compress)
        compress = 1 + enc;
    PyObject *names = PySequence_Tuple(names_in); /* kept: the UTF-8 stays valid */
    PyObject *durs = names ? PySequence_Tuple(durs_in) : NULL;
    PyObject *sizes = durs ? PySequence_Tuple(sizes_in) : NULL;
    const char **name_ptrs = NULL;
    size_t *name_lens = NULL;
    int64_t *dur_vals = NULL, *size_vals = NULL;
    PyObject *ret = NULL;
    if (!sizes)
        goto done;
    Py_ssize_t nn = PyTuple_GET_SIZE(names);
    if (nn == 0 || PyTuple_GET_SIZE(durs) == 0 || PyTuple_GET_SIZE(sizes) == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "_bench_writer: names, durations_us and input_sizes must not be empty");
        goto done;
    }
    name_ptrs = PyMem_Malloc((size_t)nn * sizeof *name_ptrs);
    name_lens = PyMem_Malloc((size_t)nn * sizeof *name_lens);
    if (!name_ptrs || !name_lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *s = PyTuple_GET_ITEM(names, i);
        Py_ssize_t len;
        if (!PyUnicode_Check(s)) {
            PyErr_SetString(PyExc_TypeError, "_bench_writer: names must be strs");
            goto done;
        }
        if (!(name_ptrs[i] = PyUnicode_AsUTF8AndSize(s, &len)))
            goto done;
        name_lens[i] = (size_t)len;
    }
    if (!(dur_vals = int64_items(durs, "durations_us")) ||
        !(size_vals = int64_items(sizes, "input_sizes")))
        goto done;
    dft_op_mix mix = {.names = name_ptrs, .name_lens = name_lens, .nnames = (size_t)nn,
                      .durations_us = dur_vals, .ndurations = (size_t)PyTuple_GET_SIZE(durs),
                      .input_sizes = size_vals, .ninput_sizes = (size_t)PyTuple_GET_SIZE(sizes)};
    dft_writer_bench_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_writer_bench(&mix, (uint64_t)n, compress, with_args, &r);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_NoMemory();
        goto done;
    }
    ret = Py_BuildValue("{sKsKsKsdsd}", "events", (unsigned long long)r.events, "json_bytes",
                        (unsigned long long)r.json_bytes, "gz_bytes",
                        (unsigned long long)r.gz_bytes, "format_s", r.format_s, "compress_s",
                        r.compress_s);
done:
    PyMem_Free(name_ptrs);
    PyMem_Free(name_lens);
    PyMem_Free(dur_vals);
    PyMem_Free(size_vals);
    Py_XDECREF(names);
    Py_XDECREF(durs);
    Py_XDECREF(sizes);
    return ret;
}

/* _inflight_begin(name, cat, ts, group, seq, bucket) -> token: a collective
 * in flight from this thread (core/inflight.c).  GIL held. */
static PyObject *inflight_begin(PyObject *m, PyObject *args)
{
    (void)m;
    const char *name, *cat, *group;
    Py_ssize_t nl, cl, gl;
    long long ts, seq, bucket;
    if (!PyArg_ParseTuple(args, "s#s#Ls#LL:_inflight_begin", &name, &nl, &cat, &cl, &ts, &group,
                          &gl, &seq, &bucket))
        return NULL;
    dft_open_desc d = {.name = name, .name_len = (size_t)nl, .cat = cat, .cat_len = (size_t)cl,
                       .group = group, .group_len = (size_t)gl, .ts = ts, .seq = seq};
    return PyLong_FromLongLong(dft_inflight_begin(&d, bucket));
}

/* _inflight_end(token): ends it, from any thread.  GIL held. */
static PyObject *inflight_end(PyObject *m, PyObject *arg)
{
    (void)m;
    long long tok = PyLong_AsLongLong(arg);
    if (tok == -1 && PyErr_Occurred())
        return NULL;
    dft_inflight_end(tok);
    Py_RETURN_NONE;
}

/* _inflight_missed() -> int.  GIL held. */
static PyObject *inflight_missed(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(dft_inflight_missed());
}

/* _sample_step_for_test() -> (place, us): what the stack sampler counted
 * since the last call (hang/sampler.c's dft_sample_take), then the calling
 * thread is the step thread and the sampler runs (started the first time in
 * this process), as at a training step's boundary under `dftracer run`,
 * without torch.  GIL held. */
static PyObject *sample_step_for_test(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    dft_sample_step out;
    dft_sample_take(dft_clock_us(), &out);
    dft_sample_step_thread();
    return Py_BuildValue("(sL)", out.place, (long long)out.place_us);
}

static PyMethodDef testcore_methods[] = {
    {"_sample_step_for_test", sample_step_for_test, METH_NOARGS,
     "_sample_step_for_test() -> (place, us): a step boundary for the stack sampler."},
    {"_inflight_begin", inflight_begin, METH_VARARGS,
     "_inflight_begin(name, cat, ts, group, seq, bucket) -> int: a collective in flight."},
    {"_inflight_end", inflight_end, METH_O, "_inflight_end(token): no longer in flight."},
    {"_inflight_missed", inflight_missed, METH_NOARGS,
     "_inflight_missed() -> int: collectives not kept (the table was full)."},
    {"_json_string", json_string, METH_O, "The JSON string dftracer writes for bytes."},
    {"_hash64", hash64, METH_O, "XXH64 (seed 0) of a bytes-like object."},
    {"_config_for_test", config_for_test, METH_NOARGS,
     "_config_for_test() -> {log_level, flush_interval} as the core reads the environment."},
    {"_clock_read_cost", clock_read_cost, METH_O,
     "_clock_read_cost(n): ns per tracer-clock read, averaged over n reads."},
    {"_clock_skew_for_test", clock_skew, METH_O,
     "Moves the fitted TSC clock by ns; False when there is none."},
    {"_handoff_delay_for_test", handoff_delay, METH_O,
     "_handoff_delay_for_test(delay_us): widens the hand-off window."},
    {"_reclaim_delay_for_test", reclaim_delay, METH_O,
     "_reclaim_delay_for_test(delay_us): widens the window of reopening a closed trace file."},
    {"_bench_writer", (PyCFunction)(void (*)(void))bench_writer, METH_VARARGS | METH_KEYWORDS,
     "_bench_writer(n, names, durations_us, input_sizes, compress=True, args=True, "
     "encoder='auto') -> dict: format + compress of n events of the op mix, timed."},
    {"_compress_member", (PyCFunction)(void (*)(void))compress_member,
     METH_VARARGS | METH_KEYWORDS,
     "_compress_member(data, encoder='auto') -> bytes: one gzip member, as the writer makes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef testcore_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_dftracer_testcore",
    .m_doc = "dftracer._core built with its test and benchmark hooks (tests and benchmarks only).",
    .m_size = -1,
    .m_methods = testcore_methods,
};

PyMODINIT_FUNC PyInit__dftracer_testcore(void)
{
    PyObject *m = dft_core_module_create(&testcore_module);
    if (m && (dft_testing_cupti_register(m) < 0 || dft_testing_torch_register(m) < 0 ||
              dft_testing_walk_register(m) < 0))
        Py_CLEAR(m);
    return m;
}
