/* core/clock.c: the offset between the wall clock and CLOCK_MONOTONIC, and the
 * fitting of TSC ticks to CLOCK_MONOTONIC (see core/clock.h).
 *
 * The fit is a small software PLL.  An anchor (tsc, monotonic) pair is taken
 * at init; every refit takes a fresh pair, estimates the tick rate over the
 * whole baseline since the anchor (so its error shrinks as the run goes on)
 * and goes on from CLOCK_MONOTONIC itself when that is at or after the latest
 * time the old parameters can have handed out; a converted clock that ran
 * ahead stays continuous instead and has a slew of at most SLEW_MAX added to
 * its rate, so that the error is worked off over the next interval.  Refits
 * come after 10 ms, then at doubling intervals up to one second.  A TSC that
 * disagrees with CLOCK_MONOTONIC by more than STEP_NS (plus 1000 ppm of the
 * time since the last fit) is not trusted: running behind, the clock steps
 * forward and starts a new baseline; running ahead, the TSC path is switched
 * off for good. */
#include "core/clock.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "dftracer.h"

#define FIRST_INTERVAL_NS 10000000LL  /* 10 ms */
#define MAX_INTERVAL_NS 1000000000LL  /* 1 s: keeps d * mult within 64 bits */
#define SLEW_MAX_PPM 1000
#define STEP_NS 1000000LL             /* 1 ms */

int64_t dft_clock_offset_ns;
dft_tsc_params dft_tsc;

static _Atomic int tsc_allowed;       /* DFTRACER_CLOCK and the kernel allow it */
static _Atomic int64_t next_fit_ns;   /* when the next refit is due */
/* Written only by the thread that holds the odd sequence number. */
static uint64_t anchor_tsc;
static int64_t anchor_ns;
static int64_t interval_ns;

static inline int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* now() - CLOCK_REALTIME, from the tightest of `tries` samples bracketed by
 * two now() reads, so a preemption between the reads cannot skew it.
 * Any thread, no GIL. */
static int64_t minus_realtime(int64_t (*now)(void), int tries)
{
    int64_t best_gap = INT64_MAX, diff = 0;
    for (int i = 0; i < tries; i++) {
        struct timespec r;
        int64_t a = now();
        clock_gettime(CLOCK_REALTIME, &r);
        int64_t b = now();
        int64_t wall = (int64_t)r.tv_sec * 1000000000 + r.tv_nsec;
        if (b - a < best_gap) {
            best_gap = b - a;
            diff = a + (b - a) / 2 - wall;
        }
    }
    return diff;
}

static int64_t tracer_ns(void) { return dft_clock_ns(); }

/* Any thread, no GIL. */
int64_t dft_clock_minus_realtime_ns(void) { return minus_realtime(tracer_ns, 5); }

#if DFT_CLOCK_TSC
/* A (tsc, clock ns) pair read as close together as the machine allows. */
static void sample(uint64_t *tsc, int64_t *ns)
{
    uint64_t best_gap = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = __rdtsc();
        int64_t m = mono_ns();
        uint64_t t1 = __rdtsc();
        if (t1 >= t0 && t1 - t0 < best_gap) {
            best_gap = t1 - t0;
            *tsc = t0 + (t1 - t0) / 2;
            *ns = m + dft_clock_offset_ns;
        }
    }
    if (best_gap == UINT64_MAX) { /* the TSC went backwards every time */
        *tsc = __rdtsc();
        *ns = mono_ns() + dft_clock_offset_ns;
    }
}

/* The kernel keeps time with the TSC only when it found it invariant and
 * synchronised across CPUs; that is the test used here. */
static int kernel_uses_tsc(void)
{
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strcmp(buf, "tsc\n") == 0 || strcmp(buf, "tsc") == 0;
}

