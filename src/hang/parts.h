/* hang/parts.h: the hang folder's parts as hang/module.c registers them
 * (its one face to the module, integrations.h's dft_hang_register).  GIL
 * held (PyInit__core); 0, or -1 with an exception set. */
#ifndef DFT_HANG_PARTS_H
#define DFT_HANG_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int dft_hang_spans_register(PyObject *module);  /* spans_py.c: open spans */
int dft_hang_stacks_register(PyObject *module); /* stacks.c: stacks on request */

#endif
