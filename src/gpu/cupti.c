/* gpu/cupti.c: GPU activity through CUPTI.
 *
 * libcupti is never linked: it is found and loaded with dlopen the first time
 * GPU activity is asked for, and the few functions used are resolved into a
 * table.  CUPTI hands out activity in buffers we allocate; it gives them back,
 * full, on its own threads, where each record is converted (gpu/records.c)
 * and emitted through the core's C API without the GIL.  GPU timestamps are
 * moved onto the tracer clock by an offset measured when recording starts. */
#include "gpu/cupti_tracer.h"

#ifndef DFT_HAVE_CUPTI

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

static const char no_headers[] =
    "dftracer was built without CUPTI support (cupti.h and cuda.h were not found under "
    "CUDA_HOME, CUDA_PATH or /usr/local/cuda when it was compiled); rebuild on a machine "
    "with the CUDA toolkit";

int dft_cupti_probe(char *reason, size_t cap)
{
    snprintf(reason, cap, "%s", no_headers);
    return 0;
}

int dft_cupti_enable(char *reason, size_t cap)
{
    snprintf(reason, cap, "%s", no_headers);
    return -1;
}

void dft_cupti_disable(void) {}
int dft_cupti_running(void) { return 0; }
int dft_cupti_pause(void) { return 0; }
int dft_cupti_resume(void) { return 0; }
void dft_cupti_add_search_dir(const char *dir) { (void)dir; }

/* DFTRACER_ENABLE_CUPTI still says why nothing GPU-side is traced. */
static void lifecycle(dft_hook_event ev)
{
    if (ev == DFT_HOOK_STARTED && dft_trace_config()->enable_cupti)
        dft_log(DFT_LOG_ERROR, "GPU activity not traced: %s", no_headers);
}

void dft_cupti_install(void) { dft_add_lifecycle_hook(lifecycle); }

int64_t dft_cupti_calibrate(int (*gpu_now)(uint64_t *ns, void *arg), void *arg)
{
    (void)gpu_now;
    (void)arg;
    return 0;
}

#else /* DFT_HAVE_CUPTI */

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"

/* ---- the function table ----------------------------------------------- */

typedef struct cupti_fns {
    CUptiResult (*GetVersion)(uint32_t *);
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*GetTimestamp)(uint64_t *);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
    CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char **);
    CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType); /* optional */
} cupti_fns;

static const struct {
    const char *name;
    size_t offset;
    int optional;
} fn_names[] = {
    {"cuptiGetVersion", offsetof(cupti_fns, GetVersion), 0},
    {"cuptiGetResultString", offsetof(cupti_fns, GetResultString), 0},
    {"cuptiGetTimestamp", offsetof(cupti_fns, GetTimestamp), 0},
    {"cuptiActivityEnable", offsetof(cupti_fns, ActivityEnable), 0},
    {"cuptiActivityDisable", offsetof(cupti_fns, ActivityDisable), 0},
    {"cuptiActivityRegisterCallbacks", offsetof(cupti_fns, ActivityRegisterCallbacks), 0},
    {"cuptiActivityGetNextRecord", offsetof(cupti_fns, ActivityGetNextRecord), 0},
    {"cuptiActivityFlushAll", offsetof(cupti_fns, ActivityFlushAll), 0},
    {"cuptiActivityGetNumDroppedRecords", offsetof(cupti_fns, ActivityGetNumDroppedRecords), 0},
    {"cuptiGetCallbackName", offsetof(cupti_fns, GetCallbackName), 1},
    {"cuptiSetThreadIdType", offsetof(cupti_fns, SetThreadIdType), 1},
};

/* The activity kinds recorded; the first one is required. */
static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,
};
#define NKINDS (sizeof kinds / sizeof *kinds)

#define BUF_SIZE ((size_t)4 << 20)
#define BUF_MAX 32     /* buffers outstanding at once: 128 MiB, then CUPTI drops */
#define SEARCH_MAX 16

/* ---- state ------------------------------------------------------------ */

