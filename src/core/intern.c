/* core/intern.c: what a trace file defines once.  The hashes of interned
 * strings (FH/SH): an open-addressing set of XXH64 values, so that each
 * string's metadata event is written the first time it appears in the file;
 * and the lanes (GPU streams, devices) named so far.  Both are emptied when a
 * new file starts (the trace generation changes). */
#include "core/intern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/state.h"
#include "core/tracer.h"

static struct {
    pthread_mutex_t lock;
    uint64_t *slots; /* open addressing; 0 marks an empty slot */
    size_t cap, len;
    uint64_t gen;
} intern = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Any thread, no GIL. */
int dft_intern_insert(uint64_t h)
{
    if (h == 0)
        h = 1; /* 0 marks empty slots; a collision here only repeats an FH line */
    uint64_t gen = atomic_load(&dft_trace.gen);
    pthread_mutex_lock(&intern.lock);
    if (intern.gen != gen) {
        if (intern.slots)
            memset(intern.slots, 0, intern.cap * sizeof *intern.slots);
        intern.len = 0;
        intern.gen = gen;
    }
    if ((intern.len + 1) * 2 > intern.cap) {
        size_t cap = intern.cap ? intern.cap * 2 : 1024;
        uint64_t *s = calloc(cap, sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&intern.lock);
            return -1;
        }
        for (size_t i = 0; i < intern.cap; i++) {
            uint64_t v = intern.slots[i];
            if (!v)
                continue;
            size_t j = (size_t)v & (cap - 1);
            while (s[j])
                j = (j + 1) & (cap - 1);
            s[j] = v;
        }
        free(intern.slots);
        intern.slots = s;
        intern.cap = cap;
    }
    size_t j = (size_t)h & (intern.cap - 1);
    int fresh = 1;
    while (intern.slots[j]) {
        if (intern.slots[j] == h) {
            fresh = 0;
            break;
        }
        j = (j + 1) & (intern.cap - 1);
    }
    if (fresh) {
        intern.slots[j] = h;
        intern.len++;
    }
    pthread_mutex_unlock(&intern.lock);
    return fresh;
}

/* Any thread, no GIL. */
uint64_t dft_intern(dft_intern_kind kind, const char *s, size_t len)
{
    if (!atomic_load_explicit(&dft_trace.active, memory_order_relaxed) && dft_lazy_start() != 0)
        return 0;
    uint64_t h = dft_hash64(s, len);
    if (dft_intern_insert(h) == 1)
        dft_emit_meta(kind == DFT_INTERN_FILE ? "FH" : "SH", 0, 0, s, len, NULL, 0, 1, h);
    return h;
}

/* ---- lanes ------------------------------------------------------------- */

/* Lanes named in the current file.  When full, further lanes are named again
 * each time they appear: a repeated thread_name line, never a missing one. */
#define LANES_MAX 1024
static struct {
    pthread_mutex_t lock;
    uint64_t gen;
    size_t n;
    struct {
        int64_t pid, tid;
    } lane[LANES_MAX];
} lanes = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Any thread, no GIL. */
int dft_name_lane_once(int64_t pid, int64_t tid, const char *thread_name,
                       const char *process_name)
{
    uint64_t gen = dft_trace_gen();
    int fresh = 1, new_pid = 1;
    pthread_mutex_lock(&lanes.lock);
    if (lanes.gen != gen) {
        lanes.n = 0;
        lanes.gen = gen;
    }
    for (size_t i = 0; i < lanes.n && fresh; i++) {
        if (lanes.lane[i].pid != pid)
            continue;
        new_pid = 0;
        fresh = lanes.lane[i].tid != tid;
    }
    if (fresh && lanes.n < LANES_MAX) {
        lanes.lane[lanes.n].pid = pid;
        lanes.lane[lanes.n].tid = tid;
        lanes.n++;
    }
    pthread_mutex_unlock(&lanes.lock);
    if (!fresh)
        return 0;
    if (process_name && new_pid)
        dft_emit_meta("process_name", pid, tid, process_name, strlen(process_name),
                      "process_name", 12, 0, 0);
    dft_name_lane(pid, tid, thread_name);
    return 1;
}

/* Single-threaded (a forked child). */
void dft_intern_after_fork_child(void)
{
    pthread_mutex_init(&intern.lock, NULL);
    pthread_mutex_init(&lanes.lock, NULL);
}
