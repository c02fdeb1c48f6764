/* torch/dynamo_state.c: what the torch.compile graph timers (dynamo_timing.c)
 * and the PEP 523 frame hook (frame_hook.c) share: each thread's timer ring
 * and counters, and the Dynamo contexts (the args of one Dynamo instance).
 * Both sit on this file; neither calls the other.  GIL held unless noted. */
#include "torch/parts.h"
#include "format/grow.h"
#include "torch/dynamo_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "binding/pyargs.h"

/* ---- per-thread state -------------------------------------------------- */

/* Only a pointer is thread-local: the core's initial-exec TLS leaves little
 * static TLS room for the rest of the library. */
_Thread_local dft_dyn_thread_state *dft_dyn_tl_state;
static dft_dyn_thread_state tl_fallback = {.grad_enabled = -1}; /* when malloc fails */
static pthread_key_t tl_key; /* frees a thread's state when it exits */

dft_dyn_thread_state *dft_dyn_thread_slow(void)
{
    dft_dyn_thread_state *t = calloc(1, sizeof *t);
    if (!t || pthread_setspecific(tl_key, t) != 0) {
        free(t);
        return &tl_fallback;
    }
    t->grad_enabled = -1;
    return dft_dyn_tl_state = t;
}

dft_dyn_counters *dft_dyn_counters_get(void) { return &dft_dyn_thread()->counters; }

/* ---- contexts: the args of one Dynamo instance ------------------------- */

typedef struct {
    char *name;
    size_t name_len;
    char *image_size_str; /* image_size when it is not an int */
    size_t image_size_len;
    int64_t epoch, step, image_idx, image_size;
    unsigned has; /* CTX_* bits */
} dyn_context;

enum { CTX_NAME = 1, CTX_EPOCH = 2, CTX_STEP = 4, CTX_IMAGE_IDX = 8, CTX_IMAGE_SIZE = 16 };

static dyn_context *contexts;
static int32_t ncontexts;
static size_t contexts_cap;

int32_t dft_dyn_context_count(void) { return ncontexts; }

unsigned dft_dyn_context_args(int32_t ctx, dft_arg *out)
{
    if (ctx < 0 || ctx >= ncontexts)
        return 0;
    const dyn_context *c = &contexts[ctx];
    unsigned n = 0;
    if (c->has & CTX_NAME)
        out[n++] = (dft_arg){.key = "name", .key_len = 4, .type = DFT_ARG_STR,
                             .v.s = {c->name, c->name_len}};
    if (c->has & CTX_EPOCH)
        out[n++] = (dft_arg){.key = "epoch", .key_len = 5, .type = DFT_ARG_INT, .v.i = c->epoch};
    if (c->has & CTX_STEP)
        out[n++] = (dft_arg){.key = "step", .key_len = 4, .type = DFT_ARG_INT, .v.i = c->step};
    if (c->has & CTX_IMAGE_IDX)
        out[n++] = (dft_arg){.key = "image_idx", .key_len = 9, .type = DFT_ARG_INT,
                             .v.i = c->image_idx};
    if (c->has & CTX_IMAGE_SIZE) {
        if (c->image_size_str)
            out[n++] = (dft_arg){.key = "image_size", .key_len = 10, .type = DFT_ARG_STR,
                                 .v.s = {c->image_size_str, c->image_size_len}};
        else
            out[n++] = (dft_arg){.key = "image_size", .key_len = 10, .type = DFT_ARG_INT,
                                 .v.i = c->image_size};
    }
    return n;
}

char *dft_dyn_copy_utf8(PyObject *s, const char *argname, size_t *len)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", argname,
                     Py_TYPE(s)->tp_name);
        return NULL;
    }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u)
        return NULL;
    char *copy = malloc((size_t)n + 1);
    if (!copy) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, u, (size_t)n + 1);
    *len = (size_t)n;
    return copy;
}

/* An optional int field: None leaves the bit clear. */
static int set_int_field(PyObject *v, const char *argname, unsigned bit, int64_t *field,
                         unsigned *has)
{
    if (v == Py_None)
        return 0;
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %.100s", argname,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (dft_pyargs_int64(v, argname, field) < 0)
        return -1;
    *has |= bit;
    return 0;
}

static PyObject *dyn_context_new(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (ncontexts == INT32_MAX || DFT_GROW(contexts, (size_t)ncontexts, contexts_cap, 8) != 0)
        return PyErr_NoMemory();
    memset(&contexts[ncontexts], 0, sizeof *contexts);
    return PyLong_FromLong(ncontexts++);
}

/* _dyn_context_set(ctx, name, epoch, step, image_idx, image_size): replaces
 * the args of a context; None leaves an arg out. */
static PyObject *dyn_context_set(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_dyn_context_set() takes 6 arguments");
        return NULL;
    }
    long ctx = PyLong_AsLong(args[0]);
    if (ctx == -1 && PyErr_Occurred())
        return NULL;
    if (ctx < 0 || ctx >= ncontexts) {
        PyErr_Format(PyExc_ValueError, "ctx %ld is not a context id", ctx);
        return NULL;
    }
    dyn_context c = {0};
    if (args[1] != Py_None) {
        if (!(c.name = dft_dyn_copy_utf8(args[1], "name", &c.name_len)))
            return NULL;
        c.has |= CTX_NAME;
    }
    if (set_int_field(args[2], "epoch", CTX_EPOCH, &c.epoch, &c.has) < 0 ||
        set_int_field(args[3], "step", CTX_STEP, &c.step, &c.has) < 0 ||
        set_int_field(args[4], "image_idx", CTX_IMAGE_IDX, &c.image_idx, &c.has) < 0)
        goto fail;
    PyObject *size = args[5];
    if (size != Py_None) {
        if (PyLong_Check(size) && !PyBool_Check(size)) {
            if (set_int_field(size, "image_size", CTX_IMAGE_SIZE, &c.image_size, &c.has) < 0)
                goto fail;
        } else {
            /* (224, 224) and the like are written as their str() */
            PyObject *s = PyObject_Str(size);
            if (!s)
                goto fail;
            c.image_size_str = dft_dyn_copy_utf8(s, "image_size", &c.image_size_len);
            Py_DECREF(s);
            if (!c.image_size_str)
                goto fail;
            c.has |= CTX_IMAGE_SIZE;
        }
    }
    free(contexts[ctx].name);
    free(contexts[ctx].image_size_str);
    contexts[ctx] = c;
    Py_RETURN_NONE;
fail:
    free(c.name);
    free(c.image_size_str);
    return NULL;
}

static PyMethodDef state_methods[] = {
    {"_dyn_context_new", dyn_context_new, METH_NOARGS, "_dyn_context_new() -> ctx id"},
    {"_dyn_context_set", (PyCFunction)(void (*)(void))dyn_context_set, METH_FASTCALL,
     "_dyn_context_set(ctx, name, epoch, step, image_idx, image_size)"},
    {NULL, NULL, 0, NULL},
};

int dft_dynamo_state_register(PyObject *module)
{
    static int key_made;
    if (!key_made) {
        int e = pthread_key_create(&tl_key, free);
        if (e != 0) {
            errno = e;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        key_made = 1;
    }
    return PyModule_AddFunctions(module, state_methods);
}