static void start_baseline(uint64_t tsc, int64_t ns)
{
    anchor_tsc = tsc;
    anchor_ns = ns;
    interval_ns = FIRST_INTERVAL_NS;
    atomic_store_explicit(&next_fit_ns, ns + FIRST_INTERVAL_NS, memory_order_relaxed);
}

/* A baseline from a fresh sample. */
static void restart_baseline(void)
{
    uint64_t t;
    int64_t m;
    sample(&t, &m);
    start_baseline(t, m);
}

/* The write side of the sequence counter: takes the odd number after *s, an
 * even one, and returns 1; 0 when there is nothing to write over (s odd: being
 * written or switched off) or another thread got there first. */
static int begin_write(uint64_t *s)
{
    *s = atomic_load_explicit(&dft_tsc.seq, memory_order_relaxed);
    if ((*s & 1) || !atomic_compare_exchange_strong(&dft_tsc.seq, s, *s + 1))
        return 0;
    atomic_thread_fence(memory_order_release);
    return 1;
}

/* Called holding the odd sequence number s + 1 (s is what it replaced).
 * Publishes new parameters (sequence s + 2), or none yet (back to 0), or
 * leaves the sequence odd to switch the TSC path off.  Returns the time now.
 * Any thread, no GIL, async-signal-safe. */
static int64_t refit(uint64_t s)
{
    uint64_t t;
    int64_t m;
    sample(&t, &m);
    int64_t now = m;
    if (t <= anchor_tsc || m <= anchor_ns) { /* no baseline yet (or time stood still) */
        start_baseline(t, m);
        atomic_store_explicit(&dft_tsc.seq, 0, memory_order_release);
        return now;
    }
    /* Rate over the whole baseline, in ns per tick, 32.32 fixed point. */
    unsigned __int128 num = (unsigned __int128)(uint64_t)(m - anchor_ns) << 32;
    uint64_t rate = (uint64_t)(num / (t - anchor_tsc));
    int64_t base_ns = m;
    if (s != 0) { /* continue from the current parameters, correcting their error */
        uint64_t d = t - atomic_load_explicit(&dft_tsc.tsc_base, memory_order_relaxed);
        uint64_t mult = atomic_load_explicit(&dft_tsc.mult, memory_order_relaxed);
        uint64_t old_span = atomic_load_explicit(&dft_tsc.span, memory_order_relaxed);
        int64_t old_base = atomic_load_explicit(&dft_tsc.ns_base, memory_order_relaxed);
        int64_t est = old_base + (int64_t)(((unsigned __int128)d * mult) >> 32);
        int64_t err = m - est; /* > 0: the converted clock runs behind */
        /* The old rate's error grows with the time it was extrapolated over:
         * after an idle gap of minutes a few ppm are more than STEP_NS. */
        int64_t tol = STEP_NS + (m > old_base ? (m - old_base) / 1000 : 0);
        if (err < -tol) {
            /* Not logged: this may run in a signal handler.  _clock_info()
             * shows the source. */
            atomic_store_explicit(&tsc_allowed, 0, memory_order_relaxed);
            return now; /* the sequence stays odd: the fast path is off */
        }
        if (err > tol) {
            /* step forward; the old rate holds until a new baseline is measured */
            start_baseline(t, m);
            rate = mult;
        } else {
            /* The latest time the old parameters can have handed out: reads
             * past their span come here instead.  Going on from CLOCK_MONOTONIC
             * itself is exact and, at or after that time, never goes back;
             * extrapolating the old rate over an idle gap would carry its
             * error (tens of us after a second idle) into the next interval. */
            int64_t handed = d < old_span
                                 ? est
                                 : old_base + (int64_t)(((unsigned __int128)old_span * mult) >> 32);
            interval_ns = interval_ns * 2 > MAX_INTERVAL_NS ? MAX_INTERVAL_NS : interval_ns * 2;
            if (m < handed) {
                /* ran ahead: stay continuous and work the error off over the
                 * next interval, within SLEW_MAX_PPM */
                base_ns = handed;
                now = handed;
                __int128 slew = (__int128)rate * (m - handed) / interval_ns;
                __int128 lim = (__int128)rate * SLEW_MAX_PPM / 1000000;
                if (slew < -lim)
                    slew = -lim;
                rate = (uint64_t)((__int128)rate + slew);
            }
        }
    }
    if (rate == 0) { /* a TSC faster than 4 GHz * 2^32: not usable */
        atomic_store_explicit(&tsc_allowed, 0, memory_order_relaxed);
        return now;
    }
    uint64_t span = (uint64_t)(((unsigned __int128)interval_ns << 32) / rate);
    atomic_store_explicit(&dft_tsc.tsc_base, t, memory_order_relaxed);
    atomic_store_explicit(&dft_tsc.span, span, memory_order_relaxed);
    atomic_store_explicit(&dft_tsc.mult, rate, memory_order_relaxed);
    atomic_store_explicit(&dft_tsc.ns_base, base_ns, memory_order_relaxed);
    atomic_store_explicit(&next_fit_ns, base_ns + interval_ns, memory_order_relaxed);
    atomic_store_explicit(&dft_tsc.seq, s + 2, memory_order_release);
    return now;
}
#endif

