/* integrations.h: each integration (decorators, I/O, CUPTI, torch, tools)
 * adds its types and functions to dftracer._core through one function here,
 * called from PyInit__core with the GIL held.  Returns 0, or -1 with an
 * exception set. */
#ifndef DFT_INTEGRATIONS_H
#define DFT_INTEGRATIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef int (*dft_integration_fn)(PyObject *module);

/* Add one declaration and one table entry per integration. */
int dft_profile_register(PyObject *module); /* profile/profile.c: dft_fn, decorators */
int dft_io_register(PyObject *module);      /* io/module.c: POSIX/stdio tracing */
int dft_tools_register(PyObject *module);   /* reader/module.c: trace readers for the CLI */
int dft_torch_profiler_register(PyObject *module); /* torch/trace_handler.c: trace_handler */
int dft_register_cupti(PyObject *module);   /* gpu/module.c: GPU activity */
int dft_dynamo_register(PyObject *module);  /* torch/dynamo_timing.c, torch/frame_hook.c: torch.compile */

/* torch.compile backend timers and the PEP 523 frame hook (torch/dynamo_timing.c) */
int dft_dynamo_register(PyObject *module);

static const dft_integration_fn dft_integrations[] = {
    dft_profile_register,
    dft_io_register,
    dft_tools_register,
    dft_torch_profiler_register,
    dft_register_cupti,
    dft_dynamo_register,
};

#endif
