/* torch/kineto.h: reading a torch profiler's raw Kineto results
 * (torch/kineto.c) into profiler records (torch/profiler_records.h).
 * Everything here holds the GIL. */
#ifndef DFT_TORCH_KINETO_H
#define DFT_TORCH_KINETO_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torch/profiler_records.h"

/* prof.profiler.kineto_results (or prof.kineto_results for a
 * torch.autograd.profiler.profile), with the object holding them in
 * *profiler_out (a new reference); NULL with TypeError/RuntimeError when prof
 * has no results. */
PyObject *dft_kineto_results(PyObject *prof, PyObject **profiler_out);

/* Reads every event of results into v, dropping what prof.events() leaves
 * out; *use_device tells whether the profiler computes device time shares.
 * 0, or -1 with an exception set; either way v is freed with dft_kineto_free. */
int dft_kineto_read(PyObject *profiler, PyObject *results, pp_vec *v, int *use_device);

/* Releases the names the events hold and v's arrays. */
void dft_kineto_free(pp_vec *v);

/* An int, or an int-like (DeviceType enums), as int64; -1 with an exception. */
int dft_kineto_i64(PyObject *obj, int64_t *out);

#endif
