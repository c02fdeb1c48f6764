/* core/deflate_lines.h: a deflate encoder for JSON lines (docs/performance.md,
 * "Trace size and the line encoder").  Trace lines repeat each other field by
 * field: the encoder looks for matches only where a field starts (after `,`
 * `{` `}` or a newline), against the last earlier field with the same bytes
 * or the running match, and codes the varying digits in between as literals.
 * That finds what an exhaustive deflate search finds on these lines, at about
 * the cost of the fastest library levels; on text that is not trace lines it
 * finds little, and core/compress.c falls back to the deflate library. */
#ifndef DFT_CORE_DEFLATE_LINES_H
#define DFT_CORE_DEFLATE_LINES_H

#include <stddef.h>

typedef struct dft_line_deflater dft_line_deflater;

/* All its memory at once (about 200 KiB); NULL when out of memory. */
dft_line_deflater *dft_line_deflater_new(void);
void dft_line_deflater_free(dft_line_deflater *d);

/* Deflates in[0, n) into one raw deflate stream (RFC 1951, final block
 * last) at out (cap bytes); returns its length, or 0 when cap is too small.
 * Every match refers inside in, so the stream stands alone.  Allocates
 * nothing, takes no lock: any thread, no GIL, signal handlers. */
size_t dft_line_deflate(dft_line_deflater *d, const char *in, size_t n, char *out, size_t cap);

#endif
