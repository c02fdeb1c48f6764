/* core/writer_file.h: the trace file the writer writes (core/writer_file.c,
 * the code declared here): opening and renaming it, the records written
 * synchronously, the lines it keeps, the flusher's tick, a signal handler's
 * best effort.  The queue and threads are core/writer.h's. */
#ifndef DFT_CORE_WRITER_FILE_H
#define DFT_CORE_WRITER_FILE_H

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
/* The file being written (its fallback name when the configured path was
 * refused: docs/configuration.md, "The trace file"), or the configured path. */
const char *dft_writer_path(void);
/* Best effort from a signal handler: writes chunk data without taking locks
 * that might be held (returns -1 if it could not). */
int dft_writer_emergency(const char *data, size_t start, size_t end);
int dft_writer_emergency_prepare(void);

#endif
