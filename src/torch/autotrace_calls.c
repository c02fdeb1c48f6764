/* torch/autotrace_calls.c: _core._AtCall, a torch API function timed per
 * call in C (dftracer/_autotrace/comm.py, funcol.py, checkpoint.py set them
 * in place of the functions):
 *
 *   collective   torch.distributed's all_reduce, broadcast, ... (`bytes`,
 *                `group`, `group_size`, `seq`, `async`)
 *   p2p          send, recv, isend, irecv (`peer`, `p2p_seq` for `seq`)
 *   funcol       the functional collectives (the issue: `async` 1)
 *   save / load  torch.save, torch.load (`path`, `bytes`)
 *
 * What each call reads (the data argument, the group, async_op, the peer,
 * the file) was located by name and position when it was made
 * (inspect.signature, in Python); a call reads it from the vectorcall
 * arguments.  Groups are looked up in Python once (comm.group_info) and
 * kept here by identity; the default group's until _at_calls_reset()
 * (destroy_process_group).  A collective made while another one runs on
 * the thread (all_gather inside all_gather_object) is not an event.
 *
 * To torch.compile a wrapper is what torch.jit.script_if_tracing makes:
 * dynamo traces its `__original_fn` (so c10d collectives are still remapped
 * to functional ones in a graph); `__wrapped__`, `__name__`, `__doc__` and
 * pickling by name are the original function's, as functools.wraps gave.
 * A failure of ours turns the part off (dft_at_fail) and the call runs
 * once, untouched.  Everything needs the GIL. */
#include "integrations.h"
#include "torch/autotrace.h"

#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"

enum { CALL_COLLECTIVE, CALL_P2P, CALL_FUNCOL, CALL_SAVE, CALL_LOAD, CALL_NKINDS };

/* One parameter of the wrapped function: by position, else by keyword,
 * else its default. */
typedef struct {
    Py_ssize_t pos;   /* -1: keyword only */
    PyObject *name;   /* NULL: the function has no such parameter (None) */
    PyObject *dflt;
} arg_spec;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;     /* __dict__: functools.update_wrapper's attributes */
    PyObject *original;
    PyObject *name;     /* the event's name */
    const char *name_utf8;
    Py_ssize_t name_len;
    int kind;
    int part;           /* DFT_AT_COMM or DFT_AT_CHECKPOINT */
    int is_async;       /* p2p: isend/irecv */
    int sends;          /* p2p: send/isend */
    arg_spec data;      /* the tensor(s) whose bytes the event reports; save/load: the file */
    arg_spec group;
    arg_spec async_op;  /* collectives: async_op */
    arg_spec peer;      /* p2p: the global peer rank */
    arg_spec group_peer; /* p2p: the peer's rank in the group */
    arg_spec tag;       /* funcol: tag */
    PyObject *resolve;  /* funcol: resolve(group, tag) -> ProcessGroup or None */
} AtCall;

/* What the wrappers share (_at_calls_setup). */
static struct {
    PyObject *group_info;   /* comm.group_info(group) -> (pg, name, size) or None */
    PyObject *seq;          /* dict: group name or p2p key -> the next number */
    PyObject *tensor_type;  /* torch.Tensor */
    PyObject *pg_type;      /* ProcessGroup */
    PyObject *compiling;    /* torch.compiler.is_compiling */
    PyObject *get_rank;     /* c10d.get_rank */
    PyObject *global_rank;  /* c10d.get_global_rank(pg, group_rank) */
    PyObject *abspath;      /* os.path.abspath */
    PyObject *module_type;  /* torch.nn.Module */
    PyObject *loaded_module; /* modules.search_again(): a whole model was loaded */
    PyObject *default_info; /* the default group's info, once found */
    PyObject *groups;       /* dict: id(pg) -> info */
} C;

static PyObject *nbytes_name, *tell_name;

/* ---- reading a call's arguments ----------------------------------------- */

/* The argument s names (borrowed), None where the function has none. */
static PyObject *arg_of(const arg_spec *s, PyObject *const *args, Py_ssize_t n,
                        PyObject *kwnames)
{
    if (!s->name)
        return Py_None;
    if (s->pos >= 0 && s->pos < n)
        return args[s->pos];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            if (k == s->name || PyUnicode_Compare(k, s->name) == 0)
                return args[n + i];
        }
    }
    return s->dflt;
}

