/* gpu/records.c: the pure conversion of CUPTI activity records (kernels,
 * copies, memsets, synchronizations, runtime/driver API calls) into dftracer
 * events with cat "CUDA".  Nothing here calls CUPTI or the core. */
#ifdef DFT_HAVE_CUPTI

#include "gpu/records.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* ---- clock ------------------------------------------------------------- */

/* Floor division for possibly negative sums (a clock offset can be either sign). */
static int64_t div_floor(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

int64_t dft_cupti_us_floor(uint64_t cupti_ns, int64_t offset_ns)
{
    return div_floor((int64_t)cupti_ns + offset_ns, 1000);
}

int64_t dft_cupti_us_ceil(uint64_t cupti_ns, int64_t offset_ns)
{
    return -div_floor(-((int64_t)cupti_ns + offset_ns), 1000);
}

/* ---- context -> device ------------------------------------------------- */

#define CTX_SLOTS 1024
static _Atomic uint32_t ctx_device[CTX_SLOTS]; /* device + 1; 0 unknown */

/* Any thread, no GIL. */
void dft_cupti_note_context(uint32_t context, uint32_t device)
{
    if (context < CTX_SLOTS)
        atomic_store_explicit(&ctx_device[context], device + 1, memory_order_relaxed);
}

/* Any thread, no GIL. */
int64_t dft_cupti_context_device(uint32_t context)
{
    if (context >= CTX_SLOTS)
        return -1;
    return (int64_t)atomic_load_explicit(&ctx_device[context], memory_order_relaxed) - 1;
}

/* ---- names ------------------------------------------------------------- */

const char *dft_cupti_copy_kind(unsigned kind)
{
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return kind < sizeof names / sizeof *names ? names[kind] : "Unknown";
}

const char *dft_cupti_memory_kind(unsigned kind)
{
    static const char *const names[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                        "Array",   "Managed",  "Device Static", "Managed Static"};
    return kind < sizeof names / sizeof *names ? names[kind] : "Unknown";
}

const char *dft_cupti_sync_type(unsigned type)
{
    static const char *const names[] = {"Unknown", "Event Synchronize", "Stream Wait Event",
                                        "Stream Synchronize", "Context Synchronize"};
    return type < sizeof names / sizeof *names ? names[type] : "Unknown";
}

/* The API calls shown: launches, copies, memsets and waits.  Everything else
 * (cudaGetDevice, cudaStreamIsCapturing, ...) would only bury them. */
static int api_shown(const char *name)
{
    static const char *const prefixes[] = {"cudaLaunch", "cuLaunch",   "cudaGraphLaunch",
                                           "cuGraphLaunch", "cudaMemcpy", "cuMemcpy",
                                           "cudaMemset", "cuMemset",   "cudaStreamWaitEvent",
                                           "cuStreamWaitEvent"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return strstr(name, "Synchronize") != NULL;
}

/* ---- building events --------------------------------------------------- */

static void add_int(dft_cupti_out *o, const char *key, int64_t v)
{
    if (o->ev.nargs < DFT_CUPTI_MAX_ARGS)
        o->args[o->ev.nargs++] = (dft_arg){.key = key, .type = DFT_ARG_INT, .v.i = v};
}

static void add_str(dft_cupti_out *o, const char *key, const char *s)
{
    if (o->ev.nargs < DFT_CUPTI_MAX_ARGS)
        o->args[o->ev.nargs++] =
            (dft_arg){.key = key, .type = DFT_ARG_STR, .v.s = {s, strlen(s)}};
}

static void set_name(dft_cupti_out *o, const char *name)
{
    o->ev.name = name;
    o->ev.name_len = strlen(name);
}

/* Returns 0 for a record whose times are unknown (a forced flush hands out
 * records of work still running with zero timestamps): such a record is not
 * shown rather than shown with an invented duration. */
static int set_times(dft_cupti_out *o, uint64_t start, uint64_t end, int64_t offset_ns)
{
    if (start == 0 || end < start)
        return 0;
    o->ev.ts = dft_cupti_us_floor(start, offset_ns);
    o->ev.dur = dft_cupti_us_ceil(end, offset_ns) - o->ev.ts;
    return 1;
}

/* A device/stream lane; device -1 (unknown) and the invalid stream get their
 * own lanes so that nothing lands on a real thread. */
static void set_device_lane(dft_cupti_out *o, int64_t device, uint32_t stream)
{
    o->device_lane = 1;
    o->device = device;
    o->stream = stream;
    o->ev.tid = DFT_CUPTI_LANE_BASE | ((int64_t)((uint64_t)device & 0xffff) << 32) | stream;
    char dev[24];
    if (device >= 0)
        snprintf(dev, sizeof dev, "%lld", (long long)device);
    else
        snprintf(dev, sizeof dev, "?");
    if (stream == CUPTI_SYNCHRONIZATION_INVALID_VALUE)
        snprintf(o->lane_name, sizeof o->lane_name, "GPU %s (context)", dev);
    else
        snprintf(o->lane_name, sizeof o->lane_name, "GPU %s stream %u", dev, stream);
}

static int convert_kernel(const dft_cupti_kernel *k, const dft_cupti_ctx *ctx, dft_cupti_out *o)
{
    const char *name = k->name ? k->name : "kernel";
    const char *nice = ctx->demangle ? ctx->demangle(name, o->name, sizeof o->name) : NULL;
    set_name(o, nice ? nice : name);
    if (!set_times(o, k->start, k->end, ctx->offset_ns))
        return 0;
    set_device_lane(o, k->deviceId, k->streamId);
    dft_cupti_note_context(k->contextId, k->deviceId);
    add_int(o, "device", k->deviceId);
    add_int(o, "context", k->contextId);
    add_int(o, "stream", k->streamId);
    add_int(o, "correlation", k->correlationId);
    add_int(o, "grid_x", k->gridX);
    add_int(o, "grid_y", k->gridY);
    add_int(o, "grid_z", k->gridZ);
    add_int(o, "block_x", k->blockX);
    add_int(o, "block_y", k->blockY);
    add_int(o, "block_z", k->blockZ);
    add_int(o, "registers", k->registersPerThread);
    add_int(o, "static_shared_mem", k->staticSharedMemory);
    add_int(o, "dynamic_shared_mem", k->dynamicSharedMemory);
    return 1;
}

static int convert_memcpy(const dft_cupti_memcpy *m, const dft_cupti_ctx *ctx, dft_cupti_out *o)
{
    snprintf(o->name, sizeof o->name, "Memcpy %s", dft_cupti_copy_kind(m->copyKind));
    set_name(o, o->name);
    if (!set_times(o, m->start, m->end, ctx->offset_ns))
        return 0;
    set_device_lane(o, m->deviceId, m->streamId);
    dft_cupti_note_context(m->contextId, m->deviceId);
    add_int(o, "bytes", (int64_t)m->bytes);
    add_str(o, "copy_kind", dft_cupti_copy_kind(m->copyKind));
    add_str(o, "src_kind", dft_cupti_memory_kind(m->srcKind));
    add_str(o, "dst_kind", dft_cupti_memory_kind(m->dstKind));
    add_int(o, "device", m->deviceId);
    add_int(o, "context", m->contextId);
    add_int(o, "stream", m->streamId);
    add_int(o, "correlation", m->correlationId);
    return 1;
}

static int convert_memset(const dft_cupti_memset *m, const dft_cupti_ctx *ctx, dft_cupti_out *o)
{
    set_name(o, "Memset");
    if (!set_times(o, m->start, m->end, ctx->offset_ns))
        return 0;
    set_device_lane(o, m->deviceId, m->streamId);
    dft_cupti_note_context(m->contextId, m->deviceId);
    add_int(o, "bytes", (int64_t)m->bytes);
    add_int(o, "value", m->value);
#ifdef DFT_CUPTI_MEMSET_HAS_MEMORY_KIND
    add_str(o, "memory_kind", dft_cupti_memory_kind(m->memoryKind));
#endif
    add_int(o, "device", m->deviceId);
    add_int(o, "context", m->contextId);
    add_int(o, "stream", m->streamId);
    add_int(o, "correlation", m->correlationId);
    return 1;
}

static int convert_sync(const dft_cupti_sync *s, const dft_cupti_ctx *ctx, dft_cupti_out *o)
{
    set_name(o, dft_cupti_sync_type((unsigned)s->type));
    if (!set_times(o, s->start, s->end, ctx->offset_ns))
        return 0;
    int64_t device = dft_cupti_context_device(s->contextId);
    set_device_lane(o, device, s->streamId);
    add_str(o, "sync_type", dft_cupti_sync_type((unsigned)s->type));
    if (device >= 0)
        add_int(o, "device", device);
    add_int(o, "context", s->contextId);
    if (s->streamId != CUPTI_SYNCHRONIZATION_INVALID_VALUE)
        add_int(o, "stream", s->streamId);
    if (s->cudaEventId != CUPTI_SYNCHRONIZATION_INVALID_VALUE)
        add_int(o, "event", s->cudaEventId);
    add_int(o, "correlation", s->correlationId);
    return 1;
}

/* Runtime and driver API calls, on the host thread that made them. */
static int convert_api(const dft_cupti_api *a, const dft_cupti_ctx *ctx, dft_cupti_out *o)
{
    const char *raw = ctx->api_name ? ctx->api_name(a->kind, a->cbid) : NULL;
    if (!raw)
        return 0;
    /* cudaLaunchKernel_v7000 -> cudaLaunchKernel */
    size_t n = strlen(raw);
    const char *v = NULL;
    for (const char *p = strstr(raw, "_v"); p; p = strstr(p + 1, "_v"))
        v = p;
    if (v && v > raw && strspn(v + 2, "0123456789") == strlen(v + 2) && v[2])
        n = (size_t)(v - raw);
    if (n >= sizeof o->name)
        n = sizeof o->name - 1;
    memcpy(o->name, raw, n);
    o->name[n] = '\0';
    if (!api_shown(o->name))
        return 0;
    set_name(o, o->name);
    if (!set_times(o, a->start, a->end, ctx->offset_ns))
        return 0;
    o->ev.tid = a->threadId ? (int64_t)a->threadId : 0;
    add_int(o, "correlation", a->correlationId);
    add_str(o, "api", a->kind == CUPTI_ACTIVITY_KIND_DRIVER ? "driver" : "runtime");
    if (a->returnValue != 0)
        add_int(o, "error", a->returnValue);
    return 1;
}

/* Any thread, no GIL. */
int dft_cupti_convert(const CUpti_Activity *rec, const dft_cupti_ctx *ctx, dft_cupti_out *out)
{
    /* Not a memset of the whole struct: this runs once per GPU record. */
    out->ev = (dft_event){.cat = DFT_CUPTI_CAT,
                          .cat_len = sizeof DFT_CUPTI_CAT - 1,
                          .ph = DFT_PH_COMPLETE,
                          .flags = DFT_EV_NO_NESTING, /* recorded on CUPTI's thread */
                          .args = out->args};
    out->device_lane = 0;
    out->device = -1;
    out->stream = 0;
    out->name[0] = out->lane_name[0] = '\0';
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return convert_kernel((const dft_cupti_kernel *)rec, ctx, out);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return convert_memcpy((const dft_cupti_memcpy *)rec, ctx, out);
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return convert_memset((const dft_cupti_memset *)rec, ctx, out);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
        return convert_sync((const dft_cupti_sync *)rec, ctx, out);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return convert_api((const dft_cupti_api *)rec, ctx, out);
    default:
        return 0;
    }
}

#endif /* DFT_HAVE_CUPTI */
