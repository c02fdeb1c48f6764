/* gpu/records.h: converting CUPTI activity records to dftracer events.
 *
 * The conversion is pure: it reads one record and fills a dft_event (plus its
 * arguments and lane) without calling CUPTI or the core, so tests can feed it
 * synthetic records built in C (see gpu/module.c). */
#ifndef DFT_CUPTI_RECORDS_H
#define DFT_CUPTI_RECORDS_H

#ifdef DFT_HAVE_CUPTI

#include <stdint.h>

#include <cupti.h>

#include "dftracer.h"

/* Record layouts.  Only the leading fields, identical across record versions,
 * are read, so the newest layout the header defines is used for CUDA 13 and
 * the oldest (present in every CUPTI) otherwise. */
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 dft_cupti_kernel;
typedef CUpti_ActivityMemcpy6 dft_cupti_memcpy;
typedef CUpti_ActivityMemset4 dft_cupti_memset;
typedef CUpti_ActivitySynchronization2 dft_cupti_sync;
#define DFT_CUPTI_MEMSET_HAS_MEMORY_KIND 1
#else
typedef CUpti_ActivityKernel4 dft_cupti_kernel;
typedef CUpti_ActivityMemcpy dft_cupti_memcpy;
typedef CUpti_ActivityMemset dft_cupti_memset;
typedef CUpti_ActivitySynchronization dft_cupti_sync;
#endif
typedef CUpti_ActivityAPI dft_cupti_api;

#define DFT_CUPTI_CAT "CUDA"
#define DFT_CUPTI_MAX_ARGS 16
/* Device/stream lanes: tid = base | device << 32 | stream, inside this
 * process's pid, far above any OS thread id and exact in a double. */
#define DFT_CUPTI_LANE_BASE ((int64_t)1 << 48)

/* Demangles a kernel name into buf (returning buf), or returns NULL. */
typedef const char *(*dft_cupti_demangle_fn)(const char *name, char *buf, size_t cap);

/* What the conversion needs from its caller. */
typedef struct dft_cupti_ctx {
    int64_t offset_ns; /* tracer clock (ns) minus CUPTI clock (ns) */
    /* Name of a runtime/driver API callback id, or NULL (may be NULL). */
    const char *(*api_name)(CUpti_ActivityKind kind, uint32_t cbid);
    dft_cupti_demangle_fn demangle; /* may be NULL */
} dft_cupti_ctx;

/* One converted event: the event, its argument storage and its lane. */
typedef struct dft_cupti_out {
    dft_event ev;
    dft_arg args[DFT_CUPTI_MAX_ARGS];
    char name[512];      /* names built here (memcpy kinds, demangled, API) */
    int device_lane;     /* 1: a device/stream lane that needs a name */
    int64_t device;      /* -1 when unknown */
    uint32_t stream;
    char lane_name[64];
} dft_cupti_out;

/* Converts rec into out.  Returns 1 when out holds an event to emit, 0 for a
 * record dftracer does not show (other kinds, API calls that neither launch,
 * copy, set nor synchronize).  Any thread, no GIL. */
int dft_cupti_convert(const CUpti_Activity *rec, const dft_cupti_ctx *ctx, dft_cupti_out *out);

/* Tracer-clock microseconds of a CUPTI timestamp (start rounds down, end up,
 * so an event that took any time has a positive duration). */
int64_t dft_cupti_us_floor(uint64_t cupti_ns, int64_t offset_ns);
int64_t dft_cupti_us_ceil(uint64_t cupti_ns, int64_t offset_ns);

/* Remembers which device a context belongs to (learned from kernel, copy and
 * memset records) for synchronization records, which carry only the context. */
void dft_cupti_note_context(uint32_t context, uint32_t device);
int64_t dft_cupti_context_device(uint32_t context);

/* Short names used in args. */
const char *dft_cupti_copy_kind(unsigned kind);
const char *dft_cupti_memory_kind(unsigned kind);
const char *dft_cupti_sync_type(unsigned type);

#endif /* DFT_HAVE_CUPTI */
#endif
