/* torch/autotrace_data.c: the per-event part of the DataLoader events
 * (dftracer/_autotrace/data.py installs them):
 *
 *   _AtNext(original): the DataLoader iterators' __next__; `fetch` in
 *     `dataloader` (the loop waiting for a batch) and the iteration's
 *     batch boundaries (autotrace_steps.c);
 *   _AtMapFetch(original): _MapDatasetFetcher.fetch: one `item` in `data`
 *     per sample (or per __getitems__ call), in the worker or, without
 *     workers, in the main process.  For a batch read one sample at a time,
 *     torch's own fetch runs, iterating a _TimedIndices that reads the clock
 *     as it hands out each index: its list comprehension calls __getitem__
 *     in the interpreter's own frame, which from C costs ~300 ns a sample
 *     more (a new interpreter entry each); the other cases (__getitems__, no
 *     auto-collation) run torch's code here, a clock read around the access;
 *   _AtIterFetch(original): _IterableDatasetFetcher.fetch likewise, a clock
 *     read around each next() on the dataset's iterator, `index` counting
 *     the samples that fetcher yielded (kept on it as `_dftracer_items`).
 *
 * Both bind like functions (set on a class, called with the instance first)
 * and forward the call untouched when their part is off.  A failure of ours
 * turns the part off (dft_at_fail); the program's exceptions pass through.
 * Everything needs the GIL. */
#include "torch/autotrace_steps.h"
#include "torch/parts.h"

#include <pthread.h>
#include <string.h>

#include "core/clock.h"
#include <structmember.h>

static struct {
    PyObject *note_worker; /* data._note_worker(): once per process */
    PyObject *epoch_done;  /* data._epoch_done(iterator) */
    PyObject *num_yielded, *num_workers, *epoch, *dataset, *auto_collation, *getitems,
        *collate_fn, *ended, *dataset_iter, *drop_last, *items, *batches;
} D;

static int worker_noted; /* reset in a forked child */

/* In the forked child, no GIL taken. */
static void forked_child(void) { worker_noted = 0; }

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original;
    int kind; /* DATA_NEXT, DATA_MAP, DATA_ITER */
} DataWrapper;

enum { DATA_NEXT, DATA_MAP, DATA_ITER };

/* An int attribute of obj; dflt when missing or not an int. */
static int64_t int_attr(PyObject *obj, PyObject *name, int64_t dflt, int *found)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    *found = 0;
    if (!v) {
        PyErr_Clear();
        return dflt;
    }
    int overflow;
    long long i = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
    if (PyLong_Check(v) && !overflow && !(i == -1 && PyErr_Occurred()))
        *found = 1;
    PyErr_Clear();
    Py_DECREF(v);
    return *found ? i : dflt;
}

/* ---- fetch: next() on a DataLoader iterator ------------------------------ */

/* data._epoch_done(it): its loader's next pass is the next epoch (ours: an
 * error of it is not the program's) */
static void epoch_done(PyObject *it)
{
    PyObject *r = D.epoch_done ? PyObject_CallOneArg(D.epoch_done, it) : NULL;
    Py_XDECREF(r);
    PyErr_Clear();
}

static PyObject *next_call(DataWrapper *w, PyObject *it)
{
    if (!dft_at_on[DFT_AT_DATALOADER])
        return PyObject_CallOneArg(w->original, it);
    int64_t start = dft_clock_us();
    dft_at_fetch_begin(start);
    int found;
    int64_t yielded = int_attr(it, D.num_yielded, -1, &found);
    int64_t tok = dft_at_span_open("fetch", "dataloader", start, yielded);
    PyObject *batch = PyObject_CallOneArg(w->original, it);
    dft_at_span_close(&tok);
    if (!batch) {
        if (dft_at_on[DFT_AT_DATALOADER] && PyErr_ExceptionMatches(PyExc_StopIteration)) {
            dft_at_loader_exhausted(start);
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            epoch_done(it);
            PyErr_Restore(type, value, tb);
        }
        return NULL;
    }
    int64_t end = dft_clock_us();
    int64_t n = int_attr(it, D.num_yielded, 0, &found);
    int64_t workers = int_attr(it, D.num_workers, 0, &found);
    int has_epoch;
    int64_t epoch = int_attr(it, D.epoch, 0, &has_epoch); /* its loader's pass */
    dft_arg a[3] = {{DFT_AT_KEY("batch"), .type = DFT_ARG_INT, .v.i = n - 1},
                    {DFT_AT_KEY("workers"), .type = DFT_ARG_INT, .v.i = workers},
                    {DFT_AT_KEY("epoch"), .type = DFT_ARG_INT, .v.i = epoch}};
    dft_at_emit("fetch", "dataloader", start, end, a, has_epoch ? 3 : 2);
    dft_at_fetch_end(start, end, has_epoch, epoch);
    /* the pass's last batch (len(loader), set at iter()) ends its epoch: a
     * trainer may stop there without exhausting the iterator (Lightning) */
    if (has_epoch && n > 0 && int_attr(it, D.batches, -1, &found) == n && found)
        epoch_done(it);
    return batch;
}

