/* torch/dynamo.h: state shared between the torch.compile graph timers
 * (torch/dynamo_timing.c) and the PEP 523 frame hook (torch/frame_hook.c). */
#ifndef DFT_DYNAMO_H
#define DFT_DYNAMO_H

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

/* The calling thread's counters (thread-local; no GIL needed). */
dft_dyn_counters *dft_dyn_counters_get(void);

/* Appends the args of Dynamo context ctx (name, epoch, step, image_idx,
 * image_size: those that are set) to out, which has room for
 * DFT_DYN_CTX_ARGS; returns how many.  Pointers stay valid until the
 * context is next set.  GIL held. */
#define DFT_DYN_CTX_ARGS 5
unsigned dft_dyn_context_args(int32_t ctx, dft_arg *out);

/* Adds the frame hook's functions to the module (torch/frame_hook.c); 0 or -1. */
int dft_frame_hook_add_functions(PyObject *module);

#endif
