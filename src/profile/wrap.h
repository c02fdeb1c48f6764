/* profile/wrap.h: what dft_fn.log() returns (profile/wrap.c).  GIL held. */
#ifndef DFT_PROFILE_WRAP_H
#define DFT_PROFILE_WRAP_H

#include "profile/fn_object.h"

int dft_wrap_ready(void);
PyObject *dft_wrap_new(ProfileObject *p, PyObject *func, PyObject *name, int force_static);

#endif
