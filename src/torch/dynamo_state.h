/* torch/dynamo_state.h: state shared between the torch.compile graph timers
 * (torch/dynamo_timing.c) and the PEP 523 frame hook (torch/frame_hook.c),
 * kept by torch/dynamo_state.c. */
#ifndef DFT_TORCH_DYNAMO_STATE_H
#define DFT_TORCH_DYNAMO_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "dftracer.h"

/* Per-thread counters that only ever grow; the frame hook reads them when a
 * traced call starts and ends and reports the differences. */
typedef struct dft_dyn_counters {
    int64_t graphs_run;      /* instrumented graphs started on this thread */
    int64_t compiles;        /* outermost compilations finished */
    int64_t graphs_compiled; /* graphs handed to the dftracer backend */
    int64_t compile_us;      /* time spent in outermost compilations */
    int64_t compile_t0;      /* start of the compilation in progress */
    int compile_depth;       /* nesting of compile begin/end pairs */
} dft_dyn_counters;

/* One thread's state: the timer ring of the graph timers (tokens are
 * 0..255, CPython's cached small ints) and the counters. */
#define DFT_DYN_RING 256
typedef struct dft_dyn_thread_state {
    int64_t ring[DFT_DYN_RING];
    unsigned pos;
    int grad_enabled; /* -1: not read yet on this thread */
    dft_dyn_counters counters;
} dft_dyn_thread_state;

/* Only a pointer is thread-local: the core's initial-exec TLS leaves little
 * static TLS room for the rest of the library. */
extern _Thread_local dft_dyn_thread_state *dft_dyn_tl_state;
dft_dyn_thread_state *dft_dyn_thread_slow(void);

/* The calling thread's state (no GIL needed). */
static inline dft_dyn_thread_state *dft_dyn_thread(void)
{
    dft_dyn_thread_state *t = dft_dyn_tl_state;
    return t ? t : dft_dyn_thread_slow();
}

/* The calling thread's counters (thread-local; no GIL needed). */
dft_dyn_counters *dft_dyn_counters_get(void);

/* A malloc'd NUL-terminated UTF-8 copy of str s (its length in *len), or NULL
 * with TypeError naming argname. */
char *dft_dyn_copy_utf8(PyObject *s, const char *argname, size_t *len);

/* How many contexts _dyn_context_new() made. */
int32_t dft_dyn_context_count(void);

/* Appends the args of Dynamo context ctx (name, epoch, step, image_idx,
 * image_size: those that are set) to out, which has room for
 * DFT_DYN_CTX_ARGS; returns how many.  Pointers stay valid until the
 * context is next set.  GIL held. */
#define DFT_DYN_CTX_ARGS 5
unsigned dft_dyn_context_args(int32_t ctx, dft_arg *out);

/* Adds the frame hook's functions to the module (torch/frame_hook.c); 0 or -1. */
int dft_frame_hook_add_functions(PyObject *module);

#endif
