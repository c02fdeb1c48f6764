/* torch/autotrace_comm.c: the collectives of _core._AtCall (autotrace_calls.h):
 * torch.distributed's collectives (`bytes`, `group`, `group_size`, `seq`,
 * `async`), send/recv/isend/irecv (`peer`, `p2p_seq` for `seq`) and the
 * functional collectives (the issue: `async` 1).  Groups are looked up in
 * Python once (comm.group_info) and kept here by identity; the default
 * group's until _at_calls_reset() (destroy_process_group).  A collective
 * made while another one runs on the thread (all_gather inside
 * all_gather_object) is not an event.  A collective's `seq` comes from its
 * group's counter, shared with DDP's buckets (torch/comm_seq.c).  One
 * called with async_op=True stays in flight (core/inflight.c) until its
 * Work's future completes: a _CommLanded (C) on that future ends it.
 * Everything needs the GIL, but _CommLanded runs where the future
 * completes (gloo's worker thread, taking the GIL). */
#include "torch/autotrace_comm.h"

#include "core/clock.h"
#include "torch/comm_seq.h"

/* The Python objects _AtCall's calls look up once (autotrace_calls.h),
 * defined here, in the half that only reads them: autotrace_calls.c fills
 * them and calls down into this file, which calls nothing back. */
dft_at_calls_ctx dft_at_calls;

static PyObject *nbytes_name, *get_future_name, *add_done_name;

/* ---- an async collective's completion ------------------------------------ */

/* _CommLanded(future): the Work's future completed; its collective is no
 * longer in flight. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int64_t token;
} CommLanded;

static PyObject *landed_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    (void)args;
    (void)nargsf;
    (void)kwnames;
    CommLanded *l = (CommLanded *)self;
    dft_inflight_end(l->token);
    l->token = 0;
    Py_RETURN_NONE;
}

static void landed_dealloc(PyObject *self)
{
    dft_inflight_end(((CommLanded *)self)->token); /* dropped uncalled */
    PyObject_Free(self);
}

static PyTypeObject CommLandedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._CommLanded",
    .tp_basicsize = sizeof(CommLanded),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "the completion of an async collective: no longer in flight",
    .tp_vectorcall_offset = offsetof(CommLanded, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = landed_dealloc,
};

int dft_at_comm_init(void)
{
    if (PyType_Ready(&CommLandedType) < 0)
        return -1;
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {{&nbytes_name, "nbytes"}, {&get_future_name, "get_future"},
                 {&add_done_name, "add_done_callback"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!*names[i].slot && !(*names[i].slot = PyUnicode_InternFromString(names[i].s)))
            return -1;
    return 0;
}

/* Marks the collective whose Work is `work` in flight until the work's
 * future completes.  A work without a future (a backend that has none) is
 * not marked; never raises. */
static void track_work(AtCall *w, const char *group, size_t group_len, int64_t seq,
                       int64_t start, PyObject *work)
{
    dft_open_desc d = {.name = w->name_utf8, .name_len = (size_t)w->name_len, .cat = "comm",
                       .cat_len = 4, .ts = start, .group = group, .group_len = group_len,
                       .seq = seq};
    int64_t tok = dft_inflight_begin(&d, -1);
    if (!tok)
        return;
    CommLanded *l = PyObject_New(CommLanded, &CommLandedType);
    if (!l) {
        dft_inflight_end(tok);
        PyErr_Clear();
        return;
    }
    l->vectorcall = landed_vectorcall;
    l->token = tok; /* ended by the call, or when dropped uncalled */
    PyObject *fut = PyObject_CallMethodNoArgs(work, get_future_name);
    PyObject *r = fut ? PyObject_CallMethodOneArg(fut, add_done_name, (PyObject *)l) : NULL;
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(fut);
    Py_DECREF(l);
}

/* The original, called as the wrapper was; `in_comm` counts it. */
PyObject *dft_at_call_original(AtCall *w, dft_at_thread *t, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    t->in_comm++;
    PyObject *r = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    t->in_comm--;
    return r;
}

/* Bytes of a tensor, or of the tensors of a list or tuple; 0 otherwise.
 * -1 with an exception set. */
static int64_t nbytes_of(PyObject *v)
{
    if (PyObject_TypeCheck(v, (PyTypeObject *)dft_at_calls.tensor_type)) {
        PyObject *b = PyObject_GetAttr(v, nbytes_name);
        if (!b)
            return -1;
        long long r = PyLong_AsLongLong(b);
        Py_DECREF(b);
        return r == -1 && PyErr_Occurred() ? -1 : r;
    }
    if (!PyList_Check(v) && !PyTuple_Check(v))
        return 0;
    int64_t sum = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(v, i);
        if (!PyObject_TypeCheck(t, (PyTypeObject *)dft_at_calls.tensor_type))
            continue;
        int64_t b = nbytes_of(t);
        if (b < 0)
            return -1;
        sum += b;
    }
    return sum;
}

