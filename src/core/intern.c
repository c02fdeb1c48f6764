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
#include "core/buffer.h"

/* ---- metadata events ---------------------------------------------------- */

/* Records through the buffers of an active trace: the callers record events
 * (or made it ready: dft_trace_ready).  Any thread, no GIL. */
int dft_emit_meta(const char *kind, int64_t pid, int64_t tid, const char *key, size_t key_len,
                  const char *value, size_t value_len, int value_is_hash, uint64_t hash)
{
    dft_arg args[2] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {key, key_len}},
        {.key = "value", .type = DFT_ARG_STR, .v.s = {value, value_len}},
    };
    if (value_is_hash) {
        args[1].type = DFT_ARG_HASH;
        args[1].v.hash = hash;
    }
    dft_event ev = {.name = kind, .name_len = strlen(kind), .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .pid = pid, .tid = tid, .args = args, .nargs = 2};
    return dft_emit_logged(&ev);
}

/* Any thread, no GIL. */
static int emit_hash_def(uint64_t gen, const char *kind, const char *s, size_t len, uint64_t hash)
{
    dft_arg args[2] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {s, len}},
        {.key = "value", .type = DFT_ARG_HASH, .v.hash = hash},
    };
    dft_event ev = {.name = kind, .name_len = strlen(kind), .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .args = args, .nargs = 2};
    return dft_emit_essential(&ev, gen);
}

static struct {
    pthread_mutex_t lock;
    uint64_t *slots; /* open addressing; 0 marks an empty slot */
    size_t cap, len;
    uint64_t gen;
} intern = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Inserts h in the set of generation gen (emptied first when the set is of
 * an earlier one); 1 when new, 0 when there, -1 when out of memory or when
 * gen is not the set's (a later file started).  Caller holds intern.lock. */
static int insert_locked(uint64_t h, uint64_t gen)
{
    if (intern.gen != gen) {
        if (intern.gen > gen)
            return -1;
        if (intern.slots)
            memset(intern.slots, 0, intern.cap * sizeof *intern.slots);
        intern.len = 0;
        intern.gen = gen;
    }
    if ((intern.len + 1) * 2 > intern.cap) {
        size_t cap = intern.cap ? intern.cap * 2 : 1024;
        uint64_t *s = calloc(cap, sizeof *s);
        if (!s)
            return -1;
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
    while (intern.slots[j]) {
        if (intern.slots[j] == h)
            return 0;
        j = (j + 1) & (intern.cap - 1);
    }
    intern.slots[j] = h;
    intern.len++;
    return 1;
}

/* Removes h from the set (its definition could not be recorded), keeping
 * every other value reachable from its home slot.  Caller holds intern.lock. */
static void remove_locked(uint64_t h)
{
    size_t mask = intern.cap - 1;
    if (!intern.cap)
        return;
    size_t j = (size_t)h & mask;
    while (intern.slots[j] != h) {
        if (!intern.slots[j])
            return;
        j = (j + 1) & mask;
    }
    intern.slots[j] = 0;
    intern.len--;
    for (size_t i = (j + 1) & mask; intern.slots[i]; i = (i + 1) & mask) {
        size_t home = (size_t)intern.slots[i] & mask;
        /* moves back unless its home lies cyclically in (j, i] */
        int stays = j < i ? (home > j && home <= i) : (home > j || home <= i);
        if (!stays) {
            intern.slots[j] = intern.slots[i];
            intern.slots[i] = 0;
            j = i;
        }
    }
}

static uint64_t nonzero(uint64_t h) { return h ? h : 1; } /* 0 marks empty slots */

/* Any thread, no GIL. */
int dft_intern_insert(uint64_t h)
{
    pthread_mutex_lock(&intern.lock);
    int fresh = insert_locked(nonzero(h), atomic_load(&dft_trace.gen));
    pthread_mutex_unlock(&intern.lock);
    return fresh;
}

/* The definition goes to the file of the generation the hash was entered
 * for, or nowhere: a hash in a file's set is always defined in that file
 * (an event using it is recorded only in the file it began in, io/event.c).
 * Any thread, no GIL. */
uint64_t dft_intern(dft_intern_kind kind, const char *s, size_t len)
{
    if (!dft_trace_active()) /* a started trace (its header, the I/O wrappers) only */
        return 0;
    uint64_t h = dft_hash64(s, len);
    pthread_mutex_lock(&intern.lock);
    uint64_t gen = atomic_load(&dft_trace.gen);
    int fresh = insert_locked(nonzero(h), gen);
    pthread_mutex_unlock(&intern.lock);
    if (fresh == 1 &&
        emit_hash_def(gen, kind == DFT_INTERN_FILE ? "FH" : "SH", s, len, h) != 0) {
        pthread_mutex_lock(&intern.lock);
        if (intern.gen == gen)
            remove_locked(nonzero(h));
        pthread_mutex_unlock(&intern.lock);
    }
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
    if (!dft_trace_active())
        return 0; /* named by the first call of an active trace */
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
    dft_emit_meta("thread_name", pid, tid, thread_name, strlen(thread_name), "thread_name", 11, 0,
                  0);
    return 1;
}

/* Single-threaded (a forked child). */
void dft_intern_after_fork_child(void)
{
    pthread_mutex_init(&intern.lock, NULL);
    pthread_mutex_init(&lanes.lock, NULL);
}
