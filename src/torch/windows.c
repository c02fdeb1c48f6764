/* torch/windows.c: full-detail windows that open themselves when a step goes
 * wrong (docs/windows.md; the `window` event: docs/trace-format.md).
 *
 * The step code (autotrace_steps.c) hands each iteration's times here as it
 * writes the iteration: its wall time and the step thread's CPU time.  The
 * always-on check is a store into a ring of the last RING of each and two
 * comparisons with thresholds; every RECOMPUTE steps each threshold is
 * computed again from its ring: median + max(K x 1.4826 x MAD, MARGIN x
 * the median wall step), a robust bound a few stray steps do not move.  Two signals,
 * because on a loaded machine the wall time's spread is the run queue's
 * (a fifth of the step beside two burners: a rank doing a quarter more
 * work hides in it), while the CPU time moves with the rank's own work and
 * not with the waits, its own or its peers' in a collective.  A window opens when
 *   - SLOW_STEPS steps in a row end above either threshold ("slow step";
 *     the window starts at the first of them: their own iterations were
 *     written already, with the sampler's place at the usual rate),
 *   - a step has not ended after STALL_K typical steps and STALL_MIN_S
 *     seconds ("stall"; seen by the flusher at its wakes, which also writes
 *     the stacks of every thread then, a hang's evidence before any end),
 *   - `dftracer capture` asks through the request file `dftracer stacks`
 *     uses ("request"; core/stacks.c reads its first line).
 * While it is open the stack sampler runs at WINDOW_SAMPLE_HZ and keeps a
 * tally of the window's places (hang/sampler.h); when it closes, STEPS steps
 * after the trigger, one `window` event covers its steps.  Windows are
 * rate-limited (GAP_STEPS steps between two, PER_MINUTE a minute; a request
 * is not) and bounded in bytes (MAX_BYTES of window events a process).
 *
 * The window's state is the step thread's (the GIL); the flusher sees only
 * atomics: the open step's start, the median, the pending request. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torch/windows.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/core.h"
#include "hang/sampler.h"

/* An argument's key from a literal (autotrace_steps.h's DFT_AT_KEY: that
 * header is the steps' face, and the steps call this file). */
#define WIN_KEY(k) .key = "" k, .key_len = sizeof(k) - 1

#define RING 32      /* durations the threshold is computed from (a power of 2) */
#define RECOMPUTE 16 /* steps between two computations of the threshold */
#define OPENED_KEPT 64 /* window starts remembered for the per-minute limit */

enum { REQ_CAPTURE = 1, REQ_STALL = 2 };
enum { TRIG_SLOW = 1, TRIG_STALL = 2, TRIG_REQUEST = 4 };
enum { SIG_WALL = 1, SIG_CPU = 2 }; /* what a slow step crossed */

/* The settings (docs/windows.md), read at the first step. */
static struct {
    int read, on;
    double slow_k, margin, stall_k, stall_min_s;
    int slow_steps, warmup, steps, gap_steps, per_minute, hz;
    int64_t max_bytes;
} C;

