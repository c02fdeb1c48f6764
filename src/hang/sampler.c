/* hang/sampler.c: samples of the step thread's Python stack, counted by the
 * place they land in, for the time of a step no event covers (sampler.h).
 *
 * One thread of its own per process, started at the first step: it sleeps a
 * period, reads the step thread's frames through the walker (never the GIL,
 * never a signal: the step thread is not stopped, so a sample may show a
 * frame it has just left) and counts the sample's place in a small table.
 * The step thread takes the table at each step's end.  The table is behind
 * a spin flag held for a few hundred nanoseconds at a time.
 *
 * At fork() the thread is one of core/park.c's helpers (registered at its
 * first start: hang/ is above core/, core never calls up): it exits before
 * the fork and starts again in the parent when park.c resumes the helpers,
 * keeping the step's samples so far.  A forked child has no sampler until
 * its own first step, which starts one with an empty table (the child's
 * steps are its own). */
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

#include <sys/syscall.h>

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

/* ---- the thread's start, stop and fork (core/park.c's table) ----------- */

static struct {
    pthread_mutex_t lock; /* start, stop and the nap's wake */
    pthread_cond_t wake;  /* the nap between samples; broadcast to stop the thread */
    clockid_t clock;      /* wake's clock */
    _Atomic int running;  /* a sampler thread runs; it clears this as it exits */
    _Atomic int parked;   /* stopped for a fork: park.c's resume starts it again */
    _Atomic int gave_up;  /* its walker could not open: not started again */
    int stop;             /* asks the thread to exit */
    int registered;       /* in park.c's table (else it never starts: it would be counted) */
    int said;             /* a failed start was said */
    pid_t tid;            /* the running thread's kernel id */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void init_wake(void)
{
    pthread_condattr_t a;
    T.clock = CLOCK_REALTIME;
    if (pthread_condattr_init(&a) == 0) {
        if (pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 &&
            pthread_cond_init(&T.wake, &a) == 0)
            T.clock = CLOCK_MONOTONIC;
        else
            pthread_cond_init(&T.wake, NULL);
        pthread_condattr_destroy(&a);
    } else {
        pthread_cond_init(&T.wake, NULL);
    }
}

/* Sleeps *period unless asked to stop; 0 when asked.  The sampler thread. */
static int nap(const struct timespec *period)
{
    struct timespec t;
    clock_gettime(T.clock, &t);
    t.tv_sec += period->tv_sec;
    t.tv_nsec += period->tv_nsec;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&T.lock);
    while (!T.stop && pthread_cond_timedwait(&T.wake, &T.lock, &t) != ETIMEDOUT)
        ;
    int go = !T.stop;
    pthread_mutex_unlock(&T.lock);
    return go;
}

/* The sampler thread's first and last words. */
static void thread_began(void)
{
    pthread_mutex_lock(&T.lock);
    T.tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_unlock(&T.lock);
}

static void thread_ends(void)
{
    pthread_mutex_lock(&T.lock);
    atomic_store(&T.running, 0);
    pthread_cond_broadcast(&T.wake); /* a stop waiting for this exit */
    pthread_mutex_unlock(&T.lock);
}

static void *sampler_main(void *arg);

/* Starts the thread for process me, detached (it ends itself; a fork waits
 * for the kernel to let go of it).  Under T.lock. */
static void start_locked(pid_t me)
{
    if (atomic_load(&T.running) || atomic_load(&T.parked) || atomic_load(&T.gave_up) ||
        !T.registered)
        return;
    pthread_t t;
    pthread_attr_t attr;
    int e = pthread_attr_init(&attr);
    if (e == 0) {
        e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (e == 0)
            e = pthread_create(&t, &attr, sampler_main, (void *)(intptr_t)me);
        pthread_attr_destroy(&attr);
    }
    if (e == 0) {
        atomic_store(&T.running, 1);
        pthread_setname_np(t, "dft-sampler"); /* top -H and the bench find it by name */
    } else if (!T.said) {
        T.said = 1;
        dft_log(DFT_LOG_WARN, "dftracer: could not start the stack sampler; untraced time "
                              "has no place");
    }
}