/* The next number of key in the dict seq (0 first).  0, or -1 with an exception. */
int dft_at_next_seq(PyObject *seq, PyObject *key, int64_t *out)
{
    PyObject *cur = PyDict_GetItemWithError(seq, key); /* borrowed */
    if (!cur && PyErr_Occurred())
        return -1;
    long long n = cur ? PyLong_AsLongLong(cur) : 0;
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *next = PyLong_FromLongLong(n + 1);
    if (!next)
        return -1;
    int rc = PyDict_SetItem(seq, key, next);
    Py_DECREF(next);
    *out = n;
    return rc;
}

/* ---- groups ------------------------------------------------------------- */

/* (pg, name, size) of a group argument (None: the default group), a new
 * reference; Py_None (new) where nothing is traced (no group yet); NULL
 * with an exception set. */
static PyObject *group_of(PyObject *group)
{
    if (group == Py_None && dft_at_calls.default_info)
        return Py_NewRef(dft_at_calls.default_info);
    PyObject *key = NULL;
    if (group != Py_None) {
        if (!(key = PyLong_FromVoidPtr(group)))
            return NULL;
        PyObject *hit = PyDict_GetItemWithError(dft_at_calls.groups, key); /* borrowed */
        if (hit && PyTuple_GET_ITEM(hit, 0) == group) {
            Py_DECREF(key);
            return Py_NewRef(hit);
        }
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
    }
    PyObject *info = PyObject_CallOneArg(dft_at_calls.group_info, group);
    if (info && info != Py_None) {
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(info, 1)) ||
            !PyLong_Check(PyTuple_GET_ITEM(info, 2))) {
            PyErr_SetString(PyExc_TypeError, "group_info must return (pg, name, size)");
            Py_CLEAR(info);
        } else if (key) {
            if (PyDict_SetItem(dft_at_calls.groups, key, info) < 0)
                Py_CLEAR(info);
        } else {
            dft_at_calls.default_info = Py_NewRef(info);
        }
    }
    Py_XDECREF(key);
    return info;
}

/* ---- one call ----------------------------------------------------------- */

/* What a comm event says, read before the call. */
typedef struct {
    PyObject *info;     /* (pg, name, size): a new reference */
    const char *group;
    Py_ssize_t group_len;
    int64_t size, bytes, seq, peer;
    int async;
} comm_what;

/* Reads a comm call before it runs: 1 traced, 0 not (a rank outside the
 * group, no group yet), -1 with an exception set. */
static int describe_comm(AtCall *w, comm_what *c, PyObject *const *args, Py_ssize_t n,
                         PyObject *kwnames)
{
    PyObject *group = arg_of(&w->group, args, n, kwnames);
    if (w->kind == CALL_FUNCOL) {
        if (dft_at_calls.pg_type == Py_None || !PyObject_TypeCheck(group, (PyTypeObject *)dft_at_calls.pg_type)) {
            PyObject *tag = w->tag.name ? arg_of(&w->tag, args, n, kwnames) : Py_None;
            PyObject *pg = PyObject_CallFunctionObjArgs(w->resolve, group, tag, NULL);
            if (!pg)
                return -1;
            c->info = pg == Py_None ? Py_NewRef(Py_None) : group_of(pg);
            Py_DECREF(pg);
        } else {
            c->info = group_of(group);
        }
    } else {
        c->info = group_of(group);
    }
    if (!c->info)
        return -1;
    if (c->info == Py_None)
        return 0;
    c->size = PyLong_AsLongLong(PyTuple_GET_ITEM(c->info, 2));
    if (c->size == -1 && PyErr_Occurred())
        return -1;
    if (c->size == 0)
        return 0; /* this rank is not in the group */
    c->group = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(c->info, 1), &c->group_len);
    if (!c->group)
        return -1;
    c->bytes = w->data.name ? nbytes_of(arg_of(&w->data, args, n, kwnames)) : 0;
    if (c->bytes < 0)
        return -1;
    c->async = w->kind == CALL_FUNCOL || w->is_async;
    c->seq = -1;
    c->peer = -1;
    if (w->kind == CALL_P2P) {
        PyObject *peer = arg_of(&w->peer, args, n, kwnames);
        PyObject *local = arg_of(&w->group_peer, args, n, kwnames);
        PyObject *g = NULL; /* the peer's global rank, if given */
        if (peer != Py_None)
            g = Py_NewRef(peer);
        else if (local != Py_None &&
                 !(g = PyObject_CallFunctionObjArgs(dft_at_calls.global_rank, PyTuple_GET_ITEM(c->info, 0),
                                                    local, NULL)))
            return -1;
        if (g) {
            c->peer = PyLong_AsLongLong(g);
            Py_DECREF(g);
            if (c->peer == -1 && PyErr_Occurred())
                return -1;
        }
        return 1;
    }
    if (w->kind == CALL_COLLECTIVE && w->async_op.name) {
        int a = PyObject_IsTrue(arg_of(&w->async_op, args, n, kwnames));
        if (a < 0)
            return -1;
        c->async = a;
    }
    dft_comm_seq *counter = dft_comm_seq_of(c->group, (size_t)c->group_len);
    if (!counter) {
        PyErr_NoMemory();
        return -1;
    }
    c->seq = dft_comm_seq_next(counter);
    return 1;
}

