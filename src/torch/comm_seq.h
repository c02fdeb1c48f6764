/* torch/comm_seq.h: the `seq` of a group's collectives (torch/comm_seq.c). */
#ifndef DFT_TORCH_COMM_SEQ_H
#define DFT_TORCH_COMM_SEQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One group's counter, found by the group's name; never freed, so a caller
 * may keep the pointer. */
typedef struct dft_comm_seq {
    struct dft_comm_seq *next;
    _Atomic int64_t next_seq;
    size_t len;
    char name[];
} dft_comm_seq;

/* The counter of the group named name[0, len), made on first use; NULL when
 * out of memory.  Any thread, no GIL. */
dft_comm_seq *dft_comm_seq_of(const char *name, size_t len);

/* The group's next seq (0 first).  Any thread, no GIL. */
static inline int64_t dft_comm_seq_next(dft_comm_seq *g)
{
    return atomic_fetch_add_explicit(&g->next_seq, 1, memory_order_relaxed);
}

#endif