/* Before fork(): the thread exits; T.lock stays held through the fork.  The
 * forking thread. */
static int sampler_stop(pid_t *tids, int cap)
{
    pthread_mutex_lock(&T.lock);
    int n = 0;
    if (atomic_load(&T.running)) {
        T.stop = 1;
        pthread_cond_broadcast(&T.wake);
        while (atomic_load(&T.running))
            pthread_cond_wait(&T.wake, &T.lock);
        T.stop = 0;
        atomic_store(&T.parked, 1);
        if (cap > 0 && T.tid > 0)
            tids[n++] = T.tid;
    }
    return n;
}

static void sampler_parent(void) { pthread_mutex_unlock(&T.lock); }

/* The child: no sampler thread; its first step starts one (S.pid is the
 * parent's). */
static void sampler_child(void)
{
    pthread_mutex_init(&T.lock, NULL);
    init_wake();
    atomic_store(&T.running, 0);
    atomic_store(&T.parked, 0);
    atomic_store(&T.gave_up, 0); /* a walker of its own pid may open */
    T.stop = 0;
    T.tid = 0;
}

/* In the parent once the interpreter counted, under the lifecycle lock: the
 * sampler of a trace still recording starts again (else at the next step). */
static void sampler_resume(void)
{
    pthread_mutex_lock(&T.lock);
    if (atomic_exchange(&T.parked, 0) && atomic_load(&S.pid) == getpid() && dft_trace_active())
        start_locked(getpid());
    pthread_mutex_unlock(&T.lock);
}

static const dft_helper_thread sampler_helper = {
    .name = "stack sampler",
    .stop = sampler_stop,
    .parent = sampler_parent,
    .child = sampler_child,
    .resume = sampler_resume,
};

static void init_once(void)
{
    init_wake();
    T.registered = dft_park_register(&sampler_helper) == 0;
}

/* Starts the sampler thread of process me unless it runs or waits for a
 * fork's resume.  The step thread, the GIL held. */
static void sampler_start(pid_t me)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
    pthread_mutex_lock(&T.lock);
    start_locked(me);
    pthread_mutex_unlock(&T.lock);
}

/* ---- the sampler thread ------------------------------------------------- */

/* The sampler thread: no GIL, never a Python call.  It ends with the
 * process (a detached thread), or before a fork (sampler_stop). */
static void *sampler_main(void *arg)
{
    pid_t me = (pid_t)(intptr_t)arg;
    thread_began();
    dft_walker w;
    if (dft_walk_open(&w, 0) != 0) {
        atomic_store(&T.gave_up, 1);
        thread_ends();
        return NULL;
    }
    w.no_lines = 1; /* a place is a file and a function: no line table read */
    w.stop = stop_at_timed;
    dft_walk_frame *frames = malloc(MAX_FRAMES * sizeof *frames);
    if (!frames) {
        dft_walk_close(&w);
        atomic_store(&T.gave_up, 1);
        thread_ends();
        return NULL;
    }
    struct timespec period = {S.period_us / 1000000, (S.period_us % 1000000) * 1000};
    char key[DFT_SAMPLE_KEY];
    while (atomic_load(&S.pid) == me) {
        if (!nap(&period))
            break;
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
    thread_ends();
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
    if (atomic_load(&S.pid) == me) {
        /* stopped for a fork while no trace recorded to resume it */
        if (!atomic_load_explicit(&T.running, memory_order_relaxed) &&
            !atomic_load_explicit(&T.parked, memory_order_relaxed))
            sampler_start(me);
        return;
    }
    /* the first step here (or in a forked child, which has no sampler) */
    atomic_flag_clear(&S.busy);
    S.nplaces = 0;
    S.period_us = 1000000 / c->sample_hz;
    find_stdlib();
    atomic_store(&S.pid, me);
    sampler_start(me);
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
