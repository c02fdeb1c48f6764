/* hang/sampler.c: samples of the step thread's Python stack, counted by the
 * place they land in, for the time of a step no event covers (sampler.h).
 *
 * One thread of its own per process, started at the first step: it sleeps a
 * period, reads the step thread's frames through the walker (never the GIL,
 * never a signal: the step thread is not stopped, so a sample may show a
 * frame it has just left) and counts the sample's place in a small table.
 * The step thread takes the table at each step's end.  The table is behind
 * a spin flag held for a few hundred nanoseconds at a time: a fork while the
 * sampler holds it leaves the child's copy clear (the child starts a sampler
 * of its own, as it has no thread of the parent's). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "hang/sampler.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/core.h"
#include "hang/walk.h"

#define MAX_PLACES 16 /* places counted in one step; a 17th is dropped */
#define MAX_FRAMES 64 /* frames read per sample (innermost first) */

typedef struct {
    char key[DFT_SAMPLE_KEY];
    unsigned count;
} place;

static struct {
    _Atomic(const void *) tstate; /* the step thread's PyThreadState */
    _Atomic(const void *) bottom; /* its bottom frame (dft_walk_bottom_here) */
    _Atomic pid_t pid;            /* the process whose sampler runs (0: none) */
    atomic_flag busy;             /* the table's spin flag */
    place places[MAX_PLACES];
    int nplaces;
    int64_t period_us;
    char stdlib[512]; /* the standard library's folder, with its final '/' */
    size_t stdlib_len;
} S = {.busy = ATOMIC_FLAG_INIT};

static void lock(void)
{
    while (atomic_flag_test_and_set_explicit(&S.busy, memory_order_acquire))
        ;
}

static void unlock(void) { atomic_flag_clear_explicit(&S.busy, memory_order_release); }

/* ---- a sample's place -------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Code the events already time: torch's (forward, backward, the optimizer,
 * the DataLoader, collectives) and dftracer's own.  No GIL. */
static int timed_by_events(const char *file)
{
    return strstr(file, "/torch/") != NULL || strstr(file, "/dftracer/") != NULL;
}

/* The walker's stop: such a frame ends the sample's walk (most samples of a
 * training step are inside torch: one or two frames read, not the whole
 * stack).  No GIL. */
static int stop_at_timed(const dft_walk_frame *f) { return timed_by_events(f->file); }

/* Not the program's own code: the standard library, an installed package,
 * a frozen module.  No GIL. */
static int library(const char *file)
{
    return file[0] == '<' || (S.stdlib_len && strncmp(file, S.stdlib, S.stdlib_len) == 0) ||
           strstr(file, "/site-packages/") != NULL || strstr(file, "/dist-packages/") != NULL;
}

/* The place of a sample (frames innermost first) into key; 0 when the
 * sample is in code the events time (not counted).  No GIL. */
static int place_of(const dft_walk_frame *f, int n, char *key, size_t cap)
{
    int own = -1;
    for (int i = 0; i < n; i++) {
        if (timed_by_events(f[i].file))
            return 0;
        if (own < 0 && !library(f[i].file))
            own = i;
    }
    if (n == 0)
        return 0;
    if (own < 0) { /* none of the program's own: the innermost */
        snprintf(key, cap, "%.80s:%.80s", base_name(f[0].file), f[0].func);
        return 1;
    }
    /* its caller too when that is the program's own function (a helper's
     * time is its caller's: "get_batch > wait"), and the innermost frame
     * when it is a library's (cut so that all fits in DFT_SAMPLE_KEY) */
    const dft_walk_frame *up = own + 1 < n && !library(f[own + 1].file) &&
                                       strcmp(f[own + 1].func, "<module>") != 0
                                   ? &f[own + 1]
                                   : NULL;
    size_t at = (size_t)snprintf(key, cap, "%.60s:", base_name(f[own].file));
    if (up && at < cap)
        at += (size_t)snprintf(key + at, cap - at, "%.40s > ", up->func);
    if (at < cap)
        at += (size_t)snprintf(key + at, cap - at, "%.40s", f[own].func);
    if (own > 0 && at < cap)
        snprintf(key + at, cap - at, " (%.20s:%.20s)", base_name(f[0].file), f[0].func);
    return 1;
}

