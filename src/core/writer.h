/* core/writer.h: the writer queue, its threads and the trace file
 * (core/writer.c).  The writer knows records and files, not the lifecycle. */
#ifndef DFT_CORE_WRITER_H
#define DFT_CORE_WRITER_H

#include "core/state.h"

typedef struct dft_writer_opts {
    const char *path;
    int compression;
    int inc_metadata;
    int nthreads;
    int64_t pid;
    uint64_t hhash;
} dft_writer_opts;

int dft_writer_open(const dft_writer_opts *o, int open_now); /* 0, or -1 with errno */
extern __thread int dft_no_gil_release;
dft_chunk *dft_chunk_new(void);                 /* NULL when out of memory */
void dft_chunk_free(dft_chunk *c);
void dft_writer_handoff_begin(void);            /* before dft_writer_submit, under the buffer's lock */
void dft_writer_submit(dft_chunk *c);           /* takes ownership; may wait */
void dft_writer_drain(void);
/* Formats and writes one record synchronously (used for the end event). */
void dft_writer_write_now(const dft_event *ev, int64_t id);
/* Formats data[start, end) and writes it at once, bypassing the queue (a
 * trace's header); 0, or -1 when nothing could be written. */
int dft_writer_write_sync(const char *data, size_t start, size_t end);
/* The end event's num_events: the lines before a member written now. */
uint64_t dft_writer_lines(void);
/* The file being written (its fallback name when the configured path was
 * refused: docs/configuration.md, "The trace file"), or the configured path. */
const char *dft_writer_path(void);
void dft_writer_close(void);
void dft_writer_atfork_prepare(void);
void dft_writer_atfork_parent(void);
void dft_writer_atfork_child(void);
/* Best effort from a signal handler: writes chunk data without taking locks
 * that might be held (returns -1 if it could not). */
int dft_writer_emergency(const char *data, size_t start, size_t end);
int dft_writer_emergency_prepare(void);

#endif
