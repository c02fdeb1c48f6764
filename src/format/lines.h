/* format/lines.h: turning binary records into JSON lines (docs/trace-format.md). */
#ifndef DFT_FORMAT_H
#define DFT_FORMAT_H

#include "format/record.h"
#include "format/json.h"

/* The line's keys, in the one order every line dftracer writes carries them
 * (docs/trace-format.md, "Event kinds"): id, name, cat, pid, tid, ts, dur,
 * ph, args.  format/lines.c writes them in this order and reader/parse.c's
 * fast path expects it; dftracer/tools/line_keys.py is the same order in
 * Python.  Each is the text in front of the value ("{" before the first). */
#define DFT_LINE_ID "{\"id\":"
#define DFT_LINE_NAME ",\"name\":"
#define DFT_LINE_CAT ",\"cat\":"
#define DFT_LINE_PID ",\"pid\":"
#define DFT_LINE_TID ",\"tid\":"
#define DFT_LINE_TS ",\"ts\":"
#define DFT_LINE_DUR ",\"dur\":"
#define DFT_LINE_PH ",\"ph\":"
#define DFT_LINE_ARGS ",\"args\":"

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
