/* hang/sampler.c: samples of the step thread's Python stack, counted by the
 * place they land in, for the time of a step no event covers (sampler.h).
 *
 * One thread of its own per process, started at the first step: it wakes on
 * a grid of periods (the walk's time comes out of its sleep; a grid point it
 * woke too late for is skipped and counted as missed, not caught up), reads
 * the step thread's frames through the walker (never the GIL, never a
 * signal: the step thread is not stopped, so a sample may show a frame it
 * has just left) and counts the sample's place, with the time since its
 * previous tick, in the stretch of time it fell in.  The step thread cuts
 * the stretches where a step may end and takes those up to a step's end.
 * The stretches are behind a spin flag held for a few microseconds at a
 * time.
 *
 * At fork() the thread is one of core/park.c's helpers (registered at its
 * first start: hang/ is above core/, core never calls up): it exits before
 * the fork and starts again in the parent when park.c resumes the helpers,
 * keeping the step's samples so far.  A forked child has no sampler until
 * its own first step, which starts one with empty stretches (the child's
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

#include "core/clock.h"
#include "core/config.h"
#include "core/core.h"
#include "hang/walk.h"

#define MAX_PLACES 16 /* places counted in one stretch; a 17th is dropped */
#define MAX_FRAMES 64 /* frames kept per sample (the innermost; deeper ones are followed) */
#define MAX_STRETCHES 4 /* the step's start and the last cuts (older cuts merge) */

typedef struct {
    char key[DFT_SAMPLE_KEY];
    int64_t us; /* its samples' weights */
    int64_t n;  /* its samples */
    int64_t cut; /* of them, cut walks */
} place;

/* The samples taken from one possible step boundary to the next. */
typedef struct {
    int64_t from; /* its start (dft_clock_us) */
    place places[MAX_PLACES];
    int nplaces;
    int64_t samples, dropped, missed; /* dft_sample_step's */
} stretch;

