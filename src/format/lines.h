/* format/lines.h: turning binary records into JSON lines (docs/trace-format.md). */
#ifndef DFT_FORMAT_H
#define DFT_FORMAT_H

#include "format/record.h"
#include "format/json.h"

typedef struct dft_fmt_ctx {
    int64_t pid;
    uint64_t hhash;
    int inc_metadata;
} dft_fmt_ctx;

/* Appends the records in data[*pos, end) as JSON lines to out, stopping once
 * out holds at least limit bytes.  Advances *pos; returns the lines written.
 * Writer threads, no GIL. */
size_t dft_format_records(dft_sbuf *out, const char *data, size_t *pos, size_t end,
                          const dft_fmt_ctx *ctx, size_t limit);

#endif
