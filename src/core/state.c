/* core/state.c: the one instance of the tracer's global state, and the
 * lifecycle hooks' table (filled by the integrations and core/identity.c,
 * run by core/tracer.c). */
#include "core/state.h"

dft_trace_status dft_trace;

_Atomic int dft_threads_parked;

dft_globals dft_g = {
    .life_lock = PTHREAD_MUTEX_INITIALIZER,
    .registry_lock = PTHREAD_MUTEX_INITIALIZER,
    .next_id_block = 1,
    .chunk_cap = DFT_DEFAULT_WRITE_BUFFER + DFT_REC_MAX,
    .flush_threshold = DFT_DEFAULT_WRITE_BUFFER,
};

/* Any thread, no GIL. */
int64_t dft_trace_pid(void) { return dft_g.pid; }

/* ---- lifecycle hooks ---------------------------------------------------- */

#define DFT_HOOKS_MAX 8
static _Atomic(dft_lifecycle_hook) hooks[DFT_HOOKS_MAX];

/* Any thread, no GIL. */
int dft_add_lifecycle_hook(dft_lifecycle_hook fn)
{
    for (int i = 0; i < DFT_HOOKS_MAX; i++) {
        dft_lifecycle_hook none = NULL;
        if (atomic_load(&hooks[i]) == fn || atomic_compare_exchange_strong(&hooks[i], &none, fn))
            return 0;
    }
    return -1;
}

/* The thread that starts, flushes, forks or finalizes the trace. */
void dft_run_lifecycle_hooks(dft_hook_event ev)
{
    for (int i = 0; i < DFT_HOOKS_MAX; i++) {
        dft_lifecycle_hook fn = atomic_load(&hooks[i]);
        if (fn)
            fn(ev);
    }
}
