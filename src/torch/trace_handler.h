/* torch/trace_handler.h: writing profiler records (torch/trace_handler.c). */
#ifndef DFT_TORCH_TRACE_HANDLER_H
#define DFT_TORCH_TRACE_HANDLER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torch/profiler_records.h"

/* Writes v's records as PP events (offset_ns: tracer clock minus Kineto
 * clock), device events on a lane per (process, device) and stream, each
 * lane named once per trace file.  Returns how many were recorded.  Any
 * thread, no GIL. */
Py_ssize_t dft_torch_write(const pp_vec *v, int64_t offset_ns);

#endif