/* (pos, name or None, default) from _Arg.spec(). */
static int arg_spec_from(arg_spec *s, PyObject *spec, const char *what)
{
    if (spec == Py_None) {
        s->pos = -1;
        return 0;
    }
    PyObject *name, *dflt;
    Py_ssize_t pos;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "nOO", &pos, &name, &dflt)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "_AtCall: %s must be (pos, name, default) or None", what);
        return -1;
    }
    if (name != Py_None && !PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "_AtCall: the name of %s must be a str", what);
        return -1;
    }
    s->pos = pos;
    s->name = name == Py_None ? NULL : Py_NewRef(name);
    s->dflt = Py_NewRef(dflt);
    return 0;
}

static void arg_spec_clear(arg_spec *s)
{
    Py_CLEAR(s->name);
    Py_CLEAR(s->dflt);
}

/* Bytes of a tensor, or of the tensors of a list or tuple; 0 otherwise.
 * -1 with an exception set. */
static int64_t nbytes_of(PyObject *v)
{
    if (PyObject_TypeCheck(v, (PyTypeObject *)C.tensor_type)) {
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
        if (!PyObject_TypeCheck(t, (PyTypeObject *)C.tensor_type))
            continue;
        int64_t b = nbytes_of(t);
        if (b < 0)
            return -1;
        sum += b;
    }
    return sum;
}

