/* core/writer.h: the writer queue, its threads and the trace file
 * (core/writer.c: the queue and threads; core/writer_file.c: the file).  The
 * writer knows records and files, not the lifecycle. */
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
    uint64_t gen; /* the trace generation the file belongs to (dft_trace_gen) */
} dft_writer_opts;

int dft_writer_open(const dft_writer_opts *o, int open_now); /* 0, or -1 with errno */
/* The trace goes on under another name: the file being written is renamed
 * (never over anything there; core/trace_file.c), or, not opened yet, will
 * be opened there.  0, or -1 with errno (the name is unchanged).  Under
 * dft_g.life_lock; no GIL. */
int dft_writer_rename(const char *new_path);
extern __thread int dft_no_gil_release;
dft_chunk *dft_chunk_new(void);                 /* NULL when out of memory */
dft_chunk *dft_chunk_new_first(void);           /* a thread's first: small; NULL likewise */
void dft_chunk_free(dft_chunk *c);
void dft_writer_handoff_begin(void);            /* before dft_writer_submit, under the buffer's lock */
void dft_writer_submit(dft_chunk *c);           /* takes ownership; may wait */
void dft_writer_drain(void);
/* Formats and writes one record synchronously (used for the end event). */
void dft_writer_write_now(const dft_event *ev, int64_t id);
/* The same from a thread beside the writer threads (under its lock). */
void dft_writer_write_now_shared(const dft_event *ev, int64_t id);
/* Formats the records data[start, end) of file generation gen -- what the
 * file cannot be valid without: its header, hash definitions -- into lines
 * the writer keeps and writes at the head of the next member, before any
 * piece that may use them (or on their own: dft_writer_write_kept,
 * dft_writer_tick).  0; 1 when gen's file is not the current one (nothing
 * kept); -1 when out of memory.  Any thread, no GIL. */
int dft_writer_keep(const char *data, size_t start, size_t end, uint64_t gen);
/* Writes the kept lines now, opening the file if need be (a new trace's
 * header is on disk before its first event).  Any thread, no GIL. */
void dft_writer_write_kept(void);
/* The flusher's tick (see writer_file.c). */
void dft_writer_tick(void);
/* The end event's num_events: the lines before a member written now. */
uint64_t dft_writer_lines(void);
/* The file being written (its fallback name when the configured path was
 * refused: docs/configuration.md, "The trace file"), or the configured path. */
const char *dft_writer_path(void);
void dft_writer_close(void);
/* Stops the writer threads once everything queued is written, keeping the
 * file open: they start again at the next chunk submitted (or a drain that
 * finds chunks waiting).  Writes the kernel ids of the threads stopped to
 * tids (at most cap) and returns how many.  Under dft_g.life_lock. */
int dft_writer_stop_threads(pid_t *tids, int cap);
void dft_writer_atfork_prepare(void);
void dft_writer_atfork_parent(void);
void dft_writer_atfork_child(void);
/* Best effort from a signal handler: writes chunk data without taking locks
 * that might be held (returns -1 if it could not). */
int dft_writer_emergency(const char *data, size_t start, size_t end);
int dft_writer_emergency_prepare(void);

#endif
