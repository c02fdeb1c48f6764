/* torch/module.c: the zero-code torch hooks' one face to the module
 * (integrations.h's dft_autotrace_register): each part's types and
 * functions, registered in turn, so that no part registers another and
 * autotrace_steps.c, the state they share, stays at the bottom.  GIL held
 * (PyInit__core). */
#include "integrations.h"
#include "torch/autotrace.h"

int dft_autotrace_register(PyObject *module)
{
    if (dft_at_steps_register(module) < 0 || dft_at_hooks_register(module) < 0 ||
        dft_at_forward_register(module) < 0 || dft_at_data_register(module) < 0 ||
        dft_at_calls_register(module) < 0)
        return -1;
    return 0;
}