/* The next number of key in C.seq (0 first).  0, or -1 with an exception. */
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
    if (group == Py_None && C.default_info)
        return Py_NewRef(C.default_info);
    PyObject *key = NULL;
    if (group != Py_None) {
        if (!(key = PyLong_FromVoidPtr(group)))
            return NULL;
        PyObject *hit = PyDict_GetItemWithError(C.groups, key); /* borrowed */
        if (hit && PyTuple_GET_ITEM(hit, 0) == group) {
            Py_DECREF(key);
            return Py_NewRef(hit);
        }
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
    }
    PyObject *info = PyObject_CallOneArg(C.group_info, group);
    if (info && info != Py_None) {
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(info, 1)) ||
            !PyLong_Check(PyTuple_GET_ITEM(info, 2))) {
            PyErr_SetString(PyExc_TypeError, "group_info must return (pg, name, size)");
            Py_CLEAR(info);
        } else if (key) {
            if (PyDict_SetItem(C.groups, key, info) < 0)
                Py_CLEAR(info);
        } else {
            C.default_info = Py_NewRef(info);
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

/* The original, called as the wrapper was; `in_comm` counts it. */
static PyObject *call_original(AtCall *w, dft_at_thread *t, PyObject *const *args,
                               size_t nargsf, PyObject *kwnames)
{
    t->in_comm++;
    PyObject *r = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    t->in_comm--;
    return r;
}

/* Reads a comm call before it runs: 1 traced, 0 not (a rank outside the
 * group, no group yet), -1 with an exception set. */
static int describe_comm(AtCall *w, comm_what *c, PyObject *const *args, Py_ssize_t n,
                         PyObject *kwnames)
{
    PyObject *group = arg_of(&w->group, args, n, kwnames);
    if (w->kind == CALL_FUNCOL) {
        if (C.pg_type == Py_None || !PyObject_TypeCheck(group, (PyTypeObject *)C.pg_type)) {
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
                 !(g = PyObject_CallFunctionObjArgs(C.global_rank, PyTuple_GET_ITEM(c->info, 0),
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
    if (dft_at_next_seq(C.seq, PyTuple_GET_ITEM(c->info, 1), &c->seq) < 0)
        return -1;
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
    PyObject *me = PyObject_CallNoArgs(C.get_rank);
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
    int rc = dft_at_next_seq(C.seq, key, out);
    Py_DECREF(key);
    return rc;
}

static PyObject *comm_call(AtCall *w, dft_at_thread *t, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames)
{
    comm_what c = {0};
    int traced = describe_comm(w, &c, args, PyVectorcall_NARGS(nargsf), kwnames);
    if (traced <= 0) {
        Py_XDECREF(c.info);
        if (traced < 0)
            dft_at_fail(w->part);
        return call_original(w, t, args, nargsf, kwnames);
    }
    int64_t start = dft_clock_us();
    int64_t tok = 0;
    if (dft_trace_active()) {
        dft_open_desc d = {.name = w->name_utf8, .name_len = (size_t)w->name_len, .cat = "comm",
                           .cat_len = 4, .ts = start, .group = c.group,
                           .group_len = (size_t)c.group_len, .seq = c.seq};
        tok = dft_open_begin(&d);
    }
    PyObject *r = call_original(w, t, args, nargsf, kwnames);
    int64_t end = dft_clock_us();
    dft_at_span_close(&tok);
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
        dft_at_emit(w->name_utf8, "comm", start, end, a, na);
    }
    Py_DECREF(c.info);
    return r;
}

/* ---- torch.save / torch.load --------------------------------------------- */

/* The absolute path of a path argument (a new str), Py_None (new) for a
 * file object, NULL with an exception set. */
static PyObject *path_of(PyObject *f)
{
    if (!PyUnicode_Check(f) && !PyBytes_Check(f) &&
        !PyObject_HasAttrString((PyObject *)Py_TYPE(f), "__fspath__"))
        return Py_NewRef(Py_None);
    PyObject *p = PyOS_FSPath(f);
    if (!p)
        return NULL;
    if (PyBytes_Check(p)) {
        PyObject *s = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p));
        Py_SETREF(p, s);
        if (!p)
            return NULL;
    }
    Py_SETREF(p, PyObject_CallOneArg(C.abspath, p));
    return p;
}

/* f.tell() as an int, or -1 where it has none (its errors are cleared, as
 * a file object that cannot tell only loses the event's `bytes`). */
static int64_t tell_of(PyObject *f)
{
    PyObject *pos = PyObject_CallMethodNoArgs(f, tell_name);
    if (!pos || !PyLong_Check(pos)) {
        Py_XDECREF(pos);
        PyErr_Clear();
        return -1;
    }
    long long v = PyLong_AsLongLong(pos);
    Py_DECREF(pos);
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();
    return v;
}

/* Size of the file at path (a str), or -1. */
static int64_t size_of(PyObject *path)
{
    PyObject *b = PyUnicode_EncodeFSDefault(path);
    if (!b) {
        PyErr_Clear();
        return -1;
    }
    struct stat st;
    int rc = stat(PyBytes_AS_STRING(b), &st);
    Py_DECREF(b);
    return rc == 0 ? (int64_t)st.st_size : -1;
}

static PyObject *checkpoint_call(AtCall *w, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    PyObject *f = arg_of(&w->data, args, PyVectorcall_NARGS(nargsf), kwnames);
    PyObject *path = path_of(f);
    if (!path) {
        dft_at_fail(w->part);
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    }
    int64_t before = path == Py_None ? tell_of(f) : -1;
    int64_t start = dft_clock_us();
    PyObject *r = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    int64_t end = dft_clock_us();
    if (r) {
        int64_t size = -1;
        if (path != Py_None) {
            size = size_of(path);
        } else if (before >= 0) {
            int64_t after = tell_of(f);
            size = after >= 0 ? after - before : -1;
        }
        dft_arg a[2];
        unsigned na = 0;
        if (size >= 0)
            a[na++] = (dft_arg){.key = "bytes", .key_len = 5, .type = DFT_ARG_INT, .v.i = size};
        Py_ssize_t plen = 0;
        const char *p = path != Py_None ? PyUnicode_AsUTF8AndSize(path, &plen) : NULL;
        if (p)
            a[na++] = (dft_arg){.key = "path", .key_len = 4, .type = DFT_ARG_STR,
                                .v.s = {p, (size_t)plen}};
        if (path != Py_None && !p) {
            dft_at_fail(w->part);
        } else {
            dft_at_emit(w->name_utf8, "checkpoint", start, end, a, na);
            if (PyObject_TypeCheck(r, (PyTypeObject *)C.module_type)) { /* time its forward */
                PyObject *s = PyObject_CallNoArgs(C.loaded_module);
                if (s)
                    Py_DECREF(s);
                else
                    dft_at_fail(w->part);
            }
        }
    }
    Py_DECREF(path);
    return r;
}

/* ---- the wrapper ---------------------------------------------------------- */

/* 1 while torch.compile or torch.export traces (the program's own Python
 * runs on fake tensors then: not an event); -1 with an exception. */
static int compiling(void)
{
    PyObject *r = PyObject_CallNoArgs(C.compiling);
    if (!r)
        return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

static PyObject *at_call_vc(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    AtCall *w = (AtCall *)self;
    dft_at_thread *t = dft_at_thread_get();
    if (!dft_at_on[w->part] || !C.compiling)
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    int skip = w->part == DFT_AT_COMM ? t->in_comm : t->in_data;
    if (!skip) {
        skip = compiling();
        if (skip < 0) {
            dft_at_fail(w->part);
            skip = 1;
        }
    }
    if (skip)
        return w->part == DFT_AT_COMM ? call_original(w, t, args, nargsf, kwnames)
                                      : PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    if (w->part == DFT_AT_CHECKPOINT)
        return checkpoint_call(w, args, nargsf, kwnames);
    return comm_call(w, t, args, nargsf, kwnames);
}

static const char *const kind_names[CALL_NKINDS] = {"collective", "p2p", "funcol", "save",
                                                    "load"};

/* _AtCall(original, name, kind, data, group=None, async_op=None, peer=None,
 *         group_peer=None, tag=None, resolve=None, is_async=False, sends=False) */
static PyObject *at_call_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"original", "name", "kind", "data", "group", "async_op", "peer",
                         "group_peer", "tag", "resolve", "is_async", "sends", NULL};
    PyObject *original, *name, *data, *group = Py_None, *async_op = Py_None, *peer = Py_None;
    PyObject *group_peer = Py_None, *tag = Py_None, *resolve = Py_None;
    const char *kind;
    int is_async = 0, sends = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUsO|OOOOOOpp:_AtCall", kw, &original, &name,
                                     &kind, &data, &group, &async_op, &peer, &group_peer, &tag,
                                     &resolve, &is_async, &sends))
        return NULL;
    if (!PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "_AtCall: original must be callable");
        return NULL;
    }
    int k = 0;
    while (k < CALL_NKINDS && strcmp(kind_names[k], kind) != 0)
        k++;
    if (k == CALL_NKINDS) {
        PyErr_Format(PyExc_ValueError,
                     "_AtCall: kind must be collective, p2p, funcol, save or load, not '%s'",
                     kind);
        return NULL;
    }
    if (k == CALL_FUNCOL && !PyCallable_Check(resolve)) {
        PyErr_SetString(PyExc_TypeError, "_AtCall: a funcol wrapper needs resolve(group, tag)");
        return NULL;
    }
    AtCall *w = (AtCall *)tp->tp_alloc(tp, 0);
    if (!w)
        return NULL;
    w->vectorcall = at_call_vc;
    w->original = Py_NewRef(original);
    w->name = Py_NewRef(name);
    w->kind = k;
    w->part = k >= CALL_SAVE ? DFT_AT_CHECKPOINT : DFT_AT_COMM;
    w->is_async = is_async;
    w->sends = sends;
    w->resolve = resolve == Py_None ? NULL : Py_NewRef(resolve);
    w->data.pos = w->group.pos = w->async_op.pos = w->peer.pos = w->group_peer.pos =
        w->tag.pos = -1;
    if (!(w->name_utf8 = PyUnicode_AsUTF8AndSize(name, &w->name_len)) ||
        arg_spec_from(&w->data, data, "data") < 0 || arg_spec_from(&w->group, group, "group") < 0 ||
        arg_spec_from(&w->async_op, async_op, "async_op") < 0 ||
        arg_spec_from(&w->peer, peer, "peer") < 0 ||
        arg_spec_from(&w->group_peer, group_peer, "group_peer") < 0 ||
        arg_spec_from(&w->tag, tag, "tag") < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

static int at_call_traverse(PyObject *self, visitproc visit, void *arg)
{
    AtCall *w = (AtCall *)self;
    Py_VISIT(w->dict);
    Py_VISIT(w->original);
    Py_VISIT(w->resolve);
    Py_VISIT(w->data.dflt);
    Py_VISIT(w->group.dflt);
    Py_VISIT(w->async_op.dflt);
    Py_VISIT(w->peer.dflt);
    Py_VISIT(w->group_peer.dflt);
    Py_VISIT(w->tag.dflt);
    return 0;
}

static int at_call_clear(PyObject *self)
{
    AtCall *w = (AtCall *)self;
    Py_CLEAR(w->dict);
    Py_CLEAR(w->original);
    Py_CLEAR(w->resolve);
    arg_spec_clear(&w->data);
    arg_spec_clear(&w->group);
    arg_spec_clear(&w->async_op);
    arg_spec_clear(&w->peer);
    arg_spec_clear(&w->group_peer);
    arg_spec_clear(&w->tag);
    return 0;
}

static void at_call_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    at_call_clear(self);
    Py_CLEAR(((AtCall *)self)->name);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *at_call_original(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(((AtCall *)self)->original);
}

static PyObject *at_call_true(PyObject *self, void *unused)
{
    (void)self;
    (void)unused;
    Py_RETURN_TRUE;
}

static PyObject *at_call_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<dftracer timing of %R>", ((AtCall *)self)->original);
}