/* ---- item: one dataset access -------------------------------------------- */

/* {"index": operator.index(idx)}: 1 when idx is an integer. */
static int index_of(PyObject *idx, int64_t *out)
{
    if (!idx)
        return 0;
    if (PyLong_CheckExact(idx)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        *out = v;
        return 1;
    }
    if (!Py_TYPE(idx)->tp_as_number || !Py_TYPE(idx)->tp_as_number->nb_index)
        return 0;
    PyObject *i = PyNumber_Index(idx);
    if (!i) {
        PyErr_Clear();
        return 0;
    }
    int r = index_of(i, out);
    Py_DECREF(i);
    return r;
}

/* A batch's `item` events are held while its samples are read and written
 * together after it (at most ITEMS_HELD at a time, and before the fetcher
 * returns or raises): the event writing then runs in one burst, warm in the
 * instruction cache, not once between each two samples' dataset code, which
 * evicts it (benchmarks/torch/bench_autotrace_instructions.py).  Each
 * sample's times are taken when it is read. */
#define ITEMS_HELD 32
typedef struct { int64_t start, end, index; int has_index; } held_item;
typedef struct { int n; held_item at[ITEMS_HELD]; } held_items;

static void items_write(held_items *h)
{
    for (int i = 0; i < h->n; i++) {
        const held_item *it = &h->at[i];
        dft_arg a = {DFT_AT_KEY("index"), .type = DFT_ARG_INT, .v.i = it->index};
        dft_at_emit("item", "data", it->start, it->end, &a, it->has_index ? 1 : 0);
    }
    h->n = 0;
}

/* One sample read from start to end. */
static void item_held(held_items *h, int64_t start, int64_t end, int has_index, int64_t index)
{
    h->at[h->n] = (held_item){.start = start, .end = end, .index = index, .has_index = has_index};
    if (++h->n == ITEMS_HELD)
        items_write(h);
}

/* One sample read from start until now. */
static void item_done(held_items *h, int64_t start, int has_index, int64_t index)
{
    item_held(h, start, dft_clock_us(), has_index, index);
}

/* A sample being read is marked open (`item`, its index as the span's
 * number): the hang rule names the worker blocked in one (docs/hang.md). */
#define item_open(start, has, index) \
    dft_at_span_open("item", "data", start, (has) && (index) >= 0 ? (index) : -1)

/* dataset[idx] timed: a new reference, or NULL with the program's exception. */
static PyObject *timed_getitem(held_items *h, PyObject *dataset, PyObject *idx)
{
    int64_t index = 0;
    int has = index_of(idx, &index);
    int64_t start = dft_clock_us();
    int64_t tok = item_open(start, has, index);
    PyObject *v = PyObject_GetItem(dataset, idx);
    dft_at_span_close(&tok);
    if (v)
        item_done(h, start, has, index);
    return v;
}

/* _TimedIndices: a batch's indices as torch's own map fetch iterates them
 * ([self.dataset[idx] for idx in possibly_batched_index]).  Handing out an
 * index starts that sample; the next call ends it: its time is the
 * dataset access and the comprehension's own step (an append, tens of ns).
 * A sample that raises leaves no item: the comprehension never comes back. */
typedef struct {
    PyObject_HEAD
    PyObject *it;      /* the indices' iterator */
    int pending;       /* an index was handed out and its sample not ended */
    int in_data;       /* counted in the thread's in_data (until the samples end) */
    int has_index;
    int64_t index, start;
    int64_t tok; /* the pending sample's open span */
    held_items h;
} TimedIndices;

static PyTypeObject TimedIndicesType;

/* The samples are read: collate is not data loading (a module run there is
 * the model's), as in the other ways of reading a batch. */