/* The p2p_seq of a finished send or receive (counted per group and
 * direction).  0, or -1 with an exception set. */
static int p2p_seq(AtCall *w, comm_what *c, PyObject *result, int64_t *out)
{
    if (c->peer < 0 && !w->sends && PyLong_Check(result)) {
        c->peer = PyLong_AsLongLong(result); /* recv from any source: the sender */
        if (c->peer == -1 && PyErr_Occurred())
            return -1;
    }
    PyObject *me = PyObject_CallNoArgs(dft_at_calls.get_rank);
    if (!me)
        return -1;
    PyObject *peer = PyLong_FromLongLong(c->peer);
    PyObject *key = peer ? (w->sends ? PyTuple_Pack(3, PyTuple_GET_ITEM(c->info, 1), me, peer)
                                     : PyTuple_Pack(3, PyTuple_GET_ITEM(c->info, 1), peer, me))
                         : NULL;
    Py_DECREF(me);
    Py_XDECREF(peer);
    if (!key)
        return -1;
    int rc = dft_at_next_seq(dft_at_calls.seq, key, out);
    Py_DECREF(key);
    return rc;
}

PyObject *dft_at_comm_call(AtCall *w, dft_at_thread *t, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames)
{
    comm_what c = {0};
    int traced = describe_comm(w, &c, args, PyVectorcall_NARGS(nargsf), kwnames);
    if (traced <= 0) {
        Py_XDECREF(c.info);
        if (traced < 0)
            dft_at_fail(w->part);
        return dft_at_call_original(w, t, args, nargsf, kwnames);
    }
    int64_t start = dft_clock_us();
    int64_t tok = 0;
    if (dft_trace_active()) {
        dft_open_desc d = {.name = w->name_utf8, .name_len = (size_t)w->name_len, .cat = "comm",
                           .cat_len = 4, .ts = start, .group = c.group,
                           .group_len = (size_t)c.group_len, .seq = c.seq};
        tok = dft_open_begin(&d);
    }
    PyObject *r = dft_at_call_original(w, t, args, nargsf, kwnames);
    int64_t end = dft_clock_us();
    dft_at_span_close(&tok);
    if (r && c.async && w->kind == CALL_COLLECTIVE && r != Py_None && dft_trace_active())
        track_work(w, c.group, (size_t)c.group_len, c.seq, start, r);
    if (r) {
        dft_arg a[6];
        unsigned na = 0;
        a[na++] = (dft_arg){.key = "bytes", .key_len = 5, .type = DFT_ARG_INT, .v.i = c.bytes};
        a[na++] = (dft_arg){.key = "group_size", .key_len = 10, .type = DFT_ARG_INT, .v.i = c.size};
        if (w->kind == CALL_P2P) {
            int64_t ps;
            if (p2p_seq(w, &c, r, &ps) < 0) {
                dft_at_fail(w->part);
                Py_DECREF(c.info);
                return r;
            }
            a[na++] = (dft_arg){.key = "peer", .key_len = 4, .type = DFT_ARG_INT, .v.i = c.peer};
            a[na++] = (dft_arg){.key = "p2p_seq", .key_len = 7, .type = DFT_ARG_INT, .v.i = ps};
        } else {
            a[na++] = (dft_arg){.key = "seq", .key_len = 3, .type = DFT_ARG_INT, .v.i = c.seq};
        }
        if (c.async)
            a[na++] = (dft_arg){.key = "async", .key_len = 5, .type = DFT_ARG_INT, .v.i = 1};
        a[na++] = (dft_arg){.key = "group", .key_len = 5, .type = DFT_ARG_STR,
                            .v.s = {c.group, (size_t)c.group_len}};
        dft_at_emit_n(w->name_utf8, (size_t)w->name_len, DFT_AT_LIT("comm"), start, end, a, na);
    }
    Py_DECREF(c.info);
    return r;
}