/* Pickled by name, as the function it replaces is (its module holds the
 * wrapper under that name). */
static PyObject *at_call_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyGetSetDef at_call_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    /* what torch.jit.script_if_tracing makes: dynamo and torch.jit.script
     * look through it to __original_fn */
    {"__original_fn", at_call_original, NULL, "the function timed", NULL},
    {"__script_if_tracing_wrapper", at_call_true, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef at_call_methods[] = {
    {"__reduce__", at_call_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AtCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._AtCall",
    .tp_basicsize = sizeof(AtCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A torch function timed per call (dftracer/_autotrace: comm, checkpoint).",
    .tp_vectorcall_offset = offsetof(AtCall, vectorcall),
    .tp_dictoffset = offsetof(AtCall, dict),
    .tp_call = PyVectorcall_Call,
    .tp_new = at_call_new,
    .tp_traverse = at_call_traverse,
    .tp_clear = at_call_clear,
    .tp_dealloc = at_call_dealloc,
    .tp_repr = at_call_repr,
    .tp_getset = at_call_getset,
    .tp_methods = at_call_methods,
};

/* ---- set-up --------------------------------------------------------------- */

/* _at_calls_setup(group_info, seq, Tensor, ProcessGroup or None, is_compiling,
 *                 get_rank, get_global_rank, abspath, Module, loaded_module) */
static PyObject *py_calls_setup(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n != 10 || !PyDict_Check(args[1]) || !PyType_Check(args[2]) ||
        (!PyType_Check(args[3]) && args[3] != Py_None) || !PyType_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError,
                        "_at_calls_setup(group_info, seq: dict, Tensor, ProcessGroup, "
                        "is_compiling, get_rank, get_global_rank, abspath, Module, loaded_module)");
        return NULL;
    }
    PyObject *groups = PyDict_New();
    if (!groups)
        return NULL;
    PyObject **slots[] = {&C.group_info, &C.seq, &C.tensor_type, &C.pg_type, &C.compiling,
                          &C.get_rank, &C.global_rank, &C.abspath, &C.module_type,
                          &C.loaded_module};
    for (int i = 0; i < 10; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_CLEAR(C.default_info);
    Py_XSETREF(C.groups, groups);
    Py_RETURN_NONE;
}

/* _at_calls_reset(): forget the groups (destroy_process_group: a new default
 * group, or a new group at an old one's address, may follow). */
static PyObject *py_calls_reset(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Py_CLEAR(C.default_info);
    if (C.groups)
        PyDict_Clear(C.groups);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_at_calls_setup", (PyCFunction)(void (*)(void))py_calls_setup, METH_FASTCALL,
     "What the _AtCall wrappers share (dftracer/_autotrace/comm.py)."},
    {"_at_calls_reset", py_calls_reset, METH_NOARGS,
     "Forgets the process groups the _AtCall wrappers know."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core, through dft_at_hooks_register). */
int dft_at_calls_register(PyObject *module)
{
    if (PyType_Ready(&AtCallType) < 0)
        return -1;
    if ((!nbytes_name && !(nbytes_name = PyUnicode_InternFromString("nbytes"))) ||
        (!tell_name && !(tell_name = PyUnicode_InternFromString("tell"))))
        return -1;
    if (PyModule_AddFunctions(module, methods) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "_AtCall", (PyObject *)&AtCallType);
}