static struct {
    /* the always-on part */
    int64_t ring[RING];
    int64_t nsteps;   /* durations put in the ring */
    int until;        /* steps until the next computation */
    int64_t slow_us;  /* the threshold (INT64_MAX while warming up) */
    int64_t median_us, mad_us;
    int64_t cpu_ring[RING]; /* the step thread's CPU time, the steps that have it */
    int64_t ncpu;
    int64_t cpu_slow_us; /* its threshold (INT64_MAX while warming up) */
    int64_t cpu_median_us, cpu_mad_us;
    int run;          /* slow steps in a row */
    int run_by;       /* SIG_*: which signals the run's steps crossed */
    int64_t run_first, run_start, run_worst, run_worst_cpu;
    /* a window */
    int open;
    int trigger, also; /* TRIG_*: what opened it, what else fired while open */
    int64_t first, last, ts; /* its steps (last: the step that closes it), its start */
    int64_t seen;            /* the last step it holds so far */
    int64_t trig_step, trig_us, trig_cpu_us;
    int trig_by;
    int64_t last_closed; /* the last window's last step (-1: none yet) */
    int64_t opened[OPENED_KEPT]; /* the starts (us) of the last windows, for PER_MINUTE */
    int nopened;
    int64_t refused, bytes, count;
    /* the flusher's side */
    _Atomic int64_t step_start;   /* the open step's start (0: none yet) */
    _Atomic int64_t pub_median;   /* the median once warm (0: not yet) */
    _Atomic pid_t pid;            /* the process whose steps these are (a forked
                                   * DataLoader worker steps none: no stall there) */
    _Atomic int64_t stalled_from; /* the step start a stall was said for */
    _Atomic int request;          /* REQ_* pending */
    _Atomic int capture_steps;
} W = {.slow_us = INT64_MAX, .cpu_slow_us = INT64_MAX, .last_closed = -1, .until = 1};

/* ---- settings ------------------------------------------------------------ */

/* A number of var in [lo, hi] (an integer when whole), written as plain
 * decimal digits with an optional point; else dflt, with one warning line
 * naming the variable and the value used. */
static double env_num(const char *var, double dflt, double lo, double hi, int whole)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return dflt;
    /* plain decimals only: strtod would take hex, exponents, blanks, signs */
    int plain = 1;
    for (const char *c = v; *c; c++)
        plain &= (*c >= '0' && *c <= '9') || *c == '.';
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!plain || end == v || *end || errno || !(x >= lo && x <= hi) ||
        (whole && x != floor(x))) {
        dft_warn_config("%s='%s' is not a usable number (%g to %g); using %g", var, v, lo, hi,
                        dflt);
        return dflt;
    }
    return x;
}

static void read_settings(void)
{
    C.read = 1;
    C.on = dft_config_flag("DFTRACER_WINDOWS", 1);
    C.slow_k = env_num("DFTRACER_WINDOW_SLOW_K", 6, 0, 1000, 0);
    C.margin = env_num("DFTRACER_WINDOW_SLOW_MARGIN", 0.2, 0, 100, 0);
    C.slow_steps = (int)env_num("DFTRACER_WINDOW_SLOW_STEPS", 3, 1, 1000, 1);
    C.warmup = (int)env_num("DFTRACER_WINDOW_WARMUP", 10, 4, 100000, 1);
    C.steps = (int)env_num("DFTRACER_WINDOW_STEPS", 3, 1, 10000, 1);
    C.stall_k = env_num("DFTRACER_WINDOW_STALL_K", 20, 2, 1e6, 0);
    C.stall_min_s = env_num("DFTRACER_WINDOW_STALL_MIN_S", 20, 0.1, 1e6, 0);
    C.gap_steps = (int)env_num("DFTRACER_WINDOW_GAP_STEPS", 20, 0, 1e9, 1);
    C.per_minute = (int)env_num("DFTRACER_WINDOW_PER_MINUTE", 6, 1, OPENED_KEPT, 1);
    C.max_bytes = (int64_t)env_num("DFTRACER_WINDOW_MAX_BYTES", 1 << 20, 1024, 1e12, 1);
    C.hz = (int)env_num("DFTRACER_WINDOW_SAMPLE_HZ", 1000, 0, 10000, 1);
}

/* ---- the threshold (every RECOMPUTE steps) ------------------------------ */

