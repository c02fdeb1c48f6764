/* gpu/cupti_tracer.h: GPU activity through CUPTI, loaded at run time with dlopen.
 * (Not named cupti.h, which is CUPTI's own header.)
 *
 * Every function takes its own lock and may be called from any thread without
 * the GIL; none calls into Python.  Without DFT_HAVE_CUPTI they exist and say
 * that dftracer was built without the CUPTI headers. */
#ifndef DFT_CUPTI_TRACER_H
#define DFT_CUPTI_TRACER_H

#include <stddef.h>
#include <stdint.h>

#define DFT_CUPTI_REASON_MAX 2048

/* 1 when libcupti and a CUDA device can be used; else 0 with the reason. */
int dft_cupti_probe(char *reason, size_t cap);

/* Asks for GPU activity: recorded now if tracing is active, else from the
 * next trace start.  Returns 0, or -1 with the reason (nothing changed). */
int dft_cupti_enable(char *reason, size_t cap);

/* Stops recording, writing the activity CUPTI still holds into the trace. */
void dft_cupti_disable(void);

/* 1 while activity kinds are enabled and records go into the trace. */
int dft_cupti_running(void);

/* Steps aside for another CUPTI client (torch.profiler): flushes and disables
 * ours.  Returns 1 if ours was running.  dft_cupti_resume() takes over again
 * (re-registering the buffer callbacks) when GPU activity is still wanted;
 * returns 1 if it is running afterwards. */
int dft_cupti_pause(void);
int dft_cupti_resume(void);

/* A directory to look for libcupti in, after CUDA_HOME (site-packages). */
void dft_cupti_add_search_dir(const char *dir);

/* Installs the lifecycle hook: DFTRACER_ENABLE_CUPTI at trace start, flush,
 * and the final flush before the end event. */
void dft_cupti_install(void);

/* The tracer-clock minus CUPTI-clock offset, in ns, measured against
 * gpu_now (for tests: any clock). */
int64_t dft_cupti_calibrate(int (*gpu_now)(uint64_t *ns, void *arg), void *arg);

#ifdef DFT_HAVE_CUPTI
#include "gpu/records.h"

/* Converts one record and emits it (naming its lane once per trace file).
 * Returns 1 when an event was recorded.  Any thread, no GIL. */
int dft_cupti_emit(const CUpti_Activity *rec, const dft_cupti_ctx *ctx);

/* The kernel-name demangler (__cxa_demangle), or NULL when none is loaded. */
dft_cupti_demangle_fn dft_cupti_demangler(void);
#endif

#endif