static void samples_end(TimedIndices *s)
{
    if (s->in_data) {
        s->in_data = 0;
        dft_at_thread_get()->in_data--;
    }
}

static PyObject *timed_indices_next(PyObject *self)
{
    TimedIndices *s = (TimedIndices *)self;
    if (s->pending) {
        s->pending = 0;
        dft_at_span_close(&s->tok);
        item_held(&s->h, s->start, dft_clock_us(), s->has_index, s->index);
    }
    PyObject *idx = s->it ? Py_TYPE(s->it)->tp_iternext(s->it) : NULL;
    if (!idx) {
        items_write(&s->h); /* before collate, as torch's fetch goes on with it */
        samples_end(s);
        return NULL;        /* the end (no exception set), or the iterator's error */
    }
    s->has_index = index_of(idx, &s->index);
    s->pending = 1;
    s->start = dft_clock_us();
    s->tok = item_open(s->start, s->has_index, s->index);
    return idx;
}

static int timed_indices_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((TimedIndices *)self)->it);
    return 0;
}

static int timed_indices_clear(PyObject *self)
{
    Py_CLEAR(((TimedIndices *)self)->it);
    return 0;
}

static void timed_indices_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    timed_indices_clear(self);
    PyObject_GC_Del(self);
}

static PyTypeObject TimedIndicesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dftracer._core._TimedIndices",
    .tp_basicsize = sizeof(TimedIndices),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .tp_iter = PyObject_SelfIter, .tp_iternext = timed_indices_next,
    .tp_dealloc = timed_indices_dealloc, .tp_traverse = timed_indices_traverse,
    .tp_clear = timed_indices_clear,
    .tp_doc = "A batch's indices, timing each sample as torch's map fetch reads it.",
};

/* original(fetcher, _TimedIndices(indices)): torch's own fetch, collate
 * included; the items are written when the indices run out or, when the
 * fetch raises, here. */
static PyObject *map_fetch_timed(DataWrapper *w, PyObject *fetcher, PyObject *indices)
{
    PyObject *it = PyObject_GetIter(indices);
    if (!it)
        return NULL;
    TimedIndices *s = PyObject_GC_New(TimedIndices, &TimedIndicesType);
    if (!s) {
        Py_DECREF(it);
        return NULL;
    }
    s->it = it;
    s->pending = 0;
    s->tok = 0;
    s->h.n = 0;
    s->in_data = 1;
    dft_at_thread_get()->in_data++;
    PyObject_GC_Track(s);
    PyObject *args[2] = {fetcher, (PyObject *)s};
    PyObject *r = PyObject_Vectorcall(w->original, args, 2, NULL);
    items_write(&s->h); /* C only: a pending exception stays as it is */
    samples_end(s);
    dft_at_span_close(&s->tok); /* a sample that raised: its span ends with the fetch */
    s->pending = 0;     /* a traceback may keep it: nothing more is timed */
    Py_CLEAR(s->it);
    Py_DECREF(s);
    return r;
}

/* How torch's map fetch reads a batch: */
enum {
    MAP_FAILED = -1, /* an exception is set */
    MAP_WHOLE,       /* no auto-collation: dataset[indices] */
    MAP_GETITEMS,    /* dataset.__getitems__(indices), in *getitems */
    MAP_EACH         /* [dataset[idx] for idx in indices] */
};

static int map_way(PyObject *fetcher, PyObject *dataset, PyObject **getitems)
{
    *getitems = NULL;
    PyObject *ac = PyObject_GetAttr(fetcher, D.auto_collation);
    if (!ac)
        return MAP_FAILED;
    int auto_collation = PyObject_IsTrue(ac);
    Py_DECREF(ac);
    if (auto_collation <= 0)
        return auto_collation < 0 ? MAP_FAILED : MAP_WHOLE;
    /* hasattr() as torch's fetch does it: a missing attribute builds no
     * AttributeError (one a batch otherwise) */
#if PY_VERSION_HEX >= 0x030D0000
    int found = PyObject_GetOptionalAttr(dataset, D.getitems, getitems);
#else
    int found = _PyObject_LookupAttr(dataset, D.getitems, getitems);
#endif
    if (found <= 0)
        return found < 0 ? MAP_FAILED : MAP_EACH;
    int use = PyObject_IsTrue(*getitems);
    if (use <= 0)
        Py_CLEAR(*getitems);
    return use < 0 ? MAP_FAILED : use ? MAP_GETITEMS : MAP_EACH;
}

