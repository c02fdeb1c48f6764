/* profile/loop.h: the iterator behind dft_fn.iter() (profile/loop.c).  GIL held. */
#ifndef DFT_PROFILE_LOOP_H
#define DFT_PROFILE_LOOP_H

#include "profile/fn_object.h"

int dft_loop_ready(void);
PyObject *dft_loop_new(ProfileObject *p, PyObject *iterable, PyObject *iter_name,
                       PyObject *block_name, PyObject *counter_key);

#endif
