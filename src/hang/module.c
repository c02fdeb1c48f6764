/* hang/module.c: the hang folder's one face to the module
 * (integrations.h's dft_hang_register): the open spans, then the stacks
 * dumper.  GIL held (PyInit__core). */
#include "hang/parts.h"
#include "integrations.h"

int dft_hang_register(PyObject *module)
{
    if (dft_hang_spans_register(module) < 0 || dft_hang_stacks_register(module) < 0)
        return -1;
    return 0;
}
