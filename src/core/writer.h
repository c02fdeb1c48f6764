/* core/writer.h: the writer queue and its threads (core/writer.c), and
 * through core/writer_file.h the trace file (core/writer_file.c): a caller
 * of the writer includes this one.  The writer knows records and files, not
 * the lifecycle. */
#ifndef DFT_CORE_WRITER_H
#define DFT_CORE_WRITER_H

#include "core/state.h"
#include "core/writer_file.h"

extern __thread int dft_no_gil_release;
dft_chunk *dft_chunk_new(void);                 /* NULL when out of memory */
dft_chunk *dft_chunk_new_first(void);           /* a thread's first: small; NULL likewise */
void dft_chunk_free(dft_chunk *c);
void dft_writer_handoff_begin(void);            /* before dft_writer_submit, under the buffer's lock */
void dft_writer_submit(dft_chunk *c);           /* takes ownership; may wait */
void dft_writer_drain(void);
/* The end event's num_events: the lines before a member written now. */
uint64_t dft_writer_lines(void);
void dft_writer_close(void);
/* Stops the writer threads once everything queued is written, keeping the
 * file open: they start again at the next chunk submitted (or a drain that
 * finds chunks waiting).  Writes the kernel ids of the threads stopped to
 * tids (at most cap) and returns how many.  Under dft_g.life_lock. */
int dft_writer_stop_threads(pid_t *tids, int cap);
void dft_writer_atfork_prepare(void);
void dft_writer_atfork_parent(void);
void dft_writer_atfork_child(void);

#endif
