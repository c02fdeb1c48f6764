/* core/kept_lines.c: the lines a trace file cannot be valid without, kept by
 * the writer until a member carries them.
 *
 * The header (HH, process_name, start) and the definition of every hash (FH,
 * SH) are written once per file; `dftracer validate` rejects a file without
 * its header or with a hash used but not defined (docs/trace-format.md,
 * "Valid files").  So they do not travel in the threads' buffers: they are
 * kept here and written as a member of their own before any other member
 * (core/writer.c), so a member that uses a hash never reaches the disk
 * before its definition, and a write that fails (a full disk) loses none of
 * them.  From a piece that could not be written, the lines of those kinds
 * and the thread names are kept too.  Called with the writer's file lock
 * held; no GIL. */
#include "core/kept_lines.h"

#include <stdatomic.h>
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

/* The "name" values of the lines kept from a failed piece, all with
 * "cat":"dftracer". */
static const char *const needed[] = {"HH", "FH", "SH", "process_name", "thread_name", "start"};

/* 1 when line (without its '\n') is one the file needs.  Lines start
 * {"id":<digits>,"name":"<name>","cat":"dftracer", (format/lines.c). */
static int is_needed(const char *line, size_t n)
{
    static const char id[] = "{\"id\":";
    static const char name[] = ",\"name\":\"";
    static const char cat[] = "\",\"cat\":\"dftracer\",";
    if (n < sizeof id - 1 || memcmp(line, id, sizeof id - 1) != 0)
        return 0;
    size_t i = sizeof id - 1;
    while (i < n && line[i] >= '0' && line[i] <= '9')
        i++;
    if (n - i < sizeof name - 1 || memcmp(line + i, name, sizeof name - 1) != 0)
        return 0;
    i += sizeof name - 1;
    for (size_t k = 0; k < sizeof needed / sizeof *needed; k++) {
        size_t len = strlen(needed[k]);
        if (n - i >= len + sizeof cat - 1 && memcmp(line + i, needed[k], len) == 0 &&
            memcmp(line + i + len, cat, sizeof cat - 1) == 0)
            return 1;
    }
    return 0;
}

int dft_kept_add_needed(const char *text, size_t n)
{
    const char *end = text + n;
    while (text < end) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        size_t len = nl ? (size_t)(nl - text) : (size_t)(end - text);
        if (is_needed(text, len)) {
            if (dft_kept_add(text, len, 1) != 0 || dft_kept_add("\n", 1, 0) != 0)
                return -1;
        }
        text += len + (nl ? 1 : 0);
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
