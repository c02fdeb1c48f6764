/* clock.c: calibrates the offset between the wall clock and CLOCK_MONOTONIC. */
#include "clock.h"

#include "dftracer.h"

int64_t dft_clock_offset_ns;

/* Takes the smallest of a few (realtime - monotonic) samples bracketed by
 * monotonic reads, so a preemption between the reads cannot skew the offset. */
void dft_clock_init(void)
{
    int64_t best_gap = INT64_MAX, offset = 0;
    for (int i = 0; i < 16; i++) {
        struct timespec m0, r, m1;
        clock_gettime(CLOCK_MONOTONIC, &m0);
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &m1);
        int64_t a = (int64_t)m0.tv_sec * 1000000000 + m0.tv_nsec;
        int64_t b = (int64_t)m1.tv_sec * 1000000000 + m1.tv_nsec;
        int64_t wall = (int64_t)r.tv_sec * 1000000000 + r.tv_nsec;
        if (b - a < best_gap) {
            best_gap = b - a;
            offset = wall - (a + (b - a) / 2);
        }
    }
    dft_clock_offset_ns = offset;
}

/* Any thread, no GIL. */
int64_t dft_now_us(void) { return dft_clock_us(); }
