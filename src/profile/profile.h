/* profile/profile.h: the dft_fn ("Profile") type shared by its three files:
 *   profile/profile.c       the dft_fn object: state, update(), context manager, flush
 *   profile/wrap.c  decorated-callable wrappers and generator/coroutine proxies
 *   profile/loop.c  p.iter() loops
 * Everything here needs the GIL. */
#ifndef DFT_PROFILE_H
#define DFT_PROFILE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>

#include "core/core.h"

/* The four per-call values pydftracer turns into event args. */
enum { DFT_SA_EPOCH, DFT_SA_STEP, DFT_SA_IMAGE_IDX, DFT_SA_IMAGE_SIZE, DFT_SA_N };

typedef struct dft_val {
    char type; /* 0 unset, 'i' int, 'f' float */
    int64_t i;
    double f;
} dft_val;

typedef struct dft_stepargs {
    dft_val v[DFT_SA_N];
} dft_stepargs;

typedef struct ProfileObject {
    PyObject_HEAD
    PyObject *cat;                 /* str */
    PyObject *name;                /* str */
    PyObject *args;                /* dict str -> int/float/str, or NULL */
    struct ProfileObject *parent;  /* a variant reads its parent's state too */
    int enable;
    dft_stepargs base;             /* epoch/step/... from the constructor/update() */
    int64_t t1;                    /* start of the region flush() closes */
    int flushed;
} ProfileObject;

extern PyTypeObject DftProfileType;
extern PyObject *dft_sa_names[DFT_SA_N]; /* interned "epoch", "step", ... */

/* A nesting scope opened by this code; closed only when it is still the
 * innermost one on the same thread, so a misuse never unbalances others. */
typedef struct dft_scope_tok {
    dft_tstate *ts;
    int depth;
} dft_scope_tok;

void dft_scope_open(dft_scope_tok *t);
void dft_scope_close(dft_scope_tok *t);

/* dft_scope_close for a scope opened on this thread in the same C call. */
static inline void dft_scope_close_here(dft_scope_tok *t)
{
    if (t->ts && t->ts->depth == t->depth)
        dft_exit_scope();
}

/* True when p and its parents are enabled and tracing is (or lazily becomes)
 * active.  The cost of a disabled decorated call is this function. */
static inline int dft_profile_on(const ProfileObject *p)
{
    for (; p; p = p->parent)
        if (!p->enable)
            return 0;
    if (atomic_load_explicit(&dft_g.active, memory_order_relaxed))
        return 1;
    /* Inline for the usual "off for good" states; the rest may start lazily. */
    int st = atomic_load_explicit(&dft_g.state, memory_order_relaxed);
    if (st == DFT_STATE_DISABLED || st == DFT_STATE_FINALIZED)
        return 0;
    return dft_lazy_start() == 0;
}

/* Calls f through its vectorcall function vc (looked up once by the caller,
 * NULL when f has none), without the generic dispatch. */
static inline PyObject *dft_call(PyObject *f, vectorcallfunc vc, PyObject *const *args,
                                 size_t nargsf, PyObject *kwnames)
{
    if (vc)
        return vc(f, args, nargsf, kwnames);
    return PyObject_Vectorcall(f, args, nargsf, kwnames);
}

/* Converts v into a dft_val (int for ints; floats too unless as_int); returns
 * 0 when v is not a number (nothing set, no exception). */
int dft_val_from(PyObject *v, int as_int, dft_val *out);

/* Writes one complete event of p's category.  Adds p's base values (over its
 * parents'), then sa (may be NULL), counter_key=counter when counter_key is not
 * NULL, and error=<exception type name> when exc_type is not NULL.  own is the
 * scope the caller opened for this event (NULL: none); when it is not the
 * innermost scope, the event gets a scope of its own.  Must be called with no
 * exception set; never raises (reports failures as unraisable). */
void dft_profile_emit(ProfileObject *p, const dft_scope_tok *own, PyObject *name, int64_t ts,
                      int64_t dur, const dft_stepargs *sa, PyObject *counter_key,
                      int64_t counter, PyObject *exc_type);

/* Like dft_profile_emit but keeps a pending exception across the call and
 * marks the event with its type (StopIteration is not an error). */
void dft_profile_emit_keep_error(ProfileObject *p, const dft_scope_tok *own, PyObject *name,
                                 int64_t ts, int64_t dur, const dft_stepargs *sa,
                                 PyObject *counter_key, int64_t counter);

/* Saves and restores the pending exception around tracer work. */
typedef struct dft_exc_state {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *t, *v, *tb;
#endif
} dft_exc_state;

static inline void dft_exc_save(dft_exc_state *s)
{
#if PY_VERSION_HEX >= 0x030C0000
    s->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&s->t, &s->v, &s->tb);
#endif
}

static inline void dft_exc_restore(dft_exc_state *s)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(s->exc);
#else
    PyErr_Restore(s->t, s->v, s->tb);
#endif
}

/* profile/wrap.c */
int dft_wrap_ready(void);
PyObject *dft_wrap_new(ProfileObject *p, PyObject *func, PyObject *name, int force_static);

/* profile/loop.c */
int dft_loop_ready(void);
PyObject *dft_loop_new(ProfileObject *p, PyObject *iterable, PyObject *iter_name,
                       PyObject *block_name, PyObject *counter_key);

#endif
