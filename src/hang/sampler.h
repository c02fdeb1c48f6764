/* hang/sampler.h: where a training step's untraced time goes, from samples
 * of the step thread's Python stack (hang/sampler.c).
 *
 * The step code (torch/autotrace_steps.c) names its thread at each step's
 * start and takes the step's answer at its end; a thread of the sampler's
 * own reads that thread's frames DFTRACER_SAMPLE_HZ times a second through
 * the walker (hang/walk.h: copies that cannot fault, no GIL, no signal).  A
 * sample counts when no frame of it is torch's or dftracer's own (those
 * calls are timed by events already): the function it lands in is the
 * innermost frame of the program's own code (not the standard library's,
 * not an installed package's), with the innermost frame beside it when
 * that is another one ("train.py:get_batch (memmap.py:__new__)").
 *
 * Each sample carries its time: the step code says where a step may end
 * (dft_sample_cut) and takes the samples up to its end (dft_sample_take),
 * so a step closed late (the first one, while the optimizers of a step are
 * learned; the last, at exit) gets its own samples, not the next one's.  A
 * sample weighs the time since the sampler's previous tick (Austin's rule:
 * one the sampler woke late for stands for the ticks it missed), from at
 * most a period before the step's start; the step code cuts a place's time
 * to the step's. */
#ifndef DFT_HANG_SAMPLER_H
#define DFT_HANG_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define DFT_SAMPLE_KEY 192 /* bytes of a sample's place, with its NUL */

/* The calling thread is the step thread from now on; starts the sampler
 * thread the first time (and in a forked child).  The GIL held. */
void dft_sample_step_thread(void);

/* What the samples of one step say (docs/trace-format.md, `iteration`). */
typedef struct {
    char place[DFT_SAMPLE_KEY]; /* the place most of their time landed in; "" when none */
    int64_t place_us;           /* its samples' weights (0: none counted at a place); up
                                 * to a period more than the step: cut it */
    int64_t samples;            /* stacks read in the step */
    int64_t dropped;            /* of them, not counted at a place though outside torch's
                                 * code: the walk failed, did not end at the thread's
                                 * bottom frame (it followed stale links), went deeper
                                 * than DFT_WALK_MAX_DEPTH, or found the places full */
    int64_t cut;                /* of those counted at a place, walks deeper than the
                                 * frames kept (the innermost kept, the bottom checked) */
    int64_t missed;             /* ticks skipped: the sampler woke a period or more late */
} dft_sample_step;

/* A step may end at ts (an optimizer step's end, a batch's): the samples
 * taken after it are kept apart from those before, so a dft_sample_take(ts)
 * that comes later still takes only the ones before.  The step thread, the
 * GIL held. */
void dft_sample_cut(int64_t ts);

/* The samples taken up to end (dft_clock_us) since the last call, into out
 * (all zeros when the sampler is off or none was taken); the later ones
 * stay for the next step.  end is a time given to dft_sample_cut, or now
 * (else the samples of the stretch it falls in are all taken).  The step
 * thread, the GIL held. */
void dft_sample_take(int64_t end, dft_sample_step *out);

/* ---- a window (torch/windows.c, docs/windows.md) -------------------------
 * While a window is open the sampler wakes hz times a second instead of
 * DFTRACER_SAMPLE_HZ (still at most a twentieth of a CPU) and also counts
 * every sample into the window's own tally: the places (as the steps'),
 * the samples in code the events time, and the sampler's CPU time. */
#define DFT_WINDOW_PLACES 5 /* places a window reports */

typedef struct {
    char place[DFT_WINDOW_PLACES][DFT_SAMPLE_KEY]; /* heaviest first; "" past the last */
    int64_t place_us[DFT_WINDOW_PLACES];
    int64_t samples, timed, dropped, missed; /* stacks read; of them in timed code; ... */
    int64_t cpu_us;                          /* the sampler thread's CPU time in the window */
    int hz;                                  /* the rate asked (0: no sampler runs) */
} dft_sample_window;

/* Opens the window's tally and raises the rate (hz <= 0: the rate stays).
 * Any thread, no GIL (the flusher opens one at a stall): atomics and the
 * stretches' spin flag only. */
void dft_sample_window_begin(int hz);
/* Closes it: the tally into out (zeros when none was open) and the rate
 * back to DFTRACER_SAMPLE_HZ.  Any thread, no GIL. */
void dft_sample_window_end(dft_sample_window *out);

#endif
