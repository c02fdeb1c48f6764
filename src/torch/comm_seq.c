/* torch/comm_seq.c: one numbering of each group's collectives, whoever
 * issues them: the torch.distributed calls of the program and of FSDP
 * (torch/autotrace_comm.c) and DDP's bucket all_reduces (torch/ddp_hook.c
 * and the native hook through it).  Every rank of a group issues the
 * group's collectives in the same order (c10d requires it), so one counter
 * per group makes (name, group, seq) name one call, the same on every rank
 * (docs/trace-format.md, "comm").
 *
 * A list of counters by group name: looked up without a lock (a job has a
 * few groups; a node is complete before it is published, and never freed),
 * added to under a mutex. */
#include "torch/comm_seq.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(dft_comm_seq *) head;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

/* Any thread, no GIL. */
static dft_comm_seq *find(dft_comm_seq *g, const char *name, size_t len)
{
    for (; g; g = g->next)
        if (g->len == len && memcmp(g->name, name, len) == 0)
            return g;
    return NULL;
}

/* Any thread, no GIL. */
dft_comm_seq *dft_comm_seq_of(const char *name, size_t len)
{
    dft_comm_seq *g = find(atomic_load_explicit(&head, memory_order_acquire), name, len);
    if (g)
        return g;
    if (pthread_mutex_lock(&add_lock) != 0)
        return NULL;
    dft_comm_seq *first = atomic_load_explicit(&head, memory_order_relaxed);
    g = find(first, name, len); /* added by another thread meanwhile */
    if (!g && (g = malloc(sizeof *g + len + 1))) {
        atomic_init(&g->next_seq, 0);
        g->len = len;
        memcpy(g->name, name, len);
        g->name[len] = '\0';
        g->next = first;
        atomic_store_explicit(&head, g, memory_order_release);
    }
    pthread_mutex_unlock(&add_lock);
    return g;
}