/* Once per process (at import, or at the first start of a C API user:
 * either thread may come first). */
static void clock_init_once(void)
{
    dft_clock_offset_ns = -minus_realtime(mono_ns, 16);
#if DFT_CLOCK_TSC
    atomic_store(&tsc_allowed, dft_config_clock_tsc() && kernel_uses_tsc());
    if (atomic_load(&tsc_allowed))
        restart_baseline();
#endif
}

void dft_clock_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, clock_init_once);
}

/* Single-threaded, in the child; no GIL needed. */
void dft_clock_after_fork(void)
{
#if DFT_CLOCK_TSC
    uint64_t s = atomic_load(&dft_tsc.seq);
    if (atomic_load(&tsc_allowed) && (s & 1)) { /* a refit was cut short by fork() */
        restart_baseline();
        atomic_store(&dft_tsc.seq, 0);
    }
#endif
}

/* Any thread, no GIL, async-signal-safe. */
int64_t dft_clock_slow_ns(void)
{
    int64_t now = mono_ns() + dft_clock_offset_ns;
#if DFT_CLOCK_TSC
    if (atomic_load_explicit(&tsc_allowed, memory_order_relaxed) &&
        now >= atomic_load_explicit(&next_fit_ns, memory_order_relaxed)) {
        uint64_t s;
        if (begin_write(&s))
            return refit(s);
    }
#endif
    return now;
}

#ifdef DFT_TESTING
/* The test extension only: moves the converted TSC clock by ns, as a TSC that jumped would,
 * to exercise the refit's step and give-up paths.  Returns 0 when there was
 * no fitted TSC clock to move.  Any thread, no GIL. */
int dft_clock_skew_for_test(int64_t ns)
{
#if DFT_CLOCK_TSC
    uint64_t s;
    if (!atomic_load(&tsc_allowed) || !begin_write(&s))
        return 0;
    if (s == 0) { /* not fitted yet: nothing to move */
        atomic_store_explicit(&dft_tsc.seq, 0, memory_order_release);
        return 0;
    }
    atomic_fetch_add_explicit(&dft_tsc.ns_base, ns, memory_order_relaxed);
    atomic_store_explicit(&dft_tsc.seq, s + 2, memory_order_release);
    return 1;
#else
    (void)ns;
    return 0;
#endif
}
#endif

const char *dft_clock_source(void)
{
#if DFT_CLOCK_TSC
    uint64_t s = atomic_load(&dft_tsc.seq);
    if (atomic_load(&tsc_allowed) && s != 0 && !(s & 1))
        return "tsc";
#endif
    return "monotonic";
}

/* Any thread, no GIL. */
int64_t dft_now_us(void) { return dft_clock_us(); }
