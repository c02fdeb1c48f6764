/* io/filter.h: which files the I/O wrappers trace.
 *
 * A path is traced when it lies under one of the DFTRACER_DATA_DIR prefixes
 * (":"-separated, "all" = every file).  Descriptors of traced files are
 * remembered from open to close in a two-level table indexed by fd, so a call
 * on an untraced descriptor costs one or two relaxed loads.  Every function
 * here runs without the GIL, takes no lock and does not allocate with malloc. */
#ifndef DFT_IO_FILTER_H
#define DFT_IO_FILTER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DFT_FD_PAGE_BITS 12
#define DFT_FD_PAGE (1u << DFT_FD_PAGE_BITS)
#define DFT_FD_PAGES 256 /* descriptors below 1 Mi are tracked */

typedef struct dft_fd_slot {
    _Atomic uint64_t hash; /* fhash of the file, 0 when untraced */
    _Atomic uint64_t gen;  /* trace file generation the FH event went to */
} dft_fd_slot;

extern _Atomic(dft_fd_slot *) dft_fd_pages[DFT_FD_PAGES];

/* The slot of a traced descriptor, or NULL: the wrappers' fast check. */
static inline dft_fd_slot *dft_io_fd_slot(int fd)
{
    if ((unsigned)fd >= DFT_FD_PAGES * DFT_FD_PAGE)
        return NULL;
    dft_fd_slot *page =
        atomic_load_explicit(&dft_fd_pages[(unsigned)fd >> DFT_FD_PAGE_BITS], memory_order_relaxed);
    if (!page)
        return NULL;
    dft_fd_slot *s = &page[(unsigned)fd & (DFT_FD_PAGE - 1)];
    return atomic_load_explicit(&s->hash, memory_order_relaxed) ? s : NULL;
}

/* Parses the prefixes (made absolute and normalised).  Returns the number of
 * prefixes (1 for "all"), 0 when data_dir is NULL or empty, -1 on ENOMEM. */
int dft_io_filter_init(const char *data_dir);
/* Forgets the prefixes and every tracked descriptor and mapping. */
void dft_io_filter_reset(void);
/* Warns once per DFTRACER_DATA_DIR entry missing at the start and still
 * missing now (the trace is being finalized).  Under life_lock. */
void dft_io_filter_warn_missing(void);

/* When path (relative to dirfd, or AT_FDCWD) is traced, writes its absolute
 * normalised form to out and returns its length; else returns 0. */
size_t dft_io_path_traced(int dirfd, const char *path, char *out, size_t cap);

/* Records fd as the file whose fhash is hash (interned for the current file). */
void dft_io_fd_track(int fd, uint64_t hash);
void dft_io_fd_untrack(int fd);
/* The fhash of a traced slot, defined in the current trace file: a slot
 * inherited across fork() is re-interned from /proc/self/fd once. */
uint64_t dft_io_fd_hash(dft_fd_slot *s, int fd);

/* Memory maps of traced files, by start address and length. */
void dft_io_map_track(void *addr, size_t len, uint64_t hash);
uint64_t dft_io_map_untrack(void *addr); /* its fhash, or 0 */
/* The fhash of the traced map holding addr (msync), or 0. */
uint64_t dft_io_map_find(const void *addr);

#endif
