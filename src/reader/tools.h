/* reader/tools.h: the Python entry points of the trace readers (src/reader_*.c),
 * registered in dftracer._core by dft_tools_register. */
#ifndef DFT_READER_TOOLS_H
#define DFT_READER_TOOLS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Duration histogram: exact bins 0..15 us, then 16 bins per power of two up
 * to 2^DFT_HIST_MAX_EXP us; the last bin takes everything above. */
#define DFT_HIST_MAX_EXP 39
#define DFT_HIST_BINS (16 + (DFT_HIST_MAX_EXP - 3) * 16)

int dft_hist_bin(int64_t v);

PyObject *dft_tools_summarize_file(PyObject *module, PyObject *path);
PyObject *dft_tools_validate_file(PyObject *module, PyObject *path);
PyObject *dft_tools_rewrite_file(PyObject *module, PyObject *args, PyObject *kwargs);
int dft_tools_register(PyObject *module);
int dft_tools_register_events(PyObject *module); /* reader/events.c */
int dft_tools_register_ranks(PyObject *module);  /* reader/ranks_py.c */

/* The status and message attributes of the readers' Python objects. */
struct dft_rd;
/* Opens the trace at path (str, bytes or os.PathLike) into rd, the file
 * opened without the GIL: 0, or -1 with TypeError/OSError naming the path. */
int dft_rd_open_path(struct dft_rd *rd, PyObject *path);
PyObject *dft_rd_status_str(int status);
PyObject *dft_rd_message_str(const struct dft_rd *rd);

#endif
