/* core/state.c: the one instance of the tracer's global state. */
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
