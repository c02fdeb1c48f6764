/* core/kept_lines.c: the lines a trace file cannot be valid without, kept by
 * the writer until a member carries them.
 *
 * The header (HH, process_name, start) and the definition of every hash (FH,
 * SH) are written once per file; `dftracer validate` rejects a file without
 * its header or with a hash used but not defined (docs/trace-format.md,
 * "Valid files").  So they do not travel in the threads' buffers: they are
 * kept here and written as a member of their own before any other member
 * (core/writer_file.c), so a member that uses a hash never reaches the disk
 * before its definition, and a write that fails (a full disk) loses none of
 * them.  From a piece that could not be written, the lines of those kinds
 * and the thread names are kept too.  Called with the writer's file lock
 * held; no GIL. */
#include "core/kept_lines.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "format/json.h"

static struct {
    dft_sbuf text; /* whole lines, each ending in '\n' */
    size_t count;
    _Atomic int pending;
    dft_sbuf in, out; /* the member, joined and deflated */
    int ticks;        /* flusher ticks the lines have waited */
    uint64_t gen;
} kept;

int dft_kept_pending(void) { return atomic_load(&kept.pending); }

uint64_t dft_kept_gen(void) { return kept.gen; }

size_t dft_kept_count(void) { return kept.count; }

size_t dft_kept_written(void)
{
    size_t n = kept.count;
    kept.text.len = 0;
    kept.text.failed = 0;
    kept.count = 0;
    kept.ticks = 0;
    atomic_store(&kept.pending, 0);
    return n;
}

void dft_kept_reset(uint64_t gen)
{
    dft_kept_written();
    kept.gen = gen;
}

int dft_kept_aged(void) { return kept.ticks++ > 0; }

int dft_kept_add(const char *text, size_t n, size_t lines)
{
    if (dft_sbuf_reserve(&kept.text, n) != 0)
        return -1;
    dft_sbuf_put(&kept.text, text, n);
    kept.count += lines;
    if (kept.count)
        atomic_store(&kept.pending, 1);
    return 0;
}

/* The names of the records kept from a failed piece, all of cat "dftracer". */
static const char *const needed[] = {"HH", "FH", "SH", "process_name", "thread_name", "start"};

/* 1 when record r is one the file needs. */
static int is_needed(const dft_rec *r)
{
    static const char cat[] = "dftracer";
    const char *p = (const char *)(r + 1);
    if (r->cat_len != sizeof cat - 1 || memcmp(p + r->name_len, cat, sizeof cat - 1) != 0)
        return 0;
    for (size_t k = 0; k < sizeof needed / sizeof *needed; k++)
        if (strlen(needed[k]) == r->name_len && memcmp(p, needed[k], r->name_len) == 0)
            return 1;
    return 0;
}

int dft_kept_add_needed(const char *data, size_t from, size_t to, const dft_fmt_ctx *ctx)
{
    size_t p = from;
    while (p + sizeof(dft_rec) <= to) {
        const dft_rec *r = (const dft_rec *)(data + p);
        if (r->size < sizeof(dft_rec) || p + r->size > to)
            break; /* cannot happen for records we encoded (format/lines.c stops too) */
        if (is_needed(r)) {
            size_t at = p;
            size_t lines = dft_format_records(&kept.text, data, &at, p + r->size, ctx, SIZE_MAX);
            if (kept.text.failed)
                return -1;
            kept.count += lines;
            atomic_store(&kept.pending, 1);
        }
        p += r->size;
    }
    return 0;
}

int dft_kept_member(int bracket, dft_compressor *cz, const char **buf, size_t *len)
{
    kept.in.len = 0;
    kept.in.failed = kept.out.failed = 0;
    if (dft_sbuf_reserve(&kept.in, kept.text.len + 2) != 0)
        return -1;
    if (bracket)
        DFT_SBUF_LIT(&kept.in, "[\n");
    dft_sbuf_put(&kept.in, kept.text.data, kept.text.len);
    *buf = kept.in.data;
    *len = kept.in.len;
    if (!cz)
        return 0;
    kept.out.len = 0;
    if (dft_sbuf_reserve(&kept.out, dft_compress_bound(kept.in.len)) != 0)
        return -1;
    kept.out.len = dft_compress_member(cz, kept.in.data, kept.in.len, kept.out.data, kept.out.cap);
    *buf = kept.out.data;
    *len = kept.out.len;
    return kept.out.len ? 0 : -1;
}