static struct {
    pthread_mutex_t lock; /* loading and the running/paused/wanted transitions */
    int load_state;       /* 0 not tried, 1 loaded, -1 failed (reason kept) */
    char reason[DFT_CUPTI_REASON_MAX];
    char lib_path[1024];
    void *lib;
    cupti_fns fn;
    int enabled[NKINDS];
    int running, paused, wanted;
    pid_t pid;                /* the process that enabled CUPTI */
    _Atomic int64_t offset_ns;
    char *search[SEARCH_MAX];
    int nsearch;
    int warned_dropped;
} cu = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Our outstanding buffers: CUPTI may hand a buffer of another client to our
 * completion callback (or ours to theirs) when the callbacks are swapped;
 * only buffers found here are read and freed. */
static struct {
    pthread_mutex_t lock;
    uint8_t *bufs[BUF_MAX];
    int n;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *result_string(CUptiResult r)
{
    const char *s = NULL;
    if (cu.fn.GetResultString && cu.fn.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    return "unknown CUPTI error";
}

/* ---- loading ----------------------------------------------------------- */

void dft_cupti_add_search_dir(const char *dir)
{
    pthread_mutex_lock(&cu.lock);
    if (cu.nsearch < SEARCH_MAX) {
        char *d = strdup(dir);
        if (d)
            cu.search[cu.nsearch++] = d;
    }
    pthread_mutex_unlock(&cu.lock);
}

static void append(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    if (n + 1 < cap)
        snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", s);
}

/* Tries every libcupti.so* in dir; the exact name first. */
static void *open_in_dir(const char *dir, char *tried, size_t cap)
{
    char pattern[PATH_MAX];
    if (snprintf(pattern, sizeof pattern, "%s/libcupti.so*", dir) >= (int)sizeof pattern)
        return NULL;
    append(tried, cap, dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return NULL;
    void *h = NULL;
    for (size_t i = 0; i < g.gl_pathc && !h; i++) {
        h = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            snprintf(cu.lib_path, sizeof cu.lib_path, "%s", g.gl_pathv[i]);
    }
    globfree(&g);
    return h;
}

/* Finds libcupti: a copy already loaded (torch's), torch's bundled copy in
 * site-packages (nvidia/cuda_cupti: the one torch will load, so that the
 * process never holds two CUPTIs), CUDA_HOME/CUDA_PATH, /usr/local/cuda, then
 * the loader's path.  DFTRACER_CUPTI_LIBRARY names the one file to use. */
static void *find_library(char *tried, size_t cap)
{
    const char *forced = getenv("DFTRACER_CUPTI_LIBRARY"); /* this file and no other */
    if (forced && *forced) {
        void *h = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
        if (h)
            snprintf(cu.lib_path, sizeof cu.lib_path, "%s", forced);
        else
            append(tried, cap, forced);
        return h;
    }
    static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8",
                                          "libcupti.so"};
    for (size_t i = 0; i < sizeof sonames / sizeof *sonames; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            snprintf(cu.lib_path, sizeof cu.lib_path, "%s (already loaded)", sonames[i]);
            return h;
        }
    }
    for (int i = 0; i < cu.nsearch; i++) {
        void *h = open_in_dir(cu.search[i], tried, cap);
        if (h)
            return h;
    }
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    static const char *const subs[] = {"lib64", "extras/CUPTI/lib64", "lib"};
    for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
        if (!roots[r] || !*roots[r])
            continue;
        for (size_t s = 0; s < sizeof subs / sizeof *subs; s++) {
            char dir[PATH_MAX];
            if (snprintf(dir, sizeof dir, "%s/%s", roots[r], subs[s]) >= (int)sizeof dir)
                continue;
            void *h = open_in_dir(dir, tried, cap);
            if (h)
                return h;
        }
    }
    append(tried, cap, "the system library path");
    for (size_t i = 0; i < sizeof sonames / sizeof *sonames; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(cu.lib_path, sizeof cu.lib_path, "%s", sonames[i]);
            return h;
        }
    }
    return NULL;
}

/* Is there a driver and a device?  cuInit is what any CUDA program does first. */
static int check_driver(char *reason, size_t cap)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(reason, cap, "no CUDA driver: libcuda.so.1 cannot be loaded (%s); "
                 "GPU activity needs an NVIDIA GPU and its driver", e ? e : "not found");
        return 0;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    if (!init || !count) {
        snprintf(reason, cap, "no CUDA driver: libcuda.so.1 lacks cuInit/cuDeviceGetCount");
        return 0;
    }
    int rc = init(0);
    int n = 0;
    if (rc != 0) {
        snprintf(reason, cap, "no usable GPU: cuInit failed with CUDA error %d "
                 "(no device, or a driver/library mismatch)", rc);
        return 0;
    }
    if (count(&n) != 0 || n <= 0) {
        snprintf(reason, cap, "no CUDA device visible (check CUDA_VISIBLE_DEVICES)");
        return 0;
    }
    return 1; /* the driver stays loaded: CUDA itself uses it */
}

