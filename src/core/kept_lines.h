/* core/kept_lines.h: the lines a trace file cannot be valid without, kept by
 * the writer until a member carries them to the file (core/kept_lines.c).
 * One instance, for the current file.  Every function but
 * dft_kept_pending is called with the writer's file lock held; no GIL. */
#ifndef DFT_CORE_KEPT_LINES_H
#define DFT_CORE_KEPT_LINES_H

#include <stddef.h>
#include <stdint.h>

#include "core/compress.h"
#include "format/lines.h"

/* 1 while lines wait to be written.  Any thread. */
int dft_kept_pending(void);
/* A new file, of trace generation gen: what was kept for the previous one is
 * dropped (it was never written). */
void dft_kept_reset(uint64_t gen);
/* The file generation lines are kept for. */
uint64_t dft_kept_gen(void);
/* Keeps every line of text[0, n) (lines of them); 0, or -1 when out of
 * memory. */
int dft_kept_add(const char *text, size_t n, size_t lines);
/* Keeps the lines the file needs of the records data[from, to) (a piece
 * that could not be written): HH, FH, SH, process_name, thread_name, start,
 * decided from the records and formatted with ctx.  0, or -1 when out of
 * memory. */
int dft_kept_add_needed(const char *data, size_t from, size_t to, const dft_fmt_ctx *ctx);
/* The kept lines as one member: after "[\n" when bracket is set, deflated
 * with cz when it is not NULL.  0 with *buf, *len set, or -1. */
int dft_kept_member(int bracket, dft_compressor *cz, const char **buf, size_t *len);
/* The member was written: empties the kept lines; returns how many there
 * were. */
size_t dft_kept_written(void);
/* How many lines are kept. */
size_t dft_kept_count(void);
/* A flusher tick: 1 when lines have waited a whole period already. */
int dft_kept_aged(void);

#endif
