/* torch/profiler_records.h: torch.profiler events as dftracer records
 * (torch/profiler_records.c).
 *
 * What FunctionEvent would hold is derived here from the raw Kineto fields:
 * memory attributed to the ops around each "[memory]" record, the op tree
 * (folding an op into its same-named only child, as torch does), the CPU and
 * device time shares, and the "PP" event written for each.  Pure: no Python,
 * no torch, no tracer state, so tests feed it synthetic events (the test
 * extension's _torch_records_for_test).  torch/kineto.c fills the records
 * from a profiler; torch/trace_handler.c writes them. */
#ifndef DFT_TORCH_PROFILER_RECORDS_H
#define DFT_TORCH_PROFILER_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "dftracer.h"

/* c10::DeviceType values (stable across torch releases). */
enum {
    DEV_CPU = 0,
    DEV_CUDA = 1,
    DEV_MKLDNN = 2,
    DEV_IDEEP = 5,
    DEV_HIP = 6,
    DEV_XPU = 12,
    DEV_MPS = 13,
    DEV_HPU = 15,
    DEV_MTIA = 19,
    DEV_PRIVATEUSE1 = 20,
};

enum { KIND_OP = 0, KIND_MEMORY = 1, KIND_OOM = 2 };
/* Set on a "[memory]" record attributed to an op: not written on its own. */
#define KIND_ATTRIBUTED 0x80

/* One profiler event as it will be written. */
typedef struct pp_event {
    void *name_owner;         /* what holds the name's bytes (torch/kineto.c's str) */
    const char *utf8;
    size_t len;
    int64_t start_ns, end_ns; /* Kineto clock (epoch ns) */
    int64_t tid;              /* OS thread (CPU) or stream (device) */
    int64_t thread;           /* profiler thread number: groups the CPU tree */
    int64_t corr, linked;
    int64_t input_size, flops;
    int64_t cpu_mem, dev_mem;
    double cpu_pct, dev_pct;
    int64_t parent; /* enclosing CPU op on the same thread, or -1 */
    int32_t nchild;
    int32_t device_type, device_index;
    uint8_t is_async, is_annotation, kind;
    uint8_t folded; /* merged into its same-named parent, as torch does */
} pp_event;

/* A "[memory]" record: attributed to the CPU ops around it, or written on its
 * own when no op encloses it. */
typedef struct pp_mem {
    int64_t ts_ns;
    int64_t cpu, dev;
    size_t ev; /* index into the staging event array (kind KIND_MEMORY) */
} pp_mem;

typedef struct pp_vec {
    pp_event *ev;
    size_t n, cap;
    pp_mem *mem;
    size_t nmem, capmem;
} pp_vec;

/* A new zeroed event at the end of v; NULL when out of memory. */
pp_event *dft_pp_push(pp_vec *v);
/* Marks v's last event, a "[memory]" record (kind KIND_MEMORY, its bytes in
 * cpu_mem/dev_mem), for dft_pp_attribute_memory.  0, or -1 when out of memory. */
int dft_pp_note_memory(pp_vec *v);
/* Frees v's arrays (not what the events' name_owner holds). */
void dft_pp_free(pp_vec *v);

/* e's name is s. */
int dft_pp_name_is(const pp_event *e, const char *s);
/* Utility ops torch leaves out of prof.events(). */
int dft_pp_filtered_name(const pp_event *e);
/* Devices whose "[memory]" records count as CPU or as device memory. */
int dft_pp_is_cpu_mem_device(int32_t t);
int dft_pp_is_gpu_mem_device(int32_t t);
/* a * b for non-negative counts, INT64_MAX when it overflows. */
int64_t dft_pp_sat_mul(int64_t a, int64_t b);

/* Attributes memory records to the CPU ops whose [start, end] holds them
 * (any thread, as torch does) and marks those KIND_ATTRIBUTED.  0, or -1
 * when out of memory. */
int dft_pp_attribute_memory(pp_vec *v);

/* Builds the op tree, folds ops as torch does, and sets cpu_pct (and with
 * use_device, dev_pct) as torch's table computes them.  Not reentrant (its
 * sort reads a static base): callers hold the GIL.  0, or -1 when out of
 * memory. */
int dft_pp_compute_shares(pp_vec *v, int use_device);

/* The args of a PP event (keys: docs/torch-profiler.md). */
#define DFT_PP_NARGS 9

/* Fills ev (and args, which it points to) with the PP event of e on the
 * tracer clock (offset_ns: tracer clock minus Kineto clock).  ev.pid is 0:
 * the caller puts device events on their lane (dft_pp_device_lane_pid).
 * Returns 0 when e is not written (an attributed memory record, a folded op). */
int dft_pp_to_event(const pp_event *e, int64_t offset_ns, dft_arg args[DFT_PP_NARGS],
                    dft_event *ev);

/* Device lanes are separate "processes" in viewers: one per (process, device),
 * kept below 2^31 and away from real pids (pid_max is at most 2^22). */
int64_t dft_pp_device_lane_pid(int64_t pid, int32_t index);
/* "cuda", "hip", ... for a device type ("device" when unknown). */
const char *dft_pp_device_label(int32_t t);

#endif
