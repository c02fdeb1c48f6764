/* torch/autotrace_hooks.h: the module forward hooks' entry points
 * (autotrace_hooks.c, the code declared here), which the C forward of
 * top-level modules (autotrace_forward.c) calls.  GIL held. */
#ifndef DFT_TORCH_AUTOTRACE_HOOKS_H
#define DFT_TORCH_AUTOTRACE_HOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A hooked module's forward begins / ends (autotrace_hooks.c): the thread's
 * depth; the outermost one's end writes `forward`.  output may be None. */
void dft_at_forward_pre(PyObject *module);
void dft_at_forward_post(PyObject *module, PyObject *output);

#endif
