/* torch/parts.h: the torch folder's parts as torch/module.c registers them
 * (its one face to the module, integrations.h's dft_torch_register; the
 * zero-code hooks' parts too).  GIL held
 * (PyInit__core); 0, or -1 with an exception set. */
#ifndef DFT_TORCH_PARTS_H
#define DFT_TORCH_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int dft_torch_profiler_register(PyObject *module); /* trace_handler.c */
int dft_dynamo_state_register(PyObject *module);   /* dynamo_state.c: contexts */
int dft_dynamo_register(PyObject *module);         /* dynamo_timing.c: graph timers */
int dft_frame_hook_register(PyObject *module);     /* frame_hook.c: PEP 523 hook */
int dft_ddp_hook_register(PyObject *module);       /* ddp_hook.c: DDP's bucket hook */
int dft_memory_register(PyObject *module);         /* memory_py.c: MemoryTracker */
int dft_windows_register(PyObject *module);        /* windows.c: triggered windows */

/* The zero-code hooks' parts (autotrace_*.c), registered in turn. */
int dft_at_steps_register(PyObject *module);
int dft_at_hooks_register(PyObject *module);
int dft_at_data_register(PyObject *module);
int dft_at_forward_register(PyObject *module);
int dft_at_calls_register(PyObject *module);

/* The CUDA allocator's figures at the end of iteration step, once torch.cuda
 * is initialized (torch/memory_py.c).  The stepping thread, GIL held. */
void dft_at_cuda_mem_step(int64_t step);

#endif