/* Loads libcupti and checks for a device once; later calls return the result.
 * Under cu.lock. */
static int load_locked(void)
{
    if (cu.load_state)
        return cu.load_state > 0;
    char tried[DFT_CUPTI_REASON_MAX / 2] = "";
    void *h = find_library(tried, sizeof tried);
    if (!h) {
        snprintf(cu.reason, sizeof cu.reason,
                 "no libcupti found; looked in: %s (set CUDA_HOME, or install torch's "
                 "nvidia-cuda-cupti package)", tried);
        cu.load_state = -1;
        return 0;
    }
    for (size_t i = 0; i < sizeof fn_names / sizeof *fn_names; i++) {
        void *sym = dlsym(h, fn_names[i].name);
        if (!sym && !fn_names[i].optional) {
            snprintf(cu.reason, sizeof cu.reason, "%s lacks %s (too old a CUPTI)", cu.lib_path,
                     fn_names[i].name);
            cu.load_state = -1;
            memset(&cu.fn, 0, sizeof cu.fn);
            return 0;
        }
        memcpy((char *)&cu.fn + fn_names[i].offset, &sym, sizeof sym);
    }
    if (!check_driver(cu.reason, sizeof cu.reason)) {
        cu.load_state = -1;
        return 0;
    }
    cu.lib = h;
    cu.load_state = 1;
    dft_log(DFT_LOG_INFO, "CUPTI loaded from %s", cu.lib_path);
    return 1;
}

int dft_cupti_probe(char *reason, size_t cap)
{
    pthread_mutex_lock(&cu.lock);
    int ok = load_locked();
    snprintf(reason, cap, "%s", ok ? "" : cu.reason);
    pthread_mutex_unlock(&cu.lock);
    return ok;
}

/* ---- clock ------------------------------------------------------------- */

/* The offset from the read of the GPU clock bracketed most tightly by two
 * reads of the tracer clock. */
int64_t dft_cupti_calibrate(int (*gpu_now)(uint64_t *ns, void *arg), void *arg)
{
    int64_t best = 0, best_width = INT64_MAX;
    for (int i = 0; i < 7; i++) {
        uint64_t g;
        int64_t t0 = dft_clock_ns();
        int ok = gpu_now(&g, arg);
        int64_t t1 = dft_clock_ns();
        if (!ok)
            continue;
        if (t1 - t0 < best_width) {
            best_width = t1 - t0;
            best = t0 + (t1 - t0) / 2 - (int64_t)g;
        }
    }
    return best;
}

static int cupti_now(uint64_t *ns, void *arg)
{
    (void)arg;
    return cu.fn.GetTimestamp(ns) == CUPTI_SUCCESS;
}

/* ---- demangling and API names ------------------------------------------ */

typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);
static cxa_demangle_fn cxa_demangle;
static pthread_once_t demangle_once = PTHREAD_ONCE_INIT;

static void find_demangler(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!sym) {
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        if (h)
            sym = dlsym(h, "__cxa_demangle");
    }
    memcpy(&cxa_demangle, &sym, sizeof sym);
}

/* Demangled names by the mangled name's address (CUPTI keeps one string per
 * function), so a launch-heavy loop demangles each kernel once. */