/* The data of a batch read whole (MAP_WHOLE, MAP_GETITEMS: torch's
 * _MapDatasetFetcher.fetch before collate), its item event in h. */
static PyObject *map_data(held_items *h, PyObject *dataset, PyObject *getitems, PyObject *indices)
{
    if (!getitems)
        return timed_getitem(h, dataset, indices);
    Py_ssize_t n = PyObject_Size(indices);
    if (n < 0)
        return NULL;
    int64_t index = 0;
    int has = 0;
    if (n) {
        PyObject *first = PySequence_GetItem(indices, 0);
        if (!first)
            return NULL;
        has = index_of(first, &index);
        Py_DECREF(first);
    }
    int64_t start = dft_clock_us();
    int64_t tok = item_open(start, has, index);
    PyObject *v = PyObject_CallOneArg(getitems, indices);
    dft_at_span_close(&tok);
    if (v)
        item_done(h, start, has, index);
    return v;
}

/* Once per process: which DataLoader worker this is (data._note_worker). */
static void note_worker(void)
{
    if (!worker_noted) {
        worker_noted = 1;
        PyObject *r = D.note_worker ? PyObject_CallNoArgs(D.note_worker) : NULL;
        Py_XDECREF(r);
        PyErr_Clear(); /* no id: readers count the process as a worker of its own */
    }
}

/* The result of the batch's data: collate_fn(data); steals data. */
static PyObject *collate(PyObject *fetcher, PyObject *data)
{
    PyObject *fn = PyObject_GetAttr(fetcher, D.collate_fn);
    PyObject *r = fn ? PyObject_CallOneArg(fn, data) : NULL;
    Py_XDECREF(fn);
    Py_DECREF(data);
    return r;
}

static PyObject *map_call(DataWrapper *w, PyObject *fetcher, PyObject *indices)
{
    note_worker();
    PyObject *dataset = PyObject_GetAttr(fetcher, D.dataset);
    if (!dataset)
        return NULL;
    PyObject *getitems;
    int way = map_way(fetcher, dataset, &getitems);
    PyObject *r = NULL;
    if (way == MAP_EACH) {
        r = map_fetch_timed(w, fetcher, indices);
    } else if (way != MAP_FAILED) {
        dft_at_thread *t = dft_at_thread_get();
        t->in_data++;
        held_items h;
        h.n = 0;
        r = map_data(&h, dataset, getitems, indices);
        items_write(&h); /* C only: a pending exception stays as it is */
        t->in_data--;
    }
    Py_XDECREF(getitems);
    Py_DECREF(dataset);
    r = r && way != MAP_EACH ? collate(fetcher, r) : r;
    dft_mem_batch(); /* a worker's step: docs/memory.md */
    return r;
}

/* next(it) timed, as torch's fetcher calls it: a new reference, or NULL
 * with the exception (StopIteration at the end).  *count: the samples the
 * fetcher yielded so far, the event's index (iter_call keeps it on the
 * fetcher once per batch). */
static PyObject *timed_next(held_items *h, PyObject *it, int64_t *count)
{
    if (!PyIter_Check(it))
        return PyErr_Format(PyExc_TypeError, "'%.200s' object is not an iterator",
                            Py_TYPE(it)->tp_name);
    int64_t start = dft_clock_us();
    int64_t tok = item_open(start, 1, *count);
    PyObject *v = Py_TYPE(it)->tp_iternext(it);
    dft_at_span_close(&tok);
    if (!v) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    item_done(h, start, 1, (*count)++);
    return v;
}

/* Keeps count (the samples the fetcher yielded so far) on the fetcher, also
 * after a batch that raised (a dataset's exception in a worker, which goes
 * on, loses no count); an exception pending stays as it was. */
static void keep_count(PyObject *fetcher, int64_t count)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *n = PyLong_FromLongLong(count);
    if (!n || PyObject_SetAttr(fetcher, D.items, n) < 0) {
        PyErr_Clear(); /* the count is ours: not the program's error */
        dft_at_fail(DFT_AT_DATALOADER);
    }
    Py_XDECREF(n);
    PyErr_Restore(type, value, tb);
}

/* The data of one batch (torch's _IterableDatasetFetcher.fetch before
 * collate); NULL with StopIteration once the dataset is done. */
