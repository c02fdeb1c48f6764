/* reader/oserror.c: the OSError every Python entry point of the readers
 * raises when dft_rd_open fails, so that they all name the path alike.  GIL
 * held. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/reader.h"
#include "reader/tools.h"

#include <errno.h>

void dft_rd_raise_open_error(PyObject *path, const dft_rd *rd, int err)
{
    if (!rd->not_regular) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        return;
    }
    /* errno alone would say "Invalid argument": say what the file is */
    PyObject *args = Py_BuildValue("(isO)", err, rd->err, path);
    if (args) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
}
