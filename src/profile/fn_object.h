/* profile/fn_object.h: the dft_fn ("Profile") type's layout and inline helpers, shared by its files (named for no file: no code of profile.c is declared here), each
 * layered on the ones below it:
 *   profile.c  the dft_fn object: state, update(), context manager, flush
 *   wrap.c     decorated-callable wrappers and generator/coroutine proxies
 *   loop.c     p.iter() loops
 *   emit.c     values and event writing that all of them use
 * Everything here needs the GIL. */
#ifndef DFT_PROFILE_FN_OBJECT_H
#define DFT_PROFILE_FN_OBJECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

/* True when p and its parents are enabled and tracing is (or lazily becomes)
 * active.  The cost of a disabled decorated call is this function. */
static inline int dft_profile_on(const ProfileObject *p)
{
    for (; p; p = p->parent)
        if (!p->enable)
            return 0;
    if (dft_trace_active())
        return 1;
    /* Inline for the usual "off for good" states; the rest may start lazily. */
    int st = dft_trace_state();
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

#endif
