/* profile/emit.h: values and event writing shared by the dft_fn
 * object, its wrappers and its loops (profile/emit.c).  GIL held. */
#ifndef DFT_PROFILE_EMIT_H
#define DFT_PROFILE_EMIT_H

#include "profile/fn_object.h"

extern PyObject *dft_sa_names[DFT_SA_N];        /* interned "epoch", "step", ... */
extern const char *const dft_sa_keys[DFT_SA_N]; /* the same as C strings */

/* Interns dft_sa_names; 0, or -1 with an exception set. */
int dft_emit_ready(void);

/* Converts v into a dft_val (int for ints; floats too unless as_int); returns
 * 0 when v is not a number (nothing set, no exception). */
int dft_val_from(PyObject *v, int as_int, dft_val *out);

/* Writes one complete event of p's category.  Adds p's base values (over its
 * parents'), then sa (may be NULL), counter_key=counter when counter_key is not
 * NULL, and error=<exception type name> when exc_type is not NULL.  own is the
 * scope the caller opened for this event: the event takes its id, level and
 * parent (core/core.h); NULL: none, the event nests in the innermost scope.
 * Must be called with no exception set; never raises (reports failures as
 * unraisable). */
void dft_profile_emit(ProfileObject *p, const dft_scope_tok *own, PyObject *name, int64_t ts,
                      int64_t dur, const dft_stepargs *sa, PyObject *counter_key,
                      int64_t counter, PyObject *exc_type);

/* Like dft_profile_emit but keeps a pending exception across the call and
 * marks the event with its type (StopIteration is not an error). */
void dft_profile_emit_keep_error(ProfileObject *p, const dft_scope_tok *own, PyObject *name,
                                 int64_t ts, int64_t dur, const dft_stepargs *sa,
                                 PyObject *counter_key, int64_t counter);

#endif
