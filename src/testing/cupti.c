/* testing/cupti.c: the test extension's entry points into GPU activity
 * tracing: a synthetic activity record through the same conversion and
 * emission as CUPTI's buffers (gpu/records.c, gpu/cupti.c), and the clock
 * offset measured against a fake GPU clock.  GIL held unless noted. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "gpu/cupti_tracer.h"
#include "testing/testing.h"

#ifdef DFT_HAVE_CUPTI

#define FIELD(rec, member, key)                                                                \
    do {                                                                                       \
        int64_t v_ = (int64_t)(rec).member;                                                    \
        if (dft_testing_dict_i64(fields, "fields", key, &v_) < 0)                               \
            return NULL;                                                                       \
        (rec).member = (__typeof__((rec).member))v_;                                           \
    } while (0)
/* A field whose key is the member's own name. */
#define F(rec, member) FIELD(rec, member, #member)
/* The fields every kind of record has. */
#define TIMES_AND_IDS(rec)                                                                      \
    do {                                                                                       \
        F(rec, start);                                                                         \
        F(rec, end);                                                                           \
        F(rec, contextId);                                                                     \
        F(rec, streamId);                                                                      \
        F(rec, correlationId);                                                                 \
    } while (0)

static const char *test_api_name_value;

static const char *test_api_name(CUpti_ActivityKind kind, uint32_t cbid)
{
    (void)kind;
    (void)cbid;
    return test_api_name_value;
}

/* _cupti_convert_test(kind, fields, offset_ns=0) -> bool: builds an activity
 * record of kind ("kernel", "memcpy", "memset", "sync", "runtime", "driver")
 * from fields (the record's member names; "name" a str for kernels and the
 * API call name for runtime/driver), converts and emits it as CUPTI's buffer
 * callback does.  Returns True when an event was recorded. */
static PyObject *cupti_convert_test(PyObject *m, PyObject *args, PyObject *kwargs)
{
    (void)m;
    static char *kwlist[] = {"kind", "fields", "offset_ns", NULL};
    const char *kind;
    PyObject *fields;
    long long offset_ns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO!|L:_cupti_convert_test", kwlist, &kind,
                                     &PyDict_Type, &fields, &offset_ns))
        return NULL;
    const char *name = NULL;
    PyObject *name_obj = PyDict_GetItemString(fields, "name");
    if (name_obj) {
        if (!PyUnicode_Check(name_obj))
            return PyErr_Format(PyExc_TypeError, "fields['name'] must be a str");
        name = PyUnicode_AsUTF8(name_obj);
        if (!name)
            return NULL;
    }
    union {
        CUpti_Activity base;
        dft_cupti_kernel k;
        dft_cupti_memcpy c;
        dft_cupti_memset s;
        dft_cupti_sync y;
        dft_cupti_api a;
    } rec;
    memset(&rec, 0, sizeof rec);
    dft_cupti_ctx ctx = {.offset_ns = offset_ns, .demangle = dft_cupti_demangler()};
    if (!strcmp(kind, "kernel")) {
        rec.k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        rec.k.name = name;
        TIMES_AND_IDS(rec.k);
        F(rec.k, deviceId);
        F(rec.k, gridX);
        F(rec.k, gridY);
        F(rec.k, gridZ);
        F(rec.k, blockX);
        F(rec.k, blockY);
        F(rec.k, blockZ);
        F(rec.k, registersPerThread);
        F(rec.k, staticSharedMemory);
        F(rec.k, dynamicSharedMemory);
    } else if (!strcmp(kind, "memcpy")) {
        rec.c.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        TIMES_AND_IDS(rec.c);
        F(rec.c, bytes);
        F(rec.c, copyKind);
        F(rec.c, srcKind);
        F(rec.c, dstKind);
        F(rec.c, deviceId);
    } else if (!strcmp(kind, "memset")) {
        rec.s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
        TIMES_AND_IDS(rec.s);
        F(rec.s, bytes);
        F(rec.s, value);
#ifdef DFT_CUPTI_MEMSET_HAS_MEMORY_KIND
        F(rec.s, memoryKind);
#endif
        F(rec.s, deviceId);
    } else if (!strcmp(kind, "sync")) {
        rec.y.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
        rec.y.streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
        rec.y.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
        TIMES_AND_IDS(rec.y);
        F(rec.y, type);
        F(rec.y, cudaEventId);
    } else if (!strcmp(kind, "runtime") || !strcmp(kind, "driver")) {
        rec.a.kind = kind[0] == 'r' ? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
        F(rec.a, start);
        F(rec.a, end);
        F(rec.a, cbid);
        F(rec.a, processId);
        F(rec.a, threadId);
        F(rec.a, correlationId);
        F(rec.a, returnValue);
        test_api_name_value = name;
        ctx.api_name = test_api_name;
    } else {
        return PyErr_Format(PyExc_ValueError,
                            "kind must be 'kernel', 'memcpy', 'memset', 'sync', 'runtime' or "
                            "'driver', not %R", PyTuple_GET_ITEM(args, 0));
    }
    int emitted;
    Py_BEGIN_ALLOW_THREADS
    emitted = dft_cupti_emit(&rec.base, &ctx);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(emitted);
}

static int fake_gpu_clock(uint64_t *ns, void *arg)
{
    *ns = (uint64_t)(dft_now_us() * 1000 - *(int64_t *)arg);
    return 1;
}

/* _cupti_calibrate_test(skew_ns) -> int: the offset measured against a fake
 * GPU clock running skew_ns behind the tracer clock. */
static PyObject *cupti_calibrate_test(PyObject *m, PyObject *arg)
{
    (void)m;
    long long skew = PyLong_AsLongLong(arg);
    if (skew == -1 && PyErr_Occurred())
        return NULL;
    int64_t s = skew;
    return PyLong_FromLongLong(dft_cupti_calibrate(fake_gpu_clock, &s));
}

static PyMethodDef cupti_test_methods[] = {
    {"_cupti_convert_test", (PyCFunction)(void (*)(void))cupti_convert_test,
     METH_VARARGS | METH_KEYWORDS, "Converts and emits a synthetic activity record."},
    {"_cupti_calibrate_test", cupti_calibrate_test, METH_O,
     "The clock offset measured against a fake GPU clock."},
    {NULL, NULL, 0, NULL},
};

int dft_testing_cupti_register(PyObject *module)
{
    return PyModule_AddFunctions(module, cupti_test_methods);
}

#else

/* Built without the CUPTI headers: nothing to convert. */
int dft_testing_cupti_register(PyObject *module)
{
    (void)module;
    return 0;
}

#endif /* DFT_HAVE_CUPTI */