static PyObject *iter_data(held_items *h, PyObject *fetcher, PyObject *it, PyObject *indices,
                           int64_t *count)
{
    PyObject *ac = PyObject_GetAttr(fetcher, D.auto_collation);
    int auto_collation = ac ? PyObject_IsTrue(ac) : -1;
    Py_XDECREF(ac);
    if (auto_collation <= 0)
        return auto_collation < 0 ? NULL : timed_next(h, it, count);
    PyObject *each = PyObject_GetIter(indices);
    PyObject *data = each ? PyList_New(0) : NULL;
    if (!data) {
        Py_XDECREF(each);
        return NULL;
    }
    PyObject *idx;
    while ((idx = PyIter_Next(each))) {
        Py_DECREF(idx);
        PyObject *v = timed_next(h, it, count);
        if (!v) {
            if (!PyErr_ExceptionMatches(PyExc_StopIteration) ||
                (PyErr_Clear(), PyObject_SetAttr(fetcher, D.ended, Py_True) < 0))
                goto fail;
            break;
        }
        int r = PyList_Append(data, v);
        Py_DECREF(v);
        if (r < 0)
            goto fail;
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(each);
    int stop = PyList_GET_SIZE(data) == 0;
    if (!stop) {
        PyObject *dl = PyObject_GetAttr(fetcher, D.drop_last);
        int drop = dl ? PyObject_IsTrue(dl) : -1;
        Py_XDECREF(dl);
        Py_ssize_t want = drop > 0 ? PyObject_Size(indices) : 0;
        if (drop < 0 || want < 0) {
            Py_DECREF(data);
            return NULL;
        }
        stop = drop && PyList_GET_SIZE(data) < want;
    }
    if (stop) {
        Py_DECREF(data);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    return data;
fail:
    Py_DECREF(each);
    Py_DECREF(data);
    return NULL;
}

static PyObject *iter_call(DataWrapper *w, PyObject *fetcher, PyObject *indices)
{
    note_worker();
    PyObject *ended = PyObject_GetAttr(fetcher, D.ended);
    int done = ended ? PyObject_IsTrue(ended) : -1;
    Py_XDECREF(ended);
    if (done) {
        if (done > 0)
            PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    PyObject *it = PyObject_GetAttr(fetcher, D.dataset_iter);
    if (!it)
        return NULL;
    int found;
    int64_t count = int_attr(fetcher, D.items, 0, &found), before = count;
    dft_at_thread *t = dft_at_thread_get();
    t->in_data++;
    held_items h;
    h.n = 0;
    PyObject *data = iter_data(&h, fetcher, it, indices, &count);
    items_write(&h); /* C only: a pending exception stays as it is */
    t->in_data--;
    if (count != before)
        keep_count(fetcher, count);
    Py_DECREF(it);
    (void)w;
    PyObject *r = data ? collate(fetcher, data) : NULL;
    dft_mem_batch(); /* a worker's step: docs/memory.md */
    return r;
}

static PyObject *data_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    DataWrapper *w = (DataWrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    Py_ssize_t want = w->kind == DATA_NEXT ? 1 : 2;
    if (n != want || (kwnames && PyTuple_GET_SIZE(kwnames)) || /* not ours to time */
        (w->kind != DATA_NEXT && !dft_at_on[DFT_AT_DATALOADER]))
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    switch (w->kind) {
    case DATA_NEXT:
        return next_call(w, args[0]);
    case DATA_MAP:
        return map_call(w, args[0], args[1]);
    default:
        return iter_call(w, args[0], args[1]);
    }
}

static PyObject *data_new(PyTypeObject *tp, PyObject *args, PyObject *kw, int kind)
{
    PyObject *original;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", tp->tp_name);
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, tp->tp_name, 1, 1, &original))
        return NULL;
    if (!PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError, "%s(original): original must be callable, not %s",
                            tp->tp_name, Py_TYPE(original)->tp_name);
    DataWrapper *w = (DataWrapper *)tp->tp_alloc(tp, 0);
    if (!w)
        return NULL;
    w->vectorcall = data_vectorcall;
    w->original = Py_NewRef(original);
    w->kind = kind;
    return (PyObject *)w;
}

static PyObject *next_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    return data_new(tp, args, kw, DATA_NEXT);
}

static PyObject *map_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    return data_new(tp, args, kw, DATA_MAP);
}

static PyObject *iter_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    return data_new(tp, args, kw, DATA_ITER);
}

static int data_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((DataWrapper *)self)->original);
    return 0;
}

