/* torch/autotrace_steps.h: what the zero-code torch hooks in C share
 * (dftracer/_autotrace; docs/ai.md, "Events of an unchanged script"):
 * the parts' switches, each thread's hook state, the iteration counter
 * and event writing, autotrace_steps.c's code (named for it: the hooks
 * call into it, it calls none of them).  The hooks themselves are in
 * autotrace_hooks.c (modules, backward, optimizer), autotrace_forward.c (the
 * C forward of top-level modules) and autotrace_data.c (DataLoader fetch
 * and item) and autotrace_calls.c with autotrace_comm.c (collectives,
 * torch.save/load: autotrace_comm.h).
 * Everything here needs the GIL. */
#ifndef DFT_TORCH_AUTOTRACE_STEPS_H
#define DFT_TORCH_AUTOTRACE_STEPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "core/core.h"

/* The parts with hooks in C, as dftracer/_autotrace/_base.py numbers them. */
enum {
    DFT_AT_STEPS,
    DFT_AT_MODULES,
    DFT_AT_OPTIMIZER,
    DFT_AT_DATALOADER,
    DFT_AT_COMM,
    DFT_AT_CHECKPOINT,
    DFT_AT_NPARTS
};

/* 1 while the part is on (Part.on in Python writes it). */
extern int dft_at_on[DFT_AT_NPARTS];

/* One thread's state of the hooks (what _base._Thread was). */
typedef struct dft_at_thread {
    int depth;          /* hooked module forwards running on this thread */
    PyObject *top;      /* the outermost one (a strong reference while depth > 0) */
    int64_t fwd_start;  /* its start */
    int64_t fwd_tok;    /* its open span */
    int in_data;        /* inside a dataset fetch */
    int in_comm;        /* inside a traced collective (inner ones are not events) */
    PyTypeObject *bwd_type; /* set (strong) while a backward is timed: the model
                               of the last top-level forward whose output has a
                               grad_fn, since the last optimizer step */
    int bwd_is_loss;    /* bwd_type is a loss module's */
    int in_backward;    /* inside a timed backward pass (a nested one is not timed) */
    int opt_depth;      /* optimizer.step() calls running */
    PyObject *opt_owner; /* borrowed, compared only */
    int64_t opt_start;
    int64_t opt_tok;
} dft_at_thread;

extern _Thread_local dft_at_thread *dft_at_tl;
dft_at_thread *dft_at_thread_slow(void);
static inline dft_at_thread *dft_at_thread_get(void)
{
    dft_at_thread *t = dft_at_tl;
    return t ? t : dft_at_thread_slow();
}

/* One complete event from start to end, as log_event writes it (in the
 * innermost scope).  Nothing when tracing is off. */
void dft_at_emit_n(const char *name, size_t name_len, const char *cat, size_t cat_len,
                   int64_t start, int64_t end, const dft_arg *args, unsigned nargs);
/* Open spans (docs/trace-format.md, "Open spans"): 0 when none was opened. */
int64_t dft_at_span_open_n(const char *name, size_t name_len, const char *cat, size_t cat_len,
                           int64_t ts, int64_t seq);
/* The same with a string literal's name and category: their lengths are
 * known when compiling ("" refuses anything but a literal), not counted per
 * event.  DFT_AT_KEY does it for an argument's key. */
#define DFT_AT_LIT(s) "" s, sizeof(s) - 1
#define dft_at_emit(name, cat, ...) dft_at_emit_n(DFT_AT_LIT(name), DFT_AT_LIT(cat), __VA_ARGS__)
#define dft_at_span_open(name, cat, ...) \
    dft_at_span_open_n(DFT_AT_LIT(name), DFT_AT_LIT(cat), __VA_ARGS__)
#define DFT_AT_KEY(k) .key = "" k, .key_len = sizeof(k) - 1
void dft_at_span_close(int64_t *tok);

/* The part failed with the exception set now: it is cleared and handed to
 * _base's fail (which turns the part off and undoes its hooks). */
void dft_at_fail(int part);

/* type(obj).__name__ (UTF-8, valid while the type lives). */
const char *dft_at_type_name(PyTypeObject *tp);

/* The iterations (autotrace_steps.c; dftracer/_autotrace/steps.py). */
int64_t dft_at_step(void);

void dft_at_activity(int64_t start, int64_t end);
/* The step thread's scheduler counters now, kept for a boundary at ts (the
 * clock just read) that the step code may find a moment later.  The GIL. */
void dft_at_mark(int64_t ts);
/* The same when no iteration is open (ts may start the first). */
void dft_at_mark_first(int64_t ts);
void dft_at_fetch_begin(int64_t ts);
void dft_at_fetch_end(int64_t start, int64_t end, int has_epoch, int64_t epoch);
void dft_at_loader_exhausted(int64_t ts);
/* 0, or -1 with an exception set (out of memory). */
int dft_at_optimizer_begin(uintptr_t opt, int64_t ts);
int dft_at_optimizer_end(uintptr_t opt, int64_t ts);

#endif