static struct {
    _Atomic(const void *) tstate; /* the step thread's PyThreadState */
    _Atomic(const void *) bottom; /* its bottom frame (dft_walk_bottom_here) */
    _Atomic pid_t pid;            /* the process whose sampler runs (0: none) */
    atomic_flag busy;             /* the stretches' spin flag */
    stretch st[MAX_STRETCHES];    /* oldest first, st[0] from the step's start */
    int nst;
    int64_t period_us;
    /* an open window (dft_sample_window_begin): its period (0: none) and
     * tally; the tally behind the spin flag */
    _Atomic int64_t win_period_us;
    _Atomic int win_on;
    _Atomic int64_t win_cpu_ns;
    int win_hz;
    stretch win;
    int64_t win_timed;
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

/* ---- the stretches (the spin flag held) --------------------------------- */

static void stretch_open(stretch *t, int64_t from)
{
    t->from = from;
    t->nplaces = 0;
    t->samples = t->dropped = t->missed = 0;
}

/* Adds n samples (cut of them cut walks) weighing us at key to t: 0, or -1
 * when its places are full. */
static int stretch_add(stretch *t, const char *key, int64_t n, int64_t cut, int64_t us)
{
    int i = 0;
    while (i < t->nplaces && strcmp(t->places[i].key, key) != 0)
        i++;
    if (i == t->nplaces) {
        if (t->nplaces == MAX_PLACES)
            return -1;
        snprintf(t->places[i].key, sizeof t->places[i].key, "%s", key);
        t->places[i].us = t->places[i].n = t->places[i].cut = 0;
        t->nplaces++;
    }
    t->places[i].us += us;
    t->places[i].n += n;
    t->places[i].cut += cut;
    return 0;
}

/* Folds b into a (a place that does not fit is dropped, and counted). */
static void stretch_merge(stretch *a, const stretch *b)
{
    a->samples += b->samples;
    a->dropped += b->dropped;
    a->missed += b->missed;
    for (int i = 0; i < b->nplaces; i++)
        if (stretch_add(a, b->places[i].key, b->places[i].n, b->places[i].cut, b->places[i].us) != 0)
            a->dropped += b->places[i].n;
}

/* Removes the first k stretches; one opened at from when none is left. */
static void stretches_shift(int k, int64_t from)
{
    memmove(&S.st[0], &S.st[k], (size_t)(S.nst - k) * sizeof S.st[0]);
    S.nst -= k;
    if (S.nst == 0) {
        stretch_open(&S.st[0], from);
        S.nst = 1;
    }
}

/* The stretches of a process whose sampler starts (or a forked child's). */
static void stretches_reset(void)
{
    S.nst = 0;
    stretches_shift(0, dft_clock_us());
}

/* What one tick saw. */
enum { TICK_PLACE, TICK_TIMED, TICK_DROPPED };

/* Counts the tick at `at` (prev: the one before) in its stretch: the last
 * that starts at or before it.  key: its place (TICK_PLACE).  The sampler
 * thread, no GIL. */
static void record(int64_t at, int64_t prev, int64_t period_us, int what, const char *key,
                   int cut, int64_t missed)
{
    lock();
    int i = S.nst - 1;
    while (i > 0 && S.st[i].from > at)
        i--;
    stretch *t = &S.st[i];
    t->samples++;
    t->missed += missed;
    int64_t us = 0;
    if (what == TICK_PLACE) {
        /* its weight: the time since the previous tick (a tick the sampler
         * woke late for weighs the grid points it missed too), from a period
         * before the stretch's start at most: the stretch's first sample
         * stands for the time before it, as its last leaves the time after
         * it to the next stretch's first (sampled_us is cut to the step) */
        int64_t floor = t->from - period_us;
        us = at - (prev > floor ? prev : floor);
        if (us < 0)
            us = 0;
        if (stretch_add(t, key, 1, cut, us) != 0)
            t->dropped++;
    } else if (what == TICK_DROPPED) {
        t->dropped++;
    }
    if (atomic_load_explicit(&S.win_on, memory_order_relaxed)) { /* the window's tally too */
        S.win.samples++;
        S.win.missed += missed;
        if (what == TICK_PLACE && stretch_add(&S.win, key, 1, cut, us) != 0)
            S.win.dropped++;
        else if (what == TICK_DROPPED)
            S.win.dropped++;
        else if (what == TICK_TIMED)
            S.win_timed++;
    }
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

/* Sleeps until deadline_ns (CLOCK_MONOTONIC) unless asked to stop; 0 when
 * asked.  The sampler thread. */
static int nap_until(int64_t deadline_ns)
{
    struct timespec t;
    if (T.clock == CLOCK_MONOTONIC) {
        t.tv_sec = (time_t)(deadline_ns / 1000000000);
        t.tv_nsec = (long)(deadline_ns % 1000000000);
    } else { /* the wake's clock is the wall clock: the same distance from now */
        struct timespec mono;
        clock_gettime(CLOCK_MONOTONIC, &mono);
        int64_t left = deadline_ns - ((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
        clock_gettime(T.clock, &t);
        int64_t at = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec + (left > 0 ? left : 0);
        t.tv_sec = (time_t)(at / 1000000000);
        t.tv_nsec = (long)(at % 1000000000);
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

static int64_t ns_of(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec; }

/* What the walk of one tick says: TICK_*, the place into key. */
static int look(dft_walker *w, const void *ts, dft_walk_frame *frames, char *key, size_t cap,
                int *cut)
{
    int n = dft_walk_stack(w, ts, frames, MAX_FRAMES);
    if (w->stopped) /* in code the events time */
        return TICK_TIMED;
    /* a walk that did not end at the thread's bottom frame followed a
     * popped frame's stale links (the thread moved under it), failed, or
     * went deeper than the walker follows: its frames are not a place.  A
     * cut walk is held to the same bottom (it follows the links past the
     * frames it keeps) */
    if (!w->bottom || w->bottom != atomic_load_explicit(&S.bottom, memory_order_acquire) ||
        !place_of(frames, n, key, cap))
        return TICK_DROPPED;
    *cut = w->depth > n;
    return TICK_PLACE;
}

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
    struct timespec now;
    if (!frames || clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
        free(frames);
        dft_walk_close(&w);
        atomic_store(&T.gave_up, 1);
        thread_ends();
        return NULL;
    }
    int64_t period = S.period_us * 1000;
    int64_t next = ns_of(&now), prev = dft_clock_us(), skipped = 0, cpu_was = -1;
    char key[DFT_SAMPLE_KEY];
    while (atomic_load(&S.pid) == me) {
        /* the next point of the grid: the walk's time is not added to the
         * period (Austin's loop subtracts it from its sleep); a window's
         * period while one is open */
        int64_t win = atomic_load_explicit(&S.win_period_us, memory_order_relaxed);
        int64_t want = (win > 0 ? win : S.period_us) * 1000;
        if (want != period) { /* a window opened or closed: a new grid from now */
            period = want;
            if (clock_gettime(CLOCK_MONOTONIC, &now) == 0)
                next = ns_of(&now);
        }
        next += period;
        if (!nap_until(next))
            break;
        int64_t missed = skipped;
        skipped = 0;
        if (clock_gettime(CLOCK_MONOTONIC, &now) == 0 && ns_of(&now) - next >= period) {
            /* woke a period or more late (a busy machine): the grid points
             * passed are skipped, not caught up in a burst */
            missed += (ns_of(&now) - next) / period;
            next += (ns_of(&now) - next) / period * period;
        }
        int64_t at = dft_clock_us(), before = prev;
        prev = at;
        const void *ts = atomic_load_explicit(&S.tstate, memory_order_acquire);
        if (!ts || !dft_trace_active()) /* finalized: no walk until a step names a thread */
            continue;
        int cut = 0;
        int what = look(&w, ts, frames, key, sizeof key, &cut);
        record(at, before, period / 1000, what, key, cut, missed);
        /* a twentieth of a CPU at most: a tick that took long (a walk of a
         * stack thousands of frames deep, slow copies) moves the next one
         * on, and the grid points it passes count as missed (their time is
         * in the next sample's weight).  The thread's CPU since the last
         * tick's end: this tick's wake and walk, one clock read a tick */
        struct timespec cpu;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0 &&
            clock_gettime(CLOCK_MONOTONIC, &now) == 0) {
            int64_t spent = cpu_was >= 0 ? ns_of(&cpu) - cpu_was : 0;
            cpu_was = ns_of(&cpu);
            if (atomic_load_explicit(&S.win_on, memory_order_relaxed))
                atomic_fetch_add_explicit(&S.win_cpu_ns, spent, memory_order_relaxed);
            int64_t earliest = ns_of(&now) + 19 * spent;
            if (earliest > next + period) {
                skipped = (earliest - next) / period;
                next += skipped * period;
            }
        }
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
    stretches_reset();
    S.period_us = 1000000 / c->sample_hz;
    find_stdlib();
    atomic_store(&S.pid, me);
    sampler_start(me);
}

void dft_sample_cut(int64_t ts)
{
    if (atomic_load(&S.pid) != getpid())
        return;
    lock();
    if (ts > S.st[S.nst - 1].from) {
        if (S.nst == MAX_STRETCHES) { /* the oldest cut is the least likely end: it goes */
            stretch_merge(&S.st[0], &S.st[1]);
            memmove(&S.st[1], &S.st[2], (size_t)(S.nst - 2) * sizeof S.st[0]);
            S.nst--;
        }
        stretch_open(&S.st[S.nst++], ts);
    }
    unlock();
}

void dft_sample_take(int64_t end, dft_sample_step *out)
{
    memset(out, 0, sizeof *out);
    if (atomic_load(&S.pid) != getpid())
        return;
    lock();
    /* the stretches that start before end (the last of them may run past
     * it when end is not a cut: then all of it) */
    int k = 0;
    while (k < S.nst && (k == 0 || S.st[k].from < end))
        k++;
    if (S.st[0].from >= end) /* a step that ended before it began: nothing */
        k = 0;
    int best = -1;
    for (int i = 1; i < k; i++)
        stretch_merge(&S.st[0], &S.st[i]);
    if (k > 0) {
        const stretch *t = &S.st[0];
        for (int i = 0; i < t->nplaces; i++) {
            if (best < 0 || t->places[i].us > t->places[best].us)
                best = i;
            out->cut += t->places[i].cut;
        }
        if (best >= 0) {
            snprintf(out->place, sizeof out->place, "%s", t->places[best].key);
            out->place_us = t->places[best].us;
        }
        out->samples = t->samples;
        out->dropped = t->dropped;
        out->missed = t->missed;
        stretches_shift(k, end);
    }
    unlock();
}

/* ---- a window ----------------------------------------------------------- */

void dft_sample_window_begin(int hz)
{
    lock();
    if (!atomic_load_explicit(&S.win_on, memory_order_relaxed)) {
        stretch_open(&S.win, dft_clock_us());
        S.win_timed = 0;
        atomic_store(&S.win_cpu_ns, 0);
        S.win_hz = 0;
        atomic_store(&S.win_on, 1);
    }
    if (hz > 0 && hz > S.win_hz) {
        S.win_hz = hz;
        atomic_store(&S.win_period_us, 1000000 / hz);
    }
    unlock();
}

void dft_sample_window_end(dft_sample_window *out)
{
    memset(out, 0, sizeof *out);
    lock();
    if (!atomic_load_explicit(&S.win_on, memory_order_relaxed)) {
        unlock();
        return;
    }
    atomic_store(&S.win_on, 0);
    atomic_store(&S.win_period_us, 0);
    /* the heaviest places, heaviest first (a selection: 16 at most) */
    int taken[MAX_PLACES] = {0};
    for (int k = 0; k < DFT_WINDOW_PLACES; k++) {
        int best = -1;
        for (int i = 0; i < S.win.nplaces; i++)
            if (!taken[i] && (best < 0 || S.win.places[i].us > S.win.places[best].us))
                best = i;
        if (best < 0)
            break;
        taken[best] = 1;
        snprintf(out->place[k], sizeof out->place[k], "%s", S.win.places[best].key);
        out->place_us[k] = S.win.places[best].us;
    }
    out->samples = S.win.samples;
    out->timed = S.win_timed;
    out->dropped = S.win.dropped;
    out->missed = S.win.missed;
    out->cpu_us = atomic_load(&S.win_cpu_ns) / 1000;
    /* the rate the window had, where a sampler runs in this process */
    out->hz = atomic_load(&S.pid) == getpid() && atomic_load(&T.running) ? S.win_hz : 0;
    unlock();
}
