/* reader/gz.c: streaming line reader over plain or gzip trace files.
 *
 * A compressed trace is a concatenation of gzip members; inflate stops at the
 * end of each one, so the reader resets it and carries on with the next.
 * Input ending inside a member is a torn tail (a killed process): the lines
 * decoded before the tear are returned, the partial last line is dropped.
 * Memory: one input buffer and one output buffer that grows only to hold the
 * longest line, and never past DFT_RD_LINE_MAX: a longer line is skipped
 * (read and dropped up to its '\n') and counted.  Runs without the GIL;
 * touches no Python object. */
#include "reader/reader.h"
#include "reader/inflate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RD_IN_SIZE (256 * 1024)
#define RD_OUT_SIZE (1024 * 1024)

const char *dft_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFDIR: return "a directory";
    default: return "not a regular file";
    }
}

/* Opens a regular file for reading.  O_NONBLOCK keeps open() from waiting
 * for a FIFO's writer; the type is checked on the descriptor itself (fstat),
 * so nothing can be swapped in between a check and the open. */
static FILE *open_regular(dft_rd *r, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(r->err, sizeof r->err, "%s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        snprintf(r->err, sizeof r->err, "%s", strerror(e));
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        r->not_regular = 1;
        snprintf(r->err, sizeof r->err, "not a regular file (%s)", dft_file_kind(st.st_mode));
        errno = EINVAL;
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *fp = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
    if (!fp) {
        int e = errno;
        snprintf(r->err, sizeof r->err, "%s", strerror(e));
        close(fd);
        errno = e;
    }
    return fp;
}

int dft_rd_open(dft_rd *r, const char *path)
{
    return dft_rd_open_at(r, path, 0);
}

int dft_rd_open_at(dft_rd *r, const char *path, uint64_t offset)
{
    memset(r, 0, sizeof *r);
    r->fp = open_regular(r, path);
    if (!r->fp)
        return -1;
    if (offset > (uint64_t)INT64_MAX || fseeko(r->fp, (off_t)offset, SEEK_SET) != 0) {
        int e = offset > (uint64_t)INT64_MAX ? EINVAL : errno;
        snprintf(r->err, sizeof r->err, "%s", strerror(e));
        dft_rd_close(r);
        errno = e;
        return -1;
    }
    r->in_offset = offset;
    r->in = malloc(RD_IN_SIZE);
    r->out = malloc(RD_OUT_SIZE);
    if (!r->in || !r->out) {
        dft_rd_close(r);
        errno = ENOMEM;
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    r->in_cap = RD_IN_SIZE;
    r->out_cap = RD_OUT_SIZE;
    size_t got = fread(r->in, 1, r->in_cap, r->fp);
    if (got == 0 && ferror(r->fp)) {
        int e = errno;
        snprintf(r->err, sizeof r->err, "%s", strerror(e));
        dft_rd_close(r);
        errno = e;
        return -1;
    }
    r->gzip = got >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b;
    size_t plen = strlen(path);
    if (!r->gzip && got > 0 && plen >= 3 && strcmp(path + plen - 3, ".gz") == 0) {
        /* A .gz name on bytes that are not gzip: say so, never parse them. */
        r->eof = 1;
        snprintf(r->err, sizeof r->err,
                 "not gzip: the file starts with bytes %02x %02x, not the gzip magic 1f 8b",
                 r->in[0], got > 1 ? r->in[1] : 0);
        r->done = 1;
        r->end = DFT_RD_CORRUPT;
        return 0;
    }
    if (r->gzip) {
        r->inf = dft_inflater_new();
        if (!r->inf) {
            dft_rd_close(r);
            errno = ENOMEM;
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        r->next_in = r->in;
        r->avail_in = got;
    } else {
        /* Plain text: the bytes read so far are the first output. */
        memcpy(r->out, r->in, got);
        r->len = got;
    }
    if (got < r->in_cap)
        r->eof = feof(r->fp) ? 1 : r->eof;
    return 0;
}

void dft_rd_close(dft_rd *r)
{
    dft_inflater_free(r->inf);
    r->inf = NULL;
    if (r->fp)
        fclose(r->fp);
    free(r->in);
    free(r->out);
    r->fp = NULL;
    r->in = NULL;
    r->out = NULL;
}

static void rd_finish(dft_rd *r, dft_rd_status why, const char *msg)
{
    r->done = 1;
    r->end = why;
    if (msg)
        snprintf(r->err, sizeof r->err, "%s", msg);
}

/* Reads more compressed input; returns bytes read (0 at end or error). */
static size_t rd_fill(dft_rd *r)
{
    if (r->eof)
        return 0;
    size_t got = fread(r->in, 1, r->in_cap, r->fp);
    if (got < r->in_cap) {
        if (ferror(r->fp)) {
            rd_finish(r, DFT_RD_IOERR, strerror(errno));
            r->eof = 1;
            return 0;
        }
        r->eof = 1;
    }
    return got;
}

/* Appends decoded bytes at out[len..cap); returns 1 when some were added,
 * 0 when the stream has ended (r->done set). */
static int rd_more(dft_rd *r)
{
    if (r->done)
        return 0;
    if (!r->gzip) {
        size_t want = r->out_cap - r->len;
        size_t got = r->eof ? 0 : fread(r->out + r->len, 1, want, r->fp);
        if (got < want && !r->eof) {
            if (ferror(r->fp)) {
                rd_finish(r, DFT_RD_IOERR, strerror(errno));
                return 0;
            }
            r->eof = 1;
        }
        r->len += got;
        if (got == 0)
            rd_finish(r, DFT_RD_EOF, NULL);
        return got > 0;
    }
    for (;;) {
        if (r->avail_in == 0) {
            size_t got = rd_fill(r);
            if (r->done)
                return 0;
            if (got == 0) {
                if (r->zero_tail)
                    rd_finish(r, DFT_RD_TRUNCATED, "zero bytes after the last gzip member");
                else if (r->in_member)
                    rd_finish(r, DFT_RD_TRUNCATED, "the last gzip member ends early");
                else
                    rd_finish(r, DFT_RD_EOF, NULL);
                return 0;
            }
            r->next_in = r->in;
            r->avail_in = got;
        }
        if (!r->in_member) {
            if (r->next_in[0] == 0) {
                /* A zero-filled tail (space allocated but never written before
                 * a crash) ends the stream like a torn member; anything else
                 * after it is corruption. */
                while (r->avail_in > 0 && r->next_in[0] == 0) {
                    r->next_in++;
                    r->avail_in--;
                    r->in_offset++;
                }
                if (r->avail_in == 0) {
                    r->zero_tail = 1;
                    continue;
                }
            }
            if (r->next_in[0] != 0x1f || r->zero_tail) {
                char msg[96];
                snprintf(msg, sizeof msg, "bytes after the last gzip member at offset %llu",
                         (unsigned long long)r->in_offset);
                rd_finish(r, DFT_RD_CORRUPT, msg);
                return 0;
            }
            if (dft_inflater_member(r->inf) != 0) {
                rd_finish(r, DFT_RD_CORRUPT, "inflate reset failed");
                return 0;
            }
            r->in_member = 1;
        }
        size_t took = r->avail_in, produced = 0;
        const char *why = NULL;
        dft_inf_status st = dft_inflater_run(r->inf, r->next_in, &took, r->out + r->len,
                                             r->out_cap - r->len, &produced, &why);
        r->len += produced;
        r->next_in += took;
        r->avail_in -= took;
        r->in_offset += took;
        if (st == DFT_INF_MEMBER_END) {
            r->members++;
            r->in_member = 0;
        } else if (st == DFT_INF_BAD) {
            char msg[200];
            snprintf(msg, sizeof msg, "gzip member %llu does not decode (%s) near offset %llu",
                     (unsigned long long)r->members + 1, why ? why : "bad data",
                     (unsigned long long)r->in_offset);
            rd_finish(r, DFT_RD_CORRUPT, msg);
            return produced > 0;
        } else if (st == DFT_INF_NOMEM) {
            rd_finish(r, DFT_RD_IOERR, "out of memory");
            return produced > 0;
        }
        if (produced > 0)
            return 1;
        if (r->len == r->out_cap)
            return 1; /* caller grows the buffer */
    }
}

static void note_long_line(dft_rd *r)
{
    r->skipping = 0;
    r->line_no++;
    if (r->long_lines++ == 0)
        r->first_long_line = r->line_no;
    r->last_long_line = r->line_no;
}

dft_rd_status dft_rd_next(dft_rd *r, const char **line, size_t *len)
{
    size_t scanned = r->pos;
    for (;;) {
        char *nl = memchr(r->out + scanned, '\n', r->len - scanned);
        if (nl && r->skipping) {
            /* The end of an over-long line: drop it, go on with the next. */
            note_long_line(r);
            r->pos = (size_t)(nl - r->out) + 1;
            scanned = r->pos;
            continue;
        }
        if (nl) {
            *line = r->out + r->pos;
            *len = (size_t)(nl - (r->out + r->pos));
            r->pos = (size_t)(nl - r->out) + 1;
            r->line_no++;
            return DFT_RD_OK;
        }
        if (r->done) {
            if (r->skipping) {
                note_long_line(r); /* the last line, over-long */
            } else if (r->pos < r->len && r->end == DFT_RD_EOF) {
                /* A last line without '\n' counts unless the tail was torn. */
                *line = r->out + r->pos;
                *len = r->len - r->pos;
                r->pos = r->len;
                r->line_no++;
                return DFT_RD_OK;
            }
            r->pos = r->len;
            return r->end;
        }
        if (r->skipping) {
            r->pos = r->len = 0; /* drop what was read of the over-long line */
        } else if (r->pos > 0) {
            /* Move the partial line to the front. */
            memmove(r->out, r->out + r->pos, r->len - r->pos);
            r->len -= r->pos;
            r->pos = 0;
        }
        if (r->len == r->out_cap) {
            /* The partial line fills the buffer: grow it up to the limit. */
            if (r->out_cap >= DFT_RD_LINE_MAX) {
                r->skipping = 1;
                r->len = 0;
            } else {
                size_t cap = r->out_cap * 2 > DFT_RD_LINE_MAX ? DFT_RD_LINE_MAX : r->out_cap * 2;
                char *bigger = realloc(r->out, cap);
                if (!bigger) {
                    rd_finish(r, DFT_RD_IOERR, "out of memory");
                    return DFT_RD_IOERR;
                }
                r->out = bigger;
                r->out_cap = cap;
            }
        }
        scanned = r->len;
        rd_more(r);
    }
}
