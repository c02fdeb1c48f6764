/* testing/dict_args.c: an int field of a dict the tests pass (testing.h), for
 * the converters' entry points (cupti.c, torch.c): here, below the module
 * (testcore.c), which registers them, so that no two files call each other.
 * GIL held. */
#include "testing/testing.h"

#include <stdint.h>

#include "binding/pyargs.h"

int dft_testing_dict_i64(PyObject *d, const char *what, const char *key, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v)
        return 0;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s['%s'] must be an int, not %.100s", what, key,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    return dft_pyargs_int64(v, key, out);
}