static void sort_i64(int64_t *a, int n)
{
    for (int i = 1; i < n; i++) {
        int64_t v = a[i];
        int j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

static int64_t median_of(int64_t *a, int n)
{
    sort_i64(a, n);
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/* The threshold of a ring of the last total values (its median, MAD), its
 * least margin MARGIN x of (<= 0: of its own median); INT64_MAX before the
 * warm-up's steps. */
static int64_t threshold_of(const int64_t *ring, int64_t total, int64_t of, int64_t *median,
                            int64_t *mad_out)
{
    int n = total < RING ? (int)total : RING;
    if (total < C.warmup)
        return INT64_MAX;
    int64_t a[RING];
    memcpy(a, ring, (size_t)n * sizeof a[0]);
    int64_t med = median_of(a, n);
    for (int i = 0; i < n; i++)
        a[i] = a[i] > med ? a[i] - med : med - a[i];
    int64_t mad = median_of(a, n);
    double spread = C.slow_k * 1.4826 * (double)mad,
           floor_ = C.margin * (double)(of > 0 ? of : med);
    *median = med;
    *mad_out = mad;
    return med + (int64_t)(spread > floor_ ? spread : floor_) + 1;
}

static void recompute(void)
{
    if (W.nsteps < C.warmup || !C.on)
        return;
    W.slow_us = threshold_of(W.ring, W.nsteps, 0, &W.median_us, &W.mad_us);
    /* the CPU time's least margin is of the step (a step whose CPU time went
     * from 0.1 to 0.2 ms of a 20 ms step is not slow) */
    W.cpu_slow_us = threshold_of(W.cpu_ring, W.ncpu, W.median_us, &W.cpu_median_us,
                                 &W.cpu_mad_us);
    int64_t med = W.median_us;
    atomic_store_explicit(&W.pid, getpid(), memory_order_relaxed); /* every RECOMPUTE steps */
    atomic_store_explicit(&W.pub_median, med > 0 ? med : 1, memory_order_release);
}

/* ---- opening and closing ------------------------------------------------- */

/* Whether a window may open at now (us): the bytes left, GAP_STEPS since the
 * last one and fewer than PER_MINUTE in the last minute (forced: a request,
 * the bytes only). */
static int allowed(int64_t step, int64_t now, int forced)
{
    if (W.bytes >= C.max_bytes)
        return 0;
    if (forced)
        return 1;
    if (W.last_closed >= 0 && step - W.last_closed < C.gap_steps)
        return 0;
    int recent = 0;
    for (int i = 0; i < W.nopened; i++)
        recent += now - W.opened[i] < 60 * 1000000LL;
    return recent < C.per_minute;
}

static void open_window(int trigger, int64_t first, int64_t ts, int64_t last, int64_t now)
{
    W.open = 1;
    W.trigger = trigger;
    W.also = 0;
    W.first = first;
    W.ts = ts;
    W.last = last;
    W.seen = first - 1 > W.trig_step ? first - 1 : W.trig_step;
    if (W.nopened == OPENED_KEPT) {
        memmove(W.opened, W.opened + 1, (OPENED_KEPT - 1) * sizeof W.opened[0]);
        W.nopened--;
    }
    W.opened[W.nopened++] = now;
    dft_sample_window_begin(C.hz);
}

static const char *trigger_name(int t)
{
    return t == TRIG_SLOW ? "slow step" : t == TRIG_STALL ? "stall" : "request";
}

static const char *signal_name(int by)
{
    return by == (SIG_WALL | SIG_CPU) ? "wall,cpu" : by == SIG_CPU ? "cpu" : "wall";
}

/* The window's `window` event, ending at end; cut: the process ended first. */
static void close_window(int64_t end, int64_t last_step, int cut)
{
    dft_sample_window sw;
    dft_sample_window_end(&sw);
    W.open = 0;
    W.last_closed = last_step;
    W.count++;
    char places[DFT_WINDOW_PLACES * (DFT_SAMPLE_KEY + 24)];
    size_t at = 0;
    for (int k = 0; k < DFT_WINDOW_PLACES && sw.place[k][0]; k++) {
        int w = snprintf(places + at, sizeof places - at, "%s%lld %s", at ? "\n" : "",
                         (long long)sw.place_us[k], sw.place[k]);
        if (w < 0 || (size_t)w >= sizeof places - at)
            break;
        at += (size_t)w;
    }
    places[at] = 0;
    char also[32] = "";
    int na = 0;
    for (int t = TRIG_SLOW; t <= TRIG_REQUEST; t <<= 1)
        if (W.also & t & ~W.trigger)
            na += snprintf(also + na, sizeof also - (size_t)na, "%s%s", na ? "," : "",
                           trigger_name(t));
    const char *trig = trigger_name(W.trigger);
    /* the event's size as written, near enough: its args and the usual fields */
    int64_t bytes = 260 + (int64_t)at + (int64_t)strlen(also) + (int64_t)strlen(trig);
    dft_arg a[24];
    unsigned n = 0;
    a[n++] = (dft_arg){WIN_KEY("trigger"), .type = DFT_ARG_STR, .v.s = {trig, strlen(trig)}};
    a[n++] = (dft_arg){WIN_KEY("step_first"), .type = DFT_ARG_INT, .v.i = W.first};
    a[n++] = (dft_arg){WIN_KEY("step_last"), .type = DFT_ARG_INT, .v.i = last_step};
    a[n++] = (dft_arg){WIN_KEY("steps"), .type = DFT_ARG_INT, .v.i = last_step - W.first + 1};
    a[n++] = (dft_arg){WIN_KEY("trigger_step"), .type = DFT_ARG_INT, .v.i = W.trig_step};
    a[n++] = (dft_arg){WIN_KEY("trigger_us"), .type = DFT_ARG_INT, .v.i = W.trig_us};
    a[n++] = (dft_arg){WIN_KEY("median_us"), .type = DFT_ARG_INT, .v.i = W.median_us};
    a[n++] = (dft_arg){WIN_KEY("threshold_us"), .type = DFT_ARG_INT,
                       .v.i = W.slow_us == INT64_MAX ? 0 : W.slow_us};
    if (W.cpu_slow_us != INT64_MAX) { /* the CPU time's, where the steps have it */
        a[n++] = (dft_arg){WIN_KEY("cpu_median_us"), .type = DFT_ARG_INT,
                           .v.i = W.cpu_median_us};
        a[n++] = (dft_arg){WIN_KEY("cpu_threshold_us"), .type = DFT_ARG_INT,
                           .v.i = W.cpu_slow_us};
    }
    if (W.trigger == TRIG_SLOW) {
        const char *sig = signal_name(W.trig_by);
        a[n++] = (dft_arg){WIN_KEY("signal"), .type = DFT_ARG_STR, .v.s = {sig, strlen(sig)}};
        if (W.trig_cpu_us >= 0)
            a[n++] = (dft_arg){WIN_KEY("trigger_cpu_us"), .type = DFT_ARG_INT,
                               .v.i = W.trig_cpu_us};
    }
    a[n++] = (dft_arg){WIN_KEY("sample_hz"), .type = DFT_ARG_INT, .v.i = sw.hz};
    a[n++] = (dft_arg){WIN_KEY("samples"), .type = DFT_ARG_INT, .v.i = sw.samples};
    a[n++] = (dft_arg){WIN_KEY("samples_timed"), .type = DFT_ARG_INT, .v.i = sw.timed};
    a[n++] = (dft_arg){WIN_KEY("samples_dropped"), .type = DFT_ARG_INT, .v.i = sw.dropped};
    a[n++] = (dft_arg){WIN_KEY("samples_missed"), .type = DFT_ARG_INT, .v.i = sw.missed};
    a[n++] = (dft_arg){WIN_KEY("cost_us"), .type = DFT_ARG_INT, .v.i = sw.cpu_us};
    a[n++] = (dft_arg){WIN_KEY("bytes"), .type = DFT_ARG_INT, .v.i = bytes};
    a[n++] = (dft_arg){WIN_KEY("refused"), .type = DFT_ARG_INT, .v.i = W.refused};
    if (at)
        a[n++] = (dft_arg){WIN_KEY("places"), .type = DFT_ARG_STR, .v.s = {places, at}};
    if (na)
        a[n++] = (dft_arg){WIN_KEY("also"), .type = DFT_ARG_STR, .v.s = {also, (size_t)na}};
    if (cut)
        a[n++] = (dft_arg){WIN_KEY("cut"), .type = DFT_ARG_INT, .v.i = 1};
    W.bytes += bytes;
    W.refused = 0;
    /* written here, not through autotrace_steps.c's dft_at_emit (which calls
     * this file: no circle of calls) */
    if (dft_trace_ready()) {
        dft_event ev = {.name = "window", .name_len = 6, .cat = "dftracer", .cat_len = 8,
                        .ts = W.ts, .dur = end > W.ts ? end - W.ts : 0, .ph = DFT_PH_COMPLETE,
                        .args = a, .nargs = n};
        dft_emit_logged(&ev);
    }
}

/* Something may fire or a window is open: the rest of the step-end check. */
static void step_end_slow(int64_t step, int64_t start, int64_t end, int64_t d, int64_t cpu)
{
    if (!C.read)
        read_settings();
    if (!C.on) {
        atomic_store(&W.request, 0);
        return;
    }
    int req = atomic_exchange_explicit(&W.request, 0, memory_order_acquire);
    int by = (d >= W.slow_us ? SIG_WALL : 0) | (cpu >= 0 && cpu >= W.cpu_slow_us ? SIG_CPU : 0);
    int slow = by != 0;
    if (!W.open) {
        if (!slow)
            W.run = 0;
        else if (W.run++ == 0) {
            W.run_first = step;
            W.run_start = start;
            W.run_worst = d;
            W.run_worst_cpu = cpu;
            W.run_by = by;
        } else {
            if (d > W.run_worst)
                W.run_worst = d;
            if (cpu > W.run_worst_cpu)
                W.run_worst_cpu = cpu;
            W.run_by |= by;
        }
    }
    int64_t now = end;
    if (W.open) {
        W.seen = step;
        /* what fires while one is open extends it (a stall, a request) */
        if (req & REQ_STALL) {
            W.also |= TRIG_STALL;
            if (step + C.steps > W.last)
                W.last = step + C.steps;
        }
        if (req & REQ_CAPTURE) {
            int k = atomic_load(&W.capture_steps);
            W.also |= TRIG_REQUEST;
            if (step + (k > 0 ? k : C.steps) > W.last)
                W.last = step + (k > 0 ? k : C.steps);
        }
        if (slow)
            W.also |= W.trigger == TRIG_SLOW ? 0 : TRIG_SLOW;
        if (step >= W.last)
            close_window(end, step, 0);
        return;
    }
    if (req & REQ_STALL) { /* the step that just ended stalled; the sampler is fast already */
        W.trig_step = step;
        W.trig_us = d;
        if (allowed(step, now, 1)) {
            open_window(TRIG_STALL, step, start, step + C.steps, now);
            W.run = 0;
        } else {
            dft_sample_window sw;
            dft_sample_window_end(&sw);
            W.refused++;
        }
        return;
    }
    if (req & REQ_CAPTURE) { /* the next steps, from now */
        int k = atomic_load(&W.capture_steps);
        W.trig_step = step;
        W.trig_us = d;
        if (allowed(step, now, 1)) {
            open_window(TRIG_REQUEST, step + 1, end, step + (k > 0 ? k : C.steps), now);
            W.run = 0;
        } else {
            W.refused++;
        }
        return;
    }
    if (W.run >= C.slow_steps) {
        W.trig_step = step;
        W.trig_us = W.run_worst;
        W.trig_cpu_us = W.run_worst_cpu;
        W.trig_by = W.run_by;
        if (allowed(W.run_first, now, 0))
            open_window(TRIG_SLOW, W.run_first, W.run_start, step + C.steps, now);
        else
            W.refused++;
        W.run = 0;
    }
}

void dft_window_step_end(int64_t step, int64_t start, int64_t end, int64_t cpu_us)
{
    int64_t d = end - start;
    atomic_store_explicit(&W.step_start, end, memory_order_relaxed); /* the next step's */
    if (!W.open) { /* the window's steps are not the baseline */
        W.ring[W.nsteps++ & (RING - 1)] = d;
        if (cpu_us >= 0)
            W.cpu_ring[W.ncpu++ & (RING - 1)] = cpu_us;
        if (--W.until == 0) { /* at the warm-up's end, then every RECOMPUTE steps */
            if (!C.read)
                read_settings();
            W.until = W.nsteps < C.warmup ? (int)(C.warmup - W.nsteps) : RECOMPUTE;
            recompute();
        }
    }
    if (!W.open && !W.run && d < W.slow_us && cpu_us < W.cpu_slow_us &&
        !atomic_load_explicit(&W.request, memory_order_relaxed))
        return; /* nothing fired: the always-on path */
    step_end_slow(step, start, end, d, cpu_us);
}

void dft_window_exit(void)
{
    atomic_store(&W.step_start, 0);
    if (W.open)
        close_window(dft_clock_us(), W.seen, 1);
}

/* ---- the flusher's side (core/stacks.c's hooks) -------------------------- */

/* A request's window: the rest of it at the next step end.  The flusher,
 * no GIL. */
static void on_capture(int steps)
{
    atomic_store(&W.capture_steps, steps);
    atomic_fetch_or_explicit(&W.request, REQ_CAPTURE, memory_order_release);
}

/* The stall check at each flusher wake: a few loads.  1 when a stall is
 * found now (the stacks are written then).  The flusher, no GIL; the
 * settings were read before the median was published (release/acquire). */
static int on_watch(int64_t now)
{
    int64_t med = atomic_load_explicit(&W.pub_median, memory_order_acquire);
    int64_t start = atomic_load_explicit(&W.step_start, memory_order_relaxed);
    if (med <= 0 || start <= 0 || !C.on || atomic_load(&W.pid) != getpid())
        return 0;
    double limit = C.stall_k * (double)med;
    if (limit < C.stall_min_s * 1e6)
        limit = C.stall_min_s * 1e6;
    if ((double)(now - start) < limit || atomic_load(&W.stalled_from) == start)
        return 0;
    atomic_store(&W.stalled_from, start);
    dft_sample_window_begin(C.hz); /* from now: the stalled step's rest at the high rate */
    atomic_fetch_or_explicit(&W.request, REQ_STALL, memory_order_release);
    return 1;
}

/* _window_state() -> dict: the windows written, whether one is open, and
 * whether a stall or a request waits for the step's end (the tests wait on
 * it instead of on the clock). */
static PyObject *py_window_state(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int req = atomic_load(&W.request);
    return Py_BuildValue("{s:L,s:O,s:O,s:O,s:L}", "windows", (long long)W.count, "open",
                         W.open ? Py_True : Py_False, "stall",
                         req & REQ_STALL ? Py_True : Py_False, "request",
                         req & REQ_CAPTURE ? Py_True : Py_False, "threshold_us",
                         (long long)(W.slow_us == INT64_MAX ? 0 : W.slow_us));
}

static PyMethodDef methods[] = {
    {"_window_state", py_window_state, METH_NOARGS,
     "_window_state() -> dict\n\nThe triggered windows' state in this process."},
    {NULL, NULL, 0, NULL},
};

/* GIL held (PyInit__core, through torch/module.c). */
int dft_windows_register(PyObject *module)
{
    dft_set_window_hooks(on_capture, on_watch);
    return PyModule_AddFunctions(module, methods);
}
