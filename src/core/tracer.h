/* core/tracer.h: the tracer's lifecycle (core/tracer.c): start, lazy start
 * from the environment, finalize, fork, signals, and the hooks integrations
 * register to follow it. */
#ifndef DFT_CORE_TRACER_H
#define DFT_CORE_TRACER_H

#include <stdint.h>

/* The version, from dftracer/_version.py (setup.py defines it). */
#ifndef DFT_VERSION
#error "DFT_VERSION is defined by setup.py from dftracer/_version.py"
#endif

int dft_start(const char *log_file, const char *data_dir, int64_t process_id, int explicit_init,
              char *err, size_t errlen);
int dft_lazy_start(void);
void dft_finalize(void);
int dft_is_enabled_env(void);

/* Lifecycle hooks for integrations with state tied to the trace (I/O
 * interception, CUPTI), run in registration order on the thread doing the
 * transition, without the GIL:
 *   OPENED      under the lifecycle lock, right after the header is recorded
 *               and before any other thread can see tracing start;
 *   STARTED     after the lock is released (may be slow: dlopen, cuInit);
 *   FLUSH       before dft_flush() writes;
 *   FINALIZING  under the lifecycle lock before the end event, while events
 *               are still recorded;
 *   ABANDONED   under the lock, when a forked child cannot open its file.
 * Hooks called under the lock must not start or finalize tracing. */
typedef enum {
    DFT_HOOK_OPENED = 0,
    DFT_HOOK_STARTED,
    DFT_HOOK_FLUSH,
    DFT_HOOK_FINALIZING,
    DFT_HOOK_ABANDONED,
} dft_hook_event;
typedef void (*dft_lifecycle_hook)(dft_hook_event ev);
int dft_add_lifecycle_hook(dft_lifecycle_hook fn); /* 0, or -1 when the table is full */

#endif
