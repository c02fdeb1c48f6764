/* testing/testing.h: the test extension, _dftracer_testcore (testing/testcore.c).
 *
 * Built only by the test and benchmark targets (setup.py with
 * DFTRACER_BUILD_TESTCORE), never into the wheel: the same sources as
 * dftracer._core compiled with DFT_TESTING, which turns on the core's test
 * hooks, plus the entry points here.  The module holds everything
 * dftracer._core holds and these (docs/architecture.md, "The test
 * extension"). */
#ifndef DFT_TESTING_H
#define DFT_TESTING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef DFT_TESTING
#error "src/testing/ is built only into the test extension (setup.py, DFTRACER_BUILD_TESTCORE)"
#endif

/* Each adds its functions to the test module; 0, or -1 with an exception set. */
int dft_testing_cupti_register(PyObject *module); /* testing/cupti.c */
int dft_testing_torch_register(PyObject *module); /* testing/torch.c */
int dft_testing_walk_register(PyObject *module);  /* testing/walk.c */

/* dict[key] as an int64 into *out when present (else *out is kept); 0, or
 * -1 with TypeError naming what['key'] (testing/dict_args.c). */
int dft_testing_dict_i64(PyObject *d, const char *what, const char *key, int64_t *out);

#endif