#define DEMANGLE_SLOTS 512
static struct {
    pthread_mutex_t lock;
    struct {
        const char *key;
        char *mangled, *demangled; /* owned */
    } slot[DEMANGLE_SLOTS];
} dcache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Any thread, no GIL. */
static const char *demangle(const char *name, char *buf, size_t cap)
{
    if (!cxa_demangle || strncmp(name, "_Z", 2) != 0)
        return NULL;
    size_t i = ((uintptr_t)name >> 4) % DEMANGLE_SLOTS;
    const char *hit = NULL;
    pthread_mutex_lock(&dcache.lock);
    if (dcache.slot[i].key == name && !strcmp(dcache.slot[i].mangled, name)) {
        snprintf(buf, cap, "%s", dcache.slot[i].demangled);
        hit = buf;
    }
    pthread_mutex_unlock(&dcache.lock);
    if (hit)
        return hit;
    int status = -1;
    char *out = cxa_demangle(name, NULL, NULL, &status);
    if (!out || status != 0) {
        free(out);
        return NULL;
    }
    snprintf(buf, cap, "%s", out);
    char *mangled = strdup(name);
    pthread_mutex_lock(&dcache.lock);
    if (mangled) { /* else: not cached, still shown */
        free(dcache.slot[i].mangled);
        free(dcache.slot[i].demangled);
        dcache.slot[i].key = name;
        dcache.slot[i].mangled = mangled;
        dcache.slot[i].demangled = out;
        out = NULL;
    }
    pthread_mutex_unlock(&dcache.lock);
    free(out);
    return buf;
}

dft_cupti_demangle_fn dft_cupti_demangler(void)
{
    pthread_once(&demangle_once, find_demangler);
    return cxa_demangle ? demangle : NULL;
}

/* Any thread, no GIL. */
static const char *api_name(CUpti_ActivityKind kind, uint32_t cbid)
{
    const char *name = NULL;
    CUpti_CallbackDomain d =
        kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
    if (!cu.fn.GetCallbackName || cu.fn.GetCallbackName(d, cbid, &name) != CUPTI_SUCCESS)
        return NULL;
    return name;
}

/* ---- emitting ---------------------------------------------------------- */

/* Any thread, no GIL. */
int dft_cupti_emit(const CUpti_Activity *rec, const dft_cupti_ctx *ctx)
{
    dft_cupti_out out;
    if (!dft_cupti_convert(rec, ctx, &out))
        return 0;
    if (out.device_lane)
        dft_name_lane_once(0, out.ev.tid, out.lane_name, NULL);
    return dft_emit(&out.ev) == 0;
}

/* ---- buffers (CUPTI's threads, no GIL) ---------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    void *p = NULL;
    pthread_mutex_lock(&pool.lock);
    if (pool.n < BUF_MAX && posix_memalign(&p, 8, BUF_SIZE) == 0)
        pool.bufs[pool.n++] = p;
    pthread_mutex_unlock(&pool.lock);
    if (p) { /* without a buffer CUPTI drops records and counts them */
        *buffer = p;
        *size = BUF_SIZE;
    }
}

static int pool_take(uint8_t *buf)
{
    int found = 0;
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < pool.n; i++)
        if (pool.bufs[i] == buf) {
            pool.bufs[i] = pool.bufs[--pool.n];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&pool.lock);
    return found;
}

static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)context;
    (void)stream;
    (void)size;
    if (!buffer || !pool_take(buffer))
        return; /* not ours: its owner frees it */
    if (valid > 0 && getpid() == cu.pid && dft_active()) {
        dft_cupti_ctx ctx = {.offset_ns = atomic_load(&cu.offset_ns),
                             .api_name = api_name,
                             .demangle = dft_cupti_demangler()};
        CUpti_Activity *rec = NULL;
        while (cu.fn.ActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
            dft_cupti_emit(rec, &ctx);
    }
    free(buffer);
}

/* ---- start/stop (under cu.lock) ----------------------------------------- */

static void report_dropped(void)
{
    size_t dropped = 0;
    if (cu.fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped &&
        !cu.warned_dropped) {
        cu.warned_dropped = 1;
        dft_log(DFT_LOG_WARN, "CUPTI dropped %zu activity records (buffers full)", dropped);
    }
}

static void stop_locked(void)
{
    if (!cu.running)
        return;
    for (size_t i = 0; i < NKINDS; i++)
        if (cu.enabled[i]) {
            cu.fn.ActivityDisable(kinds[i]);
            cu.enabled[i] = 0;
        }
    cu.fn.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    report_dropped();
    cu.running = 0;
}

