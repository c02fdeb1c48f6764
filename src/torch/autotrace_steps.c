/* torch/autotrace_steps.c: the shared state of the zero-code torch hooks in
 * C (torch/autotrace_steps.h) and the training iterations (`pipeline/iteration`
 * events), as dftracer/_autotrace/steps.py describes them: an iteration runs
 * from the end of one optimizer step to the end of the next (with several
 * optimizers, until all of one iteration's optimizers stepped), or, in a
 * process where no optimizer ever stepped, from one DataLoader next() to the
 * next; the first batch iteration is held back until a second one closes.
 * Everything needs the GIL (it guards the global iteration state) unless
 * noted. */
#include "torch/autotrace_steps.h"
#include "torch/parts.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "format/grow.h"
#include "hang/sampler.h"
#include "torch/windows.h"

int dft_at_on[DFT_AT_NPARTS];

/* ---- per-thread state --------------------------------------------------- */

/* Only a pointer is thread-local (the core's TLS leaves little room). */
_Thread_local dft_at_thread *dft_at_tl;
static dft_at_thread tl_fallback; /* when malloc fails */
static pthread_key_t tl_key;      /* frees a thread's state when it exits */

/* Any thread, no GIL needed. */
dft_at_thread *dft_at_thread_slow(void)
{
    dft_at_thread *t = calloc(1, sizeof *t);
    if (!t || pthread_setspecific(tl_key, t) != 0) {
        free(t);
        return dft_at_tl = &tl_fallback;
    }
    return dft_at_tl = t;
}

/* At thread exit, without the GIL (a forward still open then keeps its
 * module alive: no reference can be dropped here). */
static void thread_free(void *p)
{
    if (p != &tl_fallback)
        free(p);
}

/* ---- writing ------------------------------------------------------------ */

void dft_at_emit_n(const char *name, size_t name_len, const char *cat, size_t cat_len,
                   int64_t start, int64_t end, const dft_arg *args, unsigned nargs)
{
    if (!dft_trace_ready())
        return;
    dft_event ev = {.name = name, .name_len = name_len, .cat = cat, .cat_len = cat_len,
                    .ts = start, .dur = end > start ? end - start : 0, .ph = DFT_PH_COMPLETE,
                    .args = args, .nargs = nargs};
    dft_emit_logged(&ev);
}

int64_t dft_at_span_open_n(const char *name, size_t name_len, const char *cat, size_t cat_len,
                           int64_t ts, int64_t seq)
{
    if (!dft_trace_active())
        return 0;
    dft_open_desc d = {.name = name, .name_len = name_len, .cat = cat, .cat_len = cat_len,
                       .ts = ts, .seq = seq};
    return dft_open_begin(&d);
}

void dft_at_span_close(int64_t *tok)
{
    if (*tok) {
        dft_open_end(*tok);
        *tok = 0;
    }
}

