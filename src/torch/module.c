/* torch/module.c: the torch folder's one face to the module
 * (integrations.h's dft_torch_register): torch.profiler's handler, the
 * torch.compile timing and frame hook, DDP's bucket hook, then the
 * zero-code hooks' parts (autotrace_steps.c, the state they share, first, so
 * that no part registers another), then MemoryTracker and the triggered
 * windows' hooks in the core.  GIL held
 * (PyInit__core). */
#include "integrations.h"
#include "torch/parts.h"

int dft_torch_register(PyObject *module)
{
    if (dft_torch_profiler_register(module) < 0 || dft_dynamo_state_register(module) < 0 ||
        dft_dynamo_register(module) < 0 || dft_frame_hook_register(module) < 0 ||
        dft_ddp_hook_register(module) < 0)
        return -1;
    if (dft_at_steps_register(module) < 0 || dft_at_hooks_register(module) < 0 ||
        dft_at_forward_register(module) < 0 || dft_at_data_register(module) < 0 ||
        dft_at_calls_register(module) < 0)
        return -1;
    return dft_memory_register(module) < 0 ? -1 : dft_windows_register(module);
}
