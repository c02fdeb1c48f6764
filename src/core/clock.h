/* core/clock.h: the tracer clock, in microseconds since the Unix epoch.
 *
 * The wall clock is read once (dft_clock_init) and advanced by CLOCK_MONOTONIC,
 * so timestamps of one process never go backwards and durations are never
 * negative.  clock_gettime(CLOCK_MONOTONIC) goes through the vDSO (~22 ns on
 * the development VM).
 *
 * On x86-64, when the kernel itself keeps time with the TSC (its clocksource
 * is "tsc": invariant and synchronised across CPUs), the clock reads the TSC
 * directly (~13 ns) and converts ticks with parameters that core/clock.c refits
 * against CLOCK_MONOTONIC every second, never stepping back, so the two never
 * drift apart by more than a microsecond or so.  The parameters are
 * published under a sequence counter; a reader that sees them being changed,
 * or that is due to refit them, takes the slow path instead of waiting, which
 * keeps every read async-signal-safe.  DFTRACER_CLOCK=monotonic turns the TSC
 * path off. */
#ifndef DFT_CLOCK_H
#define DFT_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DFT_CLOCK_TSC 1
#include <x86intrin.h>
#else
#define DFT_CLOCK_TSC 0
#endif

extern int64_t dft_clock_offset_ns; /* realtime - monotonic, at init */

/* The TSC conversion: ns = ns_base + ((tsc - tsc_base) * mult) >> 32, valid
 * while tsc - tsc_base < span.  seq is even and non-zero while the fields are
 * valid; odd while they are being written; 0 before the first fit. */
typedef struct dft_tsc_params {
    _Atomic uint64_t seq;
    _Atomic uint64_t tsc_base;
    _Atomic uint64_t span;
    _Atomic uint64_t mult;
    _Atomic int64_t ns_base;
} dft_tsc_params;

extern dft_tsc_params dft_tsc;

/* Once per process, at module import: the offset, and the clock source chosen
 * by DFTRACER_CLOCK.  Later calls do nothing. */
void dft_clock_init(void);

/* In a forked child: a fit interrupted by fork() is abandoned and redone. */
void dft_clock_after_fork(void);

/* CLOCK_MONOTONIC + offset, refitting the TSC parameters when they are due.
 * Any thread, no GIL, async-signal-safe. */
int64_t dft_clock_slow_ns(void);

/* The tracer clock minus CLOCK_REALTIME now (what NTP moved the wall clock
 * since start-up), sampled with the tightest pair of reads.  Any thread, no GIL. */
int64_t dft_clock_minus_realtime_ns(void);

#ifdef DFT_TESTING
/* The test extension only: moves the fitted TSC clock by ns (core/clock.c). */
int dft_clock_skew_for_test(int64_t ns);
#endif

/* "tsc" or "monotonic": what dft_clock_ns() reads now. */
const char *dft_clock_source(void);

/* Any thread, no GIL, async-signal-safe. */
static inline int64_t dft_clock_ns(void)
{
#if DFT_CLOCK_TSC
    uint64_t s = atomic_load_explicit(&dft_tsc.seq, memory_order_acquire);
    if (__builtin_expect(s != 0 && (s & 1) == 0, 1)) { /* else no TSC read at all */
        uint64_t base = atomic_load_explicit(&dft_tsc.tsc_base, memory_order_relaxed);
        uint64_t span = atomic_load_explicit(&dft_tsc.span, memory_order_relaxed);
        uint64_t mult = atomic_load_explicit(&dft_tsc.mult, memory_order_relaxed);
        int64_t ns = atomic_load_explicit(&dft_tsc.ns_base, memory_order_relaxed);
        uint64_t d = __rdtsc() - base; /* wraps when tsc < base: fails the span test */
        atomic_thread_fence(memory_order_acquire);
        if (__builtin_expect(d < span, 1) &&
            atomic_load_explicit(&dft_tsc.seq, memory_order_relaxed) == s)
            return ns + (int64_t)(((unsigned __int128)d * mult) >> 32);
    }
#endif
    return dft_clock_slow_ns();
}

static inline int64_t dft_clock_us(void) { return dft_clock_ns() / 1000; }

#endif
