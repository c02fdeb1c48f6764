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
 * that is another one ("train.py:get_batch (memmap.py:__new__)"). */
#ifndef DFT_HANG_SAMPLER_H
#define DFT_HANG_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define DFT_SAMPLE_KEY 192 /* bytes of a sample's place, with its NUL */

/* The calling thread is the step thread from now on; starts the sampler
 * thread the first time (and in a forked child).  The GIL held. */
void dft_sample_step_thread(void);

/* The place most samples since the last call landed in, into key (cap
 * bytes), and its estimated time (samples x period): 0 when no untraced
 * sample was taken (key left empty).  Starts the next step's count.  The
 * step thread, the GIL held. */
int64_t dft_sample_take(char *key, size_t cap);

#endif
