/* core/writer_state.h: what the writer's two halves share (core/writer.c:
 * the queue and its threads; core/writer_file.c: formatting, deflating and
 * writing the trace file): the writer's state, one instance, and the calls
 * between them.  For core/writer.c and core/writer_file.c alone. */
#ifndef DFT_CORE_WRITER_STATE_H
#define DFT_CORE_WRITER_STATE_H

#include <stddef.h>
#include <sys/types.h>

#include "core/compress.h"
#include "core/owned_fd.h"
#include "core/writer_file.h"
#include "format/lines.h"

#define PIECE ((size_t)1 << 20)   /* JSON bytes per gzip member */
#define EMERGENCY_PIECE ((size_t)128 << 10)
#define MAX_WORKERS 16

typedef struct worker {
    pthread_t thread;
    int started;
    _Atomic pid_t tid; /* the kernel's id of the thread, once it runs */
    dft_compressor *cz; /* made at the first member */
    int hurry; /* chunks are piling up: deflate with the fastest encoder */
    dft_sbuf json, out;
    dft_sbuf first; /* "[\n" and the first piece of a file, joined to be deflated */
} worker;

typedef struct dft_writer_state {
    pthread_mutex_t lock; /* queue, pool and worker lifecycle */
    pthread_cond_t nonempty, space, idle;
    dft_chunk *head, *tail;
    int queued, busy, max_inflight;
    int waiting; /* submitters waiting for space, their chunk in hand */
    _Atomic int in_flight; /* chunks handed off by a thread, not yet queued */
    dft_chunk *pool;
    int pool_len;
    int stopping;
    worker workers[MAX_WORKERS];
    int nworkers, running;
    worker sync; /* for the header and end event, written under dft_g.life_lock */
    int pending; /* the file is configured but not opened yet */

    pthread_mutex_t file_lock; /* the file and the write of one member */
    dft_owned_fd file; /* the trace file, checked before each member (core/owned_fd.c) */
    _Atomic int has_file; /* file.fd >= 0, for readers without file_lock (a hand-off,
                           * a drain, a signal's write): file.fd itself is written
                           * under file_lock when the writer reopens its file */
    char *path;      /* the file asked for */
    char *actual;    /* the file written: path, or its fallback name */
    off_t good_end;  /* end of the last whole member written */
    int dead;        /* a torn write could not be cut back, or the file was taken
                      * from the writer and could not be opened again: writing stopped */
    int compression;
    dft_fmt_ctx fmt;
    _Atomic int need_bracket; /* a new file: the next piece written starts with "[\n" */

    _Atomic uint64_t lines;
    int write_error_reported;

    /* Preallocated for writes from signal handlers (DFTRACER_BIND_SIGNALS). */
    _Atomic int emergency_busy;
    worker emergency;
    int emergency_ready;
} dft_writer_state;

extern dft_writer_state dft_writer;

/* The records a piece of lines was formatted from: what is kept of it when
 * it cannot be written. */
typedef struct piece_recs {
    const char *data;
    size_t from, to;
} piece_recs;

/* The pending file opened, a failure reported once (writer_file.c).
 * Caller holds dft_writer.lock. */
void dft_writer_open_pending_locked(void);
/* Formats and writes the records of one chunk.  Writer threads, no GIL. */
void dft_writer_process_chunk(worker *wk, dft_chunk *c);
/* Stops the writer threads once the queue is empty; the kernel ids of those
 * stopped go to tids (at most cap).  Under dft_g.life_lock. */
int dft_writer_stop_workers(pid_t *tids, int cap);

#endif
