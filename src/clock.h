/* clock.h: the tracer clock, in microseconds since the Unix epoch.
 *
 * The wall clock is read once (dft_clock_init) and advanced by CLOCK_MONOTONIC,
 * so timestamps of one process never go backwards and durations are never
 * negative.  clock_gettime(CLOCK_MONOTONIC) goes through the vDSO (~20 ns). */
#ifndef DFT_CLOCK_H
#define DFT_CLOCK_H

#include <stdint.h>
#include <time.h>

extern int64_t dft_clock_offset_ns; /* realtime - monotonic, at init */

void dft_clock_init(void);

/* Any thread, no GIL. */
static inline int64_t dft_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec + dft_clock_offset_ns;
}

static inline int64_t dft_clock_us(void) { return dft_clock_ns() / 1000; }

#endif