/* Counts one sample at key.  The sampler thread, no GIL. */
static void count(const char *key)
{
    lock();
    int i = 0;
    while (i < S.nplaces && strcmp(S.places[i].key, key) != 0)
        i++;
    if (i == S.nplaces && S.nplaces < MAX_PLACES) {
        snprintf(S.places[i].key, sizeof S.places[i].key, "%s", key);
        S.places[i].count = 0;
        S.nplaces++;
    }
    if (i < S.nplaces)
        S.places[i].count++;
    unlock();
}

/* ---- the sampler thread ------------------------------------------------- */

/* The sampler thread: no GIL, never a Python call.  It ends with the
 * process (a detached thread), or when a forked child took over. */
static void *sampler_main(void *arg)
{
    pid_t me = (pid_t)(intptr_t)arg;
    dft_walker w;
    if (dft_walk_open(&w, 0) != 0)
        return NULL;
    w.no_lines = 1; /* a place is a file and a function: no line table read */
    w.stop = stop_at_timed;
    dft_walk_frame *frames = malloc(MAX_FRAMES * sizeof *frames);
    if (!frames) {
        dft_walk_close(&w);
        return NULL;
    }
    struct timespec period = {S.period_us / 1000000, (S.period_us % 1000000) * 1000};
    char key[DFT_SAMPLE_KEY];
    while (atomic_load(&S.pid) == me) {
        struct timespec left = period;
        while (nanosleep(&left, &left) != 0 && errno == EINTR)
            ;
        const void *ts = atomic_load_explicit(&S.tstate, memory_order_acquire);
        if (!ts || !dft_trace_active()) /* finalized: no walk until a step names a thread */
            continue;
        int n = dft_walk_stack(&w, ts, frames, MAX_FRAMES);
        /* a walk that did not end at the thread's bottom frame followed a
         * popped frame's stale links (the thread moved under it): its
         * frames are not a place.  One a stop frame ended is not counted. */
        if (w.bottom && w.bottom == atomic_load_explicit(&S.bottom, memory_order_acquire) &&
            place_of(frames, n, key, sizeof key))
            count(key);
    }
    free(frames);
    dft_walk_close(&w);
    return NULL;
}

/* The standard library's folder: os.py's.  The GIL held. */
static void find_stdlib(void)
{
    S.stdlib_len = 0;
    PyObject *os = PyDict_GetItemString(PyImport_GetModuleDict(), "os"); /* borrowed */
    PyObject *file = os ? PyObject_GetAttrString(os, "__file__") : NULL;
    const char *s = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    const char *slash = s ? strrchr(s, '/') : NULL;
    if (slash && (size_t)(slash - s) + 1 < sizeof S.stdlib) {
        S.stdlib_len = (size_t)(slash - s) + 1;
        memcpy(S.stdlib, s, S.stdlib_len);
        S.stdlib[S.stdlib_len] = 0;
    }
    Py_XDECREF(file);
    PyErr_Clear();
}

void dft_sample_step_thread(void)
{
    const dft_config *c = dft_trace_config();
    if (!c || c->sample_hz <= 0)
        return;
    atomic_store_explicit(&S.bottom, dft_walk_bottom_here(), memory_order_release);
    atomic_store_explicit(&S.tstate, (const void *)PyThreadState_Get(), memory_order_release);
    pid_t me = getpid();
    if (atomic_load(&S.pid) == me)
        return;
    /* the first step here (or in a forked child, which has no sampler) */
    atomic_flag_clear(&S.busy);
    S.nplaces = 0;
    S.period_us = 1000000 / c->sample_hz;
    find_stdlib();
    atomic_store(&S.pid, me);
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) {
        atomic_store(&S.pid, 0);
        return;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, sampler_main, (void *)(intptr_t)me) == 0) {
        pthread_setname_np(t, "dft-sampler"); /* top -H and the bench find it by name */
    } else {
        dft_log(DFT_LOG_WARN, "dftracer: could not start the stack sampler; untraced time "
                              "has no place");
        atomic_store(&S.pid, 0);
    }
    pthread_attr_destroy(&attr);
}

int64_t dft_sample_take(char *key, size_t cap)
{
    key[0] = 0;
    if (atomic_load(&S.pid) != getpid())
        return 0;
    lock();
    int best = -1;
    for (int i = 0; i < S.nplaces; i++)
        if (best < 0 || S.places[i].count > S.places[best].count)
            best = i;
    int64_t us = 0;
    if (best >= 0) {
        snprintf(key, cap, "%s", S.places[best].key);
        us = (int64_t)S.places[best].count * S.period_us;
    }
    S.nplaces = 0;
    unlock();
    return us;
}
