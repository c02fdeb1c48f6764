/* profile/loop.c: the iterator behind dft_fn.iter() and ai's .iter().
 *
 * For item N it writes "<name>.iter" (the time the underlying iterator took to
 * produce it) and, when the consumer asks for item N+1, "<name>.block" /
 * "<name>.yield" (the loop body), both with counter_key=N.  Each is a nesting
 * scope, so events logged by the iterator or the loop body nest under them.
 * All functions need the GIL. */
#include "profile/emit.h"
#include "profile/loop.h"

#include "core/clock.h"

typedef struct {
    PyObject_HEAD
    ProfileObject *p;
    PyObject *it;
    PyObject *iter_name;  /* str, or NULL: no .iter events */
    PyObject *block_name; /* str, or NULL: no .block events */
    PyObject *key;        /* the counter's arg name */
    int64_t count;        /* items produced so far */
    int block_open;
    int64_t block_t0;
    dft_scope_tok block_tok;
} LoopObject;

static PyTypeObject LoopType;

PyObject *dft_loop_new(ProfileObject *p, PyObject *iterable, PyObject *iter_name,
                       PyObject *block_name, PyObject *counter_key)
{
    PyObject *it = PyObject_GetIter(iterable);
    if (!it)
        return NULL;
    LoopObject *l = PyObject_GC_New(LoopObject, &LoopType);
    if (!l) {
        Py_DECREF(it);
        return NULL;
    }
    l->p = (ProfileObject *)Py_NewRef(p);
    l->it = it;
    l->iter_name = Py_XNewRef(iter_name);
    l->block_name = Py_XNewRef(block_name);
    l->key = Py_NewRef(counter_key);
    l->count = 0;
    l->block_open = 0;
    l->block_tok.ts = NULL;
    PyObject_GC_Track(l);
    return (PyObject *)l;
}

/* Writes the loop body's event of the previous item. */
static void close_block(LoopObject *l)
{
    if (!l->block_open)
        return;
    l->block_open = 0;
    dft_profile_emit(l->p, &l->block_tok, l->block_name, l->block_t0,
                     dft_clock_us() - l->block_t0, NULL, l->key, l->count, NULL);
    dft_scope_close(&l->block_tok);
}

static PyObject *loop_next(PyObject *self)
{
    LoopObject *l = (LoopObject *)self;
    close_block(l);
    if (!dft_profile_on(l->p)) {
        PyObject *item = PyIter_Next(l->it);
        if (item)
            l->count++;
        return item;
    }
    dft_scope_tok tok = {NULL, 0, 0};
    if (l->iter_name)
        dft_scope_open(&tok);
    int64_t t0 = dft_clock_us();
    PyObject *item = PyIter_Next(l->it);
    int64_t dur = dft_clock_us() - t0;
    if (item) {
        l->count++;
        if (l->iter_name)
            dft_profile_emit(l->p, &tok, l->iter_name, t0, dur, NULL, l->key, l->count, NULL);
    } else if (PyErr_Occurred() && l->iter_name) {
        dft_profile_emit_keep_error(l->p, &tok, l->iter_name, t0, dur, NULL, l->key, l->count + 1);
    }
    dft_scope_close(&tok);
    if (item && l->block_name) {
        l->block_open = 1;
        dft_scope_open(&l->block_tok);
        l->block_t0 = dft_clock_us();
    }
    return item;
}

static int loop_traverse(PyObject *self, visitproc visit, void *arg)
{
    LoopObject *l = (LoopObject *)self;
    Py_VISIT(l->p);
    Py_VISIT(l->it);
    return 0;
}

static int loop_clear(PyObject *self)
{
    LoopObject *l = (LoopObject *)self;
    Py_CLEAR(l->it);
    return 0;
}

static void loop_dealloc(PyObject *self)
{
    LoopObject *l = (LoopObject *)self;
    PyObject_GC_UnTrack(self);
    /* A loop left by break or an exception: its last body still counts. */
    if (l->block_open) {
        dft_exc_state es;
        dft_exc_save(&es);
        close_block(l);
        dft_exc_restore(&es);
    }
    loop_clear(self);
    Py_CLEAR(l->p);
    Py_CLEAR(l->iter_name);
    Py_CLEAR(l->block_name);
    Py_CLEAR(l->key);
    PyObject_GC_Del(self);
}

static PyObject *loop_get_count(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(((LoopObject *)self)->count);
}

static PyGetSetDef loop_getset[] = {
    {"count", loop_get_count, NULL, "Items produced so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core.traced_loop",
    .tp_basicsize = sizeof(LoopObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An iterator writing .iter/.block events around each item.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = loop_next,
    .tp_traverse = loop_traverse,
    .tp_clear = loop_clear,
    .tp_dealloc = loop_dealloc,
    .tp_getset = loop_getset,
};

int dft_loop_ready(void) { return PyType_Ready(&LoopType); }
