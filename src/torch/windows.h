/* torch/windows.h: full-detail windows that open themselves when a step
 * goes wrong (torch/windows.c, docs/windows.md). */
#ifndef DFT_TORCH_WINDOWS_H
#define DFT_TORCH_WINDOWS_H

#include <stdint.h>

/* Iteration step ran from start to end (dft_clock_us), its thread on a CPU
 * for cpu_us of it (-1: unknown), and has just been written: the check of the always-on path (a few comparisons and one
 * relaxed store when nothing fires), and a window's opening or closing when
 * something did.  The step thread, the GIL held. */
void dft_window_step_end(int64_t step, int64_t start, int64_t end, int64_t cpu_us);

/* At exit, after the last iteration: a window still open is written, with
 * the steps it got.  The GIL held. */
void dft_window_exit(void);

#endif
