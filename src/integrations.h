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

/* torch.compile backend timers and the PEP 523 frame hook (dynamo_timing.c) */
int dft_dynamo_register(PyObject *module);

static const dft_integration_fn dft_integrations[] = {
    dft_dynamo_register,
    NULL, /* keeps the table non-empty */
};

#endif