static int data_clear(PyObject *self)
{
    Py_CLEAR(((DataWrapper *)self)->original);
    return 0;
}

static void data_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    data_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* Binds like a function: the instance becomes the first argument. */
static PyObject *data_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *data_get_name(PyObject *self, void *closure)
{
    (void)closure;
    return PyObject_GetAttrString(((DataWrapper *)self)->original, "__name__");
}

static PyMemberDef data_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(DataWrapper, original), READONLY, "what is wrapped"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef data_getset[] = {
    {"__name__", data_get_name, NULL, "the wrapped function's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define DATA_TYPE(NAME, NEW, DOC)                                                            \
    {                                                                                        \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = NAME, .tp_basicsize = sizeof(DataWrapper),   \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |    \
                    Py_TPFLAGS_METHOD_DESCRIPTOR,                                            \
        .tp_vectorcall_offset = offsetof(DataWrapper, vectorcall),                           \
        .tp_call = PyVectorcall_Call, .tp_descr_get = data_descr_get, .tp_new = NEW,         \
        .tp_dealloc = data_dealloc, .tp_traverse = data_traverse, .tp_clear = data_clear,    \
        .tp_members = data_members, .tp_getset = data_getset, .tp_doc = DOC,                 \
    }

static PyTypeObject NextType = DATA_TYPE(
    "dftracer._core._AtNext", next_new,
    "_AtNext(original): a DataLoader iterator's __next__ writing `fetch` events.");
static PyTypeObject MapFetchType = DATA_TYPE(
    "dftracer._core._AtMapFetch", map_new,
    "_AtMapFetch(original): _MapDatasetFetcher.fetch writing one `item` per sample.");
static PyTypeObject IterFetchType = DATA_TYPE(
    "dftracer._core._AtIterFetch", iter_new,
    "_AtIterFetch(original): _IterableDatasetFetcher.fetch writing one `item` per sample.");

/* _at_data_setup(note_worker, epoch_done). */
static PyObject *py_data_setup(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n != 2 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_at_data_setup(note_worker, epoch_done): callables");
        return NULL;
    }
    Py_XSETREF(D.note_worker, Py_NewRef(args[0]));
    Py_XSETREF(D.epoch_done, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_at_data_setup", (PyCFunction)(void (*)(void))py_data_setup, METH_FASTCALL,
     "_at_data_setup(note_worker, epoch_done)\n\nThe DataLoader hooks' Python callbacks."},
    {NULL, NULL, 0, NULL},
};

static int intern(PyObject **slot, const char *s)
{
    return *slot || (*slot = PyUnicode_InternFromString(s)) ? 0 : -1;
}

/* GIL held (PyInit__core). */
int dft_at_data_register(PyObject *module)
{
    static int atfork;
    if (!atfork) {
        if (pthread_atfork(NULL, NULL, forked_child) != 0) {
            PyErr_SetString(PyExc_OSError, "dftracer: pthread_atfork failed");
            return -1;
        }
        atfork = 1;
    }
    if (intern(&D.num_yielded, "_num_yielded") < 0 || intern(&D.num_workers, "_num_workers") < 0 ||
        intern(&D.epoch, "_dftracer_epoch") < 0 || intern(&D.dataset, "dataset") < 0 ||
        intern(&D.auto_collation, "auto_collation") < 0 ||
        intern(&D.getitems, "__getitems__") < 0 || intern(&D.collate_fn, "collate_fn") < 0 ||
        intern(&D.ended, "ended") < 0 || intern(&D.dataset_iter, "dataset_iter") < 0 ||
        intern(&D.drop_last, "drop_last") < 0 || intern(&D.items, "_dftracer_items") < 0 ||
        intern(&D.batches, "_dftracer_batches") < 0)
        return -1;
    if (PyType_Ready(&NextType) < 0 || PyType_Ready(&MapFetchType) < 0 ||
        PyType_Ready(&IterFetchType) < 0 || PyType_Ready(&TimedIndicesType) < 0)
        return -1;
    if (PyModule_AddFunctions(module, methods) < 0 ||
        PyModule_AddObjectRef(module, "_AtNext", (PyObject *)&NextType) < 0 ||
        PyModule_AddObjectRef(module, "_AtMapFetch", (PyObject *)&MapFetchType) < 0 ||
        PyModule_AddObjectRef(module, "_AtIterFetch", (PyObject *)&IterFetchType) < 0)
        return -1;
    return 0;
}