const char *dft_at_type_name(PyTypeObject *tp)
{
    const char *n = tp->tp_name;
    if (tp->tp_flags & Py_TPFLAGS_HEAPTYPE)
        return n; /* __name__ itself */
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

static PyObject *fail_cb; /* _base.c_failed(part, exc) */

void dft_at_fail(int part)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (part >= 0 && part < DFT_AT_NPARTS)
        dft_at_on[part] = 0; /* off now, whatever the callback manages */
    if (!fail_cb || !type) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *r = PyObject_CallFunction(fail_cb, "iO", part, value ? value : Py_None);
    Py_XDECREF(r);
    PyErr_Clear(); /* the program never sees the tracer's failures */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* ---- the training thread's scheduling ---------------------------------- */

/* The kernel's per-thread scheduler counters (/proc/thread-self/schedstat:
 * time on a CPU and time runnable but waiting for one, ns), read at the
 * iteration boundaries so each iteration says how much of its wall time its
 * thread ran and how long it waited for a CPU (docs/trace-format.md): a rank
 * slowed by a busy machine waits, one given more work runs.  The counters
 * are read as a boundary's time is taken (dft_at_mark; each optimizer step's
 * end is kept, for a boundary found there late, while the optimizers of one
 * iteration are being learned), not when the step code gets to it: on a busy
 * machine the thread can wait for a CPU, or the writer flush, in between.
 * One pread of a
 * descriptor kept open for the thread that last asked (reopened when another
 * thread or a forked child asks); none where the file is missing.  The GIL. */
static struct {
    int fd;      /* -1: not open; -2: unavailable */
    long tid;
} sched = {-1, 0};

typedef struct { int64_t run_ns, wait_ns; int ok; } sched_sample;

static sched_sample sched_now(void)
{
    sched_sample out = {0, 0, 0};
    if (sched.fd == -2)
        return out;
    long tid = (long)syscall(SYS_gettid);
    if (sched.fd >= 0 && sched.tid != tid) {
        close(sched.fd);
        sched.fd = -1;
    }
    if (sched.fd < 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", tid);
        sched.fd = open(path, O_RDONLY | O_CLOEXEC);
        if (sched.fd < 0) {
            sched.fd = -2;
            return out;
        }
        sched.tid = tid;
    }
    char buf[96];
    ssize_t n = pread(sched.fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return out;
    buf[n] = 0;
    long long run = 0, wait = 0;
    struct timespec cpu;
    /* the kernel's run time lags by up to a tick for a running thread; its
     * thread CPU clock does not (the run-queue wait cannot be in progress
     * while the thread reads it) */
    if (sscanf(buf, "%lld %lld", &run, &wait) == 2 &&
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
        out.run_ns = (int64_t)cpu.tv_sec * 1000000000 + cpu.tv_nsec;
        out.wait_ns = wait;
        out.ok = 1;
    }
    return out;
}

/* ---- the iterations ----------------------------------------------------- */

enum { MODE_NONE, MODE_LOADER, MODE_OPTIM };

/* The counters at the time ts a hook took for a boundary that may follow. */
typedef struct { int64_t ts; sched_sample at; } sched_mark;

static struct {
    int64_t step;           /* number of the current iteration */
    int has_start;
    int64_t start;          /* its start, once something happened */
    int mode;
    int has_epoch;
    int64_t epoch;          /* epoch of the loader last fetched from */
    uintptr_t *stepped;     /* optimizers stepped in this iteration */
    size_t nstepped, cap;
    uintptr_t *cycle;       /* the optimizers of one iteration (a set) */
    size_t ncycle, cycle_cap;
    int has_cycle;
    int64_t last_end;       /* end of the last optimizer step */
    sched_mark mark;        /* the last dft_at_mark */
    sched_sample at_last_end; /* the counters at last_end */
    int batch_pending;      /* LOADER: a batch was fetched, not closed */
    int64_t last_activity;
    int64_t tok;            /* the open span of the current iteration */
    int has_held;           /* LOADER: the first iteration, held back */
    int64_t held_start, held_end, held_step, held_epoch;
    int held_has_epoch;
    sched_sample at_start, held_from, held_to; /* the thread's counters at the boundaries */
    dft_sample_step held_sampled;  /* the held iteration's samples */
    dft_sample_step carried;       /* a held iteration's samples, its span taken back */
    int loader_sure;        /* LOADER: two batch iterations closed, no optimizer */
} S;

static void emit_iteration(int64_t start, int64_t end, int64_t step, int has_epoch,
                           int64_t epoch, sched_sample from, sched_sample to,
                           const dft_sample_step *sampled)
{
    dft_arg a[10] = {{DFT_AT_KEY("step"), .type = DFT_ARG_INT, .v.i = step}};
    unsigned n = 1;
    if (has_epoch)
        a[n++] = (dft_arg){DFT_AT_KEY("epoch"), .type = DFT_ARG_INT, .v.i = epoch};
    if (from.ok && to.ok && to.run_ns >= from.run_ns && to.wait_ns >= from.wait_ns) {
        a[n++] = (dft_arg){DFT_AT_KEY("cpu_us"), .type = DFT_ARG_INT,
                           .v.i = (to.run_ns - from.run_ns) / 1000};
        a[n++] = (dft_arg){DFT_AT_KEY("wait_us"), .type = DFT_ARG_INT,
                           .v.i = (to.wait_ns - from.wait_ns) / 1000};
    }
    /* where the untraced time went (hang/sampler.h): never more than the
     * iteration (a sample in flight at a boundary could tip it) */
    int64_t sampled_us = sampled->place_us < end - start ? sampled->place_us : end - start;
    if (sampled_us > 0 && sampled->place[0]) {
        a[n++] = (dft_arg){DFT_AT_KEY("sampled"), .type = DFT_ARG_STR,
                           .v.s = {sampled->place, strlen(sampled->place)}};
        a[n++] = (dft_arg){DFT_AT_KEY("sampled_us"), .type = DFT_ARG_INT, .v.i = sampled_us};
    }
    if (sampled->samples > 0 || sampled->missed > 0) { /* and what the sampler could not count */
        a[n++] = (dft_arg){DFT_AT_KEY("sampled_n"), .type = DFT_ARG_INT, .v.i = sampled->samples};
        a[n++] = (dft_arg){DFT_AT_KEY("sampled_dropped"), .type = DFT_ARG_INT,
                           .v.i = sampled->dropped};
        a[n++] = (dft_arg){DFT_AT_KEY("sampled_cut"), .type = DFT_ARG_INT, .v.i = sampled->cut};
        a[n++] = (dft_arg){DFT_AT_KEY("sampled_missed"), .type = DFT_ARG_INT,
                           .v.i = sampled->missed};
    }
    dft_at_emit("iteration", "pipeline", start, end, a, n);
}

/* more's samples added to into's: the counts, and the place that weighs
 * more (the same one: both weights). */
static void sampled_add(dft_sample_step *into, const dft_sample_step *more)
{
    if (strcmp(into->place, more->place) == 0)
        into->place_us += more->place_us;
    else if (more->place_us > into->place_us) {
        memcpy(into->place, more->place, sizeof into->place);
        into->place_us = more->place_us;
    }
    into->samples += more->samples;
    into->dropped += more->dropped;
    into->cut += more->cut;
    into->missed += more->missed;
}

static void reopen(int has, int64_t start)
{
    dft_at_span_close(&S.tok);
    if (has)
        S.tok = dft_at_span_open("iteration", "pipeline", start, S.step);
}

static void emit_held(void)
{
    if (!S.has_held)
        return;
    S.has_held = 0;
    emit_iteration(S.held_start, S.held_end, S.held_step, S.held_has_epoch, S.held_epoch,
                   S.held_from, S.held_to, &S.held_sampled);
}

void dft_at_mark(int64_t ts)
{
    S.mark = (sched_mark){ts, sched_now()};
}

void dft_at_mark_first(int64_t ts)
{
    if (!S.has_start)
        dft_at_mark(ts);
}

/* The counters at the boundary ts: its mark, else read now when ts is
 * (within 1 ms), else none. */
static sched_sample sched_at(int64_t ts)
{
    if (S.mark.ts == ts && S.mark.at.ok)
        return S.mark.at;
    sched_sample now = sched_now();
    if (dft_clock_us() - ts > 1000) /* not the boundary's counters */
        now.ok = 0;
    return now;
}

static void close_at(int64_t end, sched_sample to)
{
    int64_t start = S.has_start && S.start <= end ? S.start : end;
    int64_t step = S.step;
    sched_sample from = S.has_start ? S.at_start : (sched_sample){0, 0, 0};
    dft_mem_step(step); /* the resident memory at the step's end: docs/memory.md */
    dft_at_cuda_mem_step(step); /* and the CUDA allocator's, when in use */
    dft_sample_step sampled;
    dft_sample_take(end, &sampled);
    sampled_add(&sampled, &S.carried);
    memset(&S.carried, 0, sizeof S.carried);
    dft_sample_step_thread();
    S.step++;
    S.has_start = 1;
    S.start = end;
    S.at_start = to;
    reopen(1, end);
    /* a few comparisons unless a window fires; the CPU time as the iteration's cpu_us */
    dft_window_step_end(step, start, end,
                        from.ok && to.ok && to.run_ns >= from.run_ns
                            ? (to.run_ns - from.run_ns) / 1000
                            : -1);
    if (S.mode == MODE_LOADER && !S.loader_sure) {
        if (!S.has_held) {
            S.has_held = 1;
            S.held_start = start;
            S.held_end = end;
            S.held_step = step;
            S.held_has_epoch = S.has_epoch;
            S.held_epoch = S.epoch;
            S.held_from = from;
            S.held_to = to;
            S.held_sampled = sampled;
            return;
        }
        S.loader_sure = 1;
        emit_held();
    }
    emit_iteration(start, end, step, S.has_epoch, S.epoch, from, to, &sampled);
}

int64_t dft_at_step(void) { return S.step; }

void dft_at_activity(int64_t start, int64_t end)
{
    if (!S.has_start) {
        S.has_start = 1;
        S.start = start;
        S.at_start = sched_at(start);
        dft_sample_step before; /* samples before the step: no iteration's */
        dft_sample_take(start, &before);
        dft_sample_step_thread();
        reopen(1, start);
    }
    if (end > S.last_activity) {
        S.last_activity = end;
        if (S.mode != MODE_OPTIM) /* where an iteration ends at exit (_at_steps_exit) */
            dft_sample_cut(end);
    }
}

void dft_at_fetch_begin(int64_t ts)
{
    /* read only where this batch may end or start an iteration (and a pass
     * found exhausted, dft_at_loader_exhausted): not per batch of a loop
     * whose optimizer steps end its iterations */
    if (S.mode != MODE_OPTIM || !S.has_start)
        dft_at_mark(ts);
    if (S.mode != MODE_OPTIM && S.batch_pending) {
        S.batch_pending = 0;
        close_at(ts, sched_at(ts));
    }
    dft_at_activity(ts, 0);
}

void dft_at_fetch_end(int64_t start, int64_t end, int has_epoch, int64_t epoch)
{
    if (has_epoch) {
        S.has_epoch = 1;
        S.epoch = epoch;
    }
    if (S.mode != MODE_OPTIM) {
        S.mode = MODE_LOADER;
        S.batch_pending = 1;
    }
    dft_at_activity(start, end);
}

void dft_at_loader_exhausted(int64_t ts)
{
    if (S.mode != MODE_OPTIM && S.batch_pending) {
        S.batch_pending = 0;
        close_at(ts, sched_at(ts));
        S.has_start = 0;
        reopen(0, 0);
    }
}

static int stepped_has(uintptr_t opt)
{
    for (size_t i = 0; i < S.nstepped; i++)
        if (S.stepped[i] == opt)
            return 1;
    return 0;
}

int dft_at_optimizer_begin(uintptr_t opt, int64_t ts)
{
    if (stepped_has(opt)) { /* a new round: the previous iteration ended at the last step */
        uintptr_t *c = S.cycle;
        if (S.nstepped > S.cycle_cap) {
            c = realloc(S.cycle, S.nstepped * sizeof *c);
            if (!c) {
                PyErr_NoMemory();
                return -1;
            }
            S.cycle = c;
            S.cycle_cap = S.nstepped;
        }
        S.ncycle = 0;
        for (size_t i = 0; i < S.nstepped; i++) { /* a set: no repeats */
            size_t j = 0;
            while (j < S.ncycle && c[j] != S.stepped[i])
                j++;
            if (j == S.ncycle)
                c[S.ncycle++] = S.stepped[i];
        }
        S.has_cycle = 1;
        S.nstepped = 0;
        close_at(S.last_end, S.at_last_end);
    }
    dft_at_activity(ts, 0);
    return 0;
}

static int cycle_done(void)
{
    if (!S.has_cycle)
        return 0;
    for (size_t i = 0; i < S.ncycle; i++)
        if (!stepped_has(S.cycle[i]))
            return 0;
    return 1;
}

int dft_at_optimizer_end(uintptr_t opt, int64_t ts)
{
    if (S.has_held) { /* batches were iterations only until an optimizer stepped */
        S.start = S.held_start;
        S.at_start = S.held_from;
        S.has_start = 1;
        S.has_held = 0;
        S.step--;
        S.carried = S.held_sampled; /* its samples stay its own */
    }
    S.mode = MODE_OPTIM;
    S.batch_pending = 0;
    if (DFT_GROW(S.stepped, S.nstepped, S.cap, 8) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    S.stepped[S.nstepped++] = opt;
    S.last_end = ts;
    dft_sample_cut(ts); /* an iteration may end here, closed at the next optimizer step */
    S.at_last_end = sched_at(ts);
    dft_at_activity(ts, ts);
    if (cycle_done()) {
        S.nstepped = 0;
        close_at(ts, S.at_last_end);
    }
    return 0;
}

/* ---- Python functions --------------------------------------------------- */

/* _at_part(index, on): a part turned on or off (_base.Part.on). */
static PyObject *py_part(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "_at_part(index, on)");
        return NULL;
    }
    long i = PyLong_AsLong(args[0]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= DFT_AT_NPARTS)
        return PyErr_Format(PyExc_ValueError, "_at_part: index %ld out of range", i);
    int on = PyObject_IsTrue(args[1]);
    if (on < 0)
        return NULL;
    dft_at_on[i] = on;
    Py_RETURN_NONE;
}

/* _at_set_fail(callback): callback(part_index, exc) when a C hook fails. */
static PyObject *py_set_fail(PyObject *m, PyObject *cb)
{
    (void)m;
    if (!PyCallable_Check(cb))
        return PyErr_Format(PyExc_TypeError, "_at_set_fail: callback must be callable, not %s",
                            Py_TYPE(cb)->tp_name);
    Py_XSETREF(fail_cb, Py_NewRef(cb));
    Py_RETURN_NONE;
}

static PyObject *py_step(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(S.step);
}

/* _at_steps_exit(): the iteration still open at exit (steps.py's atexit). */
static PyObject *py_steps_exit(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    S.loader_sure = 1; /* what is held is an iteration after all */
    emit_held();
    if (S.nstepped) {
        S.nstepped = 0;
        close_at(S.last_end, S.at_last_end);
    } else if (S.mode == MODE_LOADER && S.batch_pending) {
        S.batch_pending = 0;
        close_at(S.last_activity, sched_at(S.last_activity));
    }
    dft_window_exit();
    Py_RETURN_NONE;
}

/* _at_thread() -> (depth, top module or None, in_data) of this thread. */
static PyObject *py_thread(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    dft_at_thread *t = dft_at_thread_get();
    return Py_BuildValue("iOi", t->depth, t->depth > 0 && t->top ? t->top : Py_None,
                         t->in_data);
}

/* _at_set_depth(depth): the forward depth of this thread (0 forgets the top). */
static PyObject *py_set_depth(PyObject *m, PyObject *arg)
{
    (void)m;
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    dft_at_thread *t = dft_at_thread_get();
    t->depth = (int)d;
    if (d == 0)
        Py_CLEAR(t->top);
    Py_RETURN_NONE;
}

/* _at_in_data_add(delta) -> int: this thread's dataset-fetch depth moved by
 * delta (the fetchers written in Python). */
static PyObject *py_in_data_add(PyObject *m, PyObject *arg)
{
    (void)m;
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    dft_at_thread *t = dft_at_thread_get();
    t->in_data += (int)d;
    return PyLong_FromLong(t->in_data);
}

static PyMethodDef methods[] = {
    {"_at_in_data_add", py_in_data_add, METH_O,
     "_at_in_data_add(delta) -> int\n\nMoves this thread's dataset-fetch depth."},
    {"_at_part", (PyCFunction)(void (*)(void))py_part, METH_FASTCALL,
     "_at_part(index, on)\n\nTurns a part of the torch hooks in C on or off."},
    {"_at_set_fail", py_set_fail, METH_O,
     "_at_set_fail(callback)\n\ncallback(part_index, exc) when a C hook fails."},
    {"_at_step", py_step, METH_NOARGS, "_at_step() -> int\n\nThe current iteration's number."},
    {"_at_steps_exit", py_steps_exit, METH_NOARGS,
     "_at_steps_exit()\n\nWrites the iteration still open (at exit)."},
    {"_at_thread", py_thread, METH_NOARGS,
     "_at_thread() -> (depth, top, in_data)\n\nThis thread's hook state."},
    {"_at_set_depth", py_set_depth, METH_O, "_at_set_depth(depth)\n\nSets this thread's depth."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core, through torch/module.c). */
int dft_at_steps_register(PyObject *module)
{
    static int key_made;
    if (!key_made) {
        if (pthread_key_create(&tl_key, thread_free) != 0) {
            PyErr_SetString(PyExc_OSError, "dftracer: pthread_key_create failed");
            return -1;
        }
        key_made = 1;
    }
    return PyModule_AddFunctions(module, methods);
}
