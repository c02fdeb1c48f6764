/* integrations.h: each integration (decorators, I/O, CUPTI, torch, readers)
 * adds its types and functions to dftracer._core through one function here,
 * called from PyInit__core with the GIL held, in table order.  Returns 0, or
 * -1 with an exception set.  Only module.c includes this table; an
 * integration includes it for its own declaration, the test extension for
 * dft_core_module_create. */
#ifndef DFT_INTEGRATIONS_H
#define DFT_INTEGRATIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef int (*dft_integration_fn)(PyObject *module);

int dft_profile_register(PyObject *module);        /* profile/: dft_fn, decorators */
int dft_io_register(PyObject *module);             /* io/: POSIX/stdio tracing */
int dft_tools_register(PyObject *module);          /* reader/: trace readers for the CLI */
int dft_cupti_register(PyObject *module);          /* gpu/: GPU activity */
int dft_hang_register(PyObject *module);           /* hang/module.c: open spans, stacks */
int dft_torch_register(PyObject *module);          /* torch/module.c: torch's parts */

/* module.c: a module made from def holding what dftracer._core holds (the
 * logger type, the module functions, every integration in table order).
 * PyInit__core's, and the test extension's (src/testing/testcore.c), whose
 * def adds its own functions.  A new reference, or NULL with an exception. */
struct PyModuleDef;
PyObject *dft_core_module_create(struct PyModuleDef *def);

#ifdef DFT_INTEGRATIONS_TABLE
static const dft_integration_fn dft_integrations[] = {
    dft_profile_register,
    dft_io_register,
    dft_tools_register,
    dft_cupti_register,
    dft_hang_register,
    dft_torch_register,
};
#endif

#endif