static int start_locked(char *reason, size_t cap)
{
    if (cu.running)
        return 0;
    if (!load_locked()) {
        snprintf(reason, cap, "%s", cu.reason);
        return -1;
    }
    if (cu.pid && cu.pid != getpid()) {
        snprintf(reason, cap, "CUPTI was enabled in the parent process; CUDA does not work in "
                 "a forked child of a process that initialised it");
        return -1;
    }
    pthread_once(&demangle_once, find_demangler);
    atomic_store(&cu.offset_ns, dft_cupti_calibrate(cupti_now, NULL));
    if (cu.fn.SetThreadIdType) /* API records carry gettid(), as our events do */
        cu.fn.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    CUptiResult r = cu.fn.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        snprintf(reason, cap, "cuptiActivityRegisterCallbacks failed: %s", result_string(r));
        return -1;
    }
    cu.pid = getpid();
    for (size_t i = 0; i < NKINDS; i++) {
        r = cu.fn.ActivityEnable(kinds[i]);
        cu.enabled[i] = r == CUPTI_SUCCESS;
        if (r == CUPTI_SUCCESS)
            continue;
        if (i == 0) {
            snprintf(reason, cap, "cuptiActivityEnable(CONCURRENT_KERNEL) failed: %s (another "
                     "profiler such as Nsight Systems may own CUPTI)", result_string(r));
            return -1;
        }
        dft_log(DFT_LOG_WARN, "CUPTI activity kind %d not recorded: %s", (int)kinds[i],
                result_string(r));
    }
    cu.running = 1;
    return 0;
}

/* ---- public entry points ------------------------------------------------ */

/* DFTRACER_ENABLE_CUPTI as the current trace read it when it started (a
 * value that is not a boolean was warned about then, and is off). */
static int env_wants_cupti(void) { return dft_trace_config()->enable_cupti; }

int dft_cupti_enable(char *reason, size_t cap)
{
    pthread_mutex_lock(&cu.lock);
    int ok = load_locked();
    if (!ok)
        snprintf(reason, cap, "%s", cu.reason);
    else
        cu.wanted = 1;
    pthread_mutex_unlock(&cu.lock);
    if (!ok)
        return -1;
    if (!dft_active())
        dft_lazy_start(); /* may start recording through the lifecycle hook */
    int rc = 0;
    pthread_mutex_lock(&cu.lock);
    if (dft_active() && !cu.paused)
        rc = start_locked(reason, cap);
    if (rc < 0)
        cu.wanted = 0;
    pthread_mutex_unlock(&cu.lock);
    return rc;
}

void dft_cupti_disable(void)
{
    pthread_mutex_lock(&cu.lock);
    cu.wanted = 0;
    stop_locked();
    pthread_mutex_unlock(&cu.lock);
}

int dft_cupti_running(void)
{
    pthread_mutex_lock(&cu.lock);
    int r = cu.running;
    pthread_mutex_unlock(&cu.lock);
    return r;
}

int dft_cupti_pause(void)
{
    pthread_mutex_lock(&cu.lock);
    int was = cu.running;
    stop_locked();
    cu.paused = 1;
    pthread_mutex_unlock(&cu.lock);
    return was;
}

int dft_cupti_resume(void)
{
    char reason[DFT_CUPTI_REASON_MAX];
    pthread_mutex_lock(&cu.lock);
    cu.paused = 0;
    if ((cu.wanted || env_wants_cupti()) && dft_active() && start_locked(reason, sizeof reason) < 0)
        dft_log(DFT_LOG_ERROR, "GPU activity not resumed: %s", reason);
    int r = cu.running;
    pthread_mutex_unlock(&cu.lock);
    return r;
}

/* Runs on the thread starting, flushing or finalizing the trace, without the
 * GIL (FINALIZING under the core's lifecycle lock). */
static void lifecycle(dft_hook_event ev)
{
    char reason[DFT_CUPTI_REASON_MAX];
    pthread_mutex_lock(&cu.lock);
    switch (ev) {
    case DFT_HOOK_STARTED:
        if ((cu.wanted || env_wants_cupti()) && !cu.paused &&
            start_locked(reason, sizeof reason) < 0)
            dft_log(DFT_LOG_ERROR, "GPU activity not traced: %s", reason);
        break;
    case DFT_HOOK_FLUSH:
        if (cu.running)
            cu.fn.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        break;
    case DFT_HOOK_FINALIZING:
        stop_locked();
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&cu.lock);
}

void dft_cupti_install(void)
{
    if (dft_add_lifecycle_hook(lifecycle) != 0)
        dft_log(DFT_LOG_ERROR, "no room for the CUPTI lifecycle hook; GPU activity disabled");
}

#endif /* DFT_HAVE_CUPTI */
