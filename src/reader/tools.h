/* reader/tools.h: the Python entry points of the trace readers (the reader/ files),
 * registered in dftracer._core by dft_tools_register (reader/module.c). */
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

/* One group's histogram (reader/hist.c): the (bin, count) pairs it uses, or
 * the dense array once it uses many bins.  Zero-initialised is empty. */
typedef struct dft_hist {
    uint64_t *dense; /* DFT_HIST_BINS counts, or NULL */
    uint64_t *pairs; /* (bin << 48) | count, while dense is NULL */
    uint32_t npairs, cap;
} dft_hist;

/* Counts duration v: 0, or -1 out of memory.  Runs without the GIL. */
int dft_hist_add(dft_hist *h, int64_t v);
/* {bin: count} for the bins used (a new reference), or NULL. */
PyObject *dft_hist_dict(const dft_hist *h);
void dft_hist_free(dft_hist *h);

PyObject *dft_tools_summarize_file(PyObject *module, PyObject *path);
PyObject *dft_tools_validate_file(PyObject *module, PyObject *path);
PyObject *dft_tools_defined_hashes(PyObject *module, PyObject *args); /* validate_parent.c */
PyObject *dft_tools_rewrite_file(PyObject *module, PyObject *args, PyObject *kwargs);
int dft_tools_register(PyObject *module);
int dft_tools_register_events(PyObject *module); /* reader/events.c */
int dft_tools_register_ranks(PyObject *module);  /* reader/ranks_py.c */
int dft_tools_register_io(PyObject *module);     /* reader/iostats_py.c */
int dft_tools_register_io_fold(PyObject *module); /* reader/iostats_fold.c */
int dft_tools_register_classify(PyObject *module); /* reader/classify_py.c */
int dft_tools_register_stacks_tail(PyObject *module); /* reader/stacks_tail.c */
int dft_tools_register_event_lines(PyObject *module); /* reader/event_lines.c */
int dft_tools_register_memory(PyObject *module);   /* reader/memory_py.c */

/* What the readers' Python objects share (reader/pyreader.c). */
struct dft_rd;
/* Opens the trace at path (str, bytes or os.PathLike) into rd, the file
 * opened without the GIL: 0, or -1 with TypeError/OSError naming the path. */
int dft_rd_open_path(struct dft_rd *rd, PyObject *path);
PyObject *dft_rd_status_str(int status);
/* Raises OSError naming path for a dft_rd_open that failed with errno err
 * (reader/oserror.c): "not a regular file (a FIFO)" and the like when the
 * reader refused the file, else errno's words. */
void dft_rd_raise_open_error(PyObject *path, const struct dft_rd *rd, int err);
PyObject *dft_rd_message_str(const struct dft_rd *rd);
/* Text a trace holds as str (bytes that are not UTF-8, as older tools
 * wrote, replaced).  NULL with an exception. */
PyObject *dft_rd_text(const char *s, size_t n);
/* A pass's status word: "ok", "truncated", "corrupt" or "error". */
const char *dft_rd_status_name(int status);
/* Adds who wrote the file (reader/identity.h) to the pass's result dict d:
 * host, process_name, pid, ppid, rank, own_rank (the rank rule's: rank, else
 * the process_name's), local_rank, world_size, job_id,
 * rank_source, worker, num_workers.  0, or -1 with an exception.  GIL held. */
struct dft_ident;
int dft_ident_add_to(PyObject *d, const struct dft_ident *id);
/* Adds a pass's bad lines (reader.h's dft_rd_bad) to its result dict d:
 * bad_lines, first_bad (None when no line was refused), first_bad_line.
 * 0, or -1 with an exception.  GIL held. */
struct dft_rd_bad;
int dft_rd_bad_add_to(PyObject *d, const struct dft_rd_bad *b);

#endif
