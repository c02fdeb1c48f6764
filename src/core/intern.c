/* core/intern.c: the set of hashes a trace file has defined (FH/SH), so
 * that each interned string's metadata event is written once per file.  An
 * open-addressing set of XXH64 values, emptied when a new file starts (the
 * trace generation changes). */
#include "core/intern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/state.h"

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
    uint64_t gen = atomic_load(&dft_g.gen);
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

/* Single-threaded (a forked child). */
void dft_intern_after_fork_child(void) { pthread_mutex_init(&intern.lock, NULL); }
