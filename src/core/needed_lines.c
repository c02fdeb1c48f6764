/* core/needed_lines.c: which lines of a piece that could not be written
 * (a full disk, a file size limit, a file that could not be opened yet) the
 * trace file still needs.
 *
 * The header (HH, process_name, start) and the definition of every hash (FH,
 * SH) are written once per file, and the thread and lane names once per
 * thread: a piece lost to a failed write would leave the file without them
 * for good, and `dftracer validate` rejects a file without its header or
 * with a hash used but not defined (docs/trace-format.md, "Valid files").  So
 * the writer keeps those lines and writes them with the next piece that
 * reaches the file; the other events of the lost piece are dropped, and
 * counted as such. */
#include "core/needed_lines.h"

#include <string.h>

/* The "name" values of the lines kept, all with "cat":"dftracer". */
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

int dft_needed_lines_keep(dft_needed_lines *kept, const char *text, size_t n)
{
    const char *end = text + n;
    while (text < end) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        size_t len = nl ? (size_t)(nl - text) : (size_t)(end - text);
        if (is_needed(text, len)) {
            if (dft_sbuf_reserve(&kept->text, len + 1) != 0)
                return -1;
            memcpy(kept->text.data + kept->text.len, text, len);
            kept->text.data[kept->text.len + len] = '\n';
            kept->text.len += len + 1;
            kept->count++;
        }
        text += len + (nl ? 1 : 0);
    }
    return 0;
}

void dft_needed_lines_clear(dft_needed_lines *kept)
{
    kept->text.len = 0;
    kept->text.failed = 0;
    kept->count = 0;
}
