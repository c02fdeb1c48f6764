/* core/needed_lines.h: the lines a trace file cannot be valid without
 * (core/needed_lines.c), kept when the piece holding them could not be
 * written, so that the next piece that reaches the file carries them. */
#ifndef DFT_CORE_NEEDED_LINES_H
#define DFT_CORE_NEEDED_LINES_H

#include <stddef.h>

#include "format/json.h"

typedef struct dft_needed_lines {
    dft_sbuf text; /* whole lines, each ending in '\n' */
    size_t count;
} dft_needed_lines;

/* Appends to kept the lines of text[0, n) (whole JSON lines as
 * format/lines.c writes them) that the file needs: the HH, FH, SH,
 * process_name and thread_name metadata and the start event.  Returns 0, or
 * -1 when out of memory (those lines are lost).  Writer threads, no GIL. */
int dft_needed_lines_keep(dft_needed_lines *kept, const char *text, size_t n);
/* Empties kept (its lines were written, or belong to a finished file). */
void dft_needed_lines_clear(dft_needed_lines *kept);

#endif
