/* reader/iostats_count.c: the I/O pass's counting (reader/iostats.c reads
 * the file and follows descriptors and streams): each POSIX/STDIO call, by
 * its name, counted as Darshan counts it: POSIX_* and STDIO_* counters,
 * access-size buckets, sequential and consecutive accesses, no-overlap
 * times, and the bytes read once per open and per epoch.  No GIL, no
 * Python. */
#include <stdlib.h>
#include <string.h>

#include "reader/classify.h"
#include "reader/iostats_pass.h"

/* Which counter a call feeds is the one I/O table's (reader/classify.c,
 * dft_cls_io_op). */
#define op_of(cat, name) dft_cls_io_op((cat).p, (cat).n, (name).p, (name).n)

/* ---- counting ---------------------------------------------------------- */

static int bucket(int64_t n)
{
    static const int64_t top[DFT_IO_BUCKETS - 1] = {
        100, 1024, 10240, 102400, 1048576, 4194304, 10485760, 104857600, 1073741824};
    int b = 0;
    while (b < DFT_IO_BUCKETS - 1 && n > top[b])
        b++;
    return b;
}

/* Darshan's DARSHAN_TIMER_INC_NO_OVERLAP: time already counted for an
 * overlapping call of the same kind on the same file is not counted again. */
static void timer(dft_io_file *f, int which, int counter, int64_t ts, int64_t dur)
{
    int64_t *last = &f->last_end[which], end = ts + dur;
    if (ts >= *last)
        f->c[counter] += dur;
    else if (end > *last)
        f->c[counter] += end - *last;
    if (end > *last)
        *last = end;
}

static dft_io_slot *slot_of(pass *ps, dft_io_file *f, int64_t ts)
{
    int64_t epoch = INT64_MIN;
    if (ps->nbounds) {
        epoch = ps->bounds[0];
        for (size_t i = 0; i < ps->nbounds && ps->bounds[2 * i + 1] <= ts; i++)
            epoch = ps->bounds[2 * i];
    }
    for (size_t i = 0; i < f->nslots; i++)
        if (f->slots[i].epoch == epoch)
            return &f->slots[i];
    dft_io_slot *n = realloc(f->slots, (f->nslots + 1) * sizeof *n);
    if (!n)
        return NULL;
    f->slots = n;
    memset(&n[f->nslots], 0, sizeof *n);
    n[f->nslots].epoch = epoch;
    return &n[f->nslots++];
}

/* A read of n bytes at off (-1: not known) through ofd o (-1: none). */
static int count_read(pass *ps, int stdio, int64_t file, int64_t o, int64_t off, int64_t n,
                      const dft_line *l, int timed)
{
    dft_io_result *r = ps->r;
    dft_io_file *f = &r->files[file];
    if (stdio) {
        f->c[IO_STDIO_READS]++;
        f->c[IO_STDIO_BYTES_READ] += n;
        if (off >= 0 && off + n - 1 > f->c[IO_STDIO_MAX_BYTE_READ])
            f->c[IO_STDIO_MAX_BYTE_READ] = off + n - 1;
        if (timed)
            timer(f, 3, IO_STDIO_F_READ_TIME, l->ts, l->dur);
    } else {
        f->c[IO_POSIX_READS]++;
        f->c[IO_POSIX_BYTES_READ] += n;
        f->c[IO_POSIX_SIZE_READ_0 + bucket(n)]++;
        if (off >= 0) {
            if (off > f->last_byte_read)
                f->c[IO_POSIX_SEQ_READS]++;
            if (off == f->last_byte_read + 1)
                f->c[IO_POSIX_CONSEC_READS]++;
            f->last_byte_read = off + n - 1;
            if (off + n - 1 > f->c[IO_POSIX_MAX_BYTE_READ])
                f->c[IO_POSIX_MAX_BYTE_READ] = off + n - 1;
        }
        if (f->last_io == 2)
            f->c[IO_POSIX_RW_SWITCHES]++;
        f->last_io = 1;
        if (timed)
            timer(f, 0, IO_POSIX_F_READ_TIME, l->ts, l->dur);
    }
    f->c[IO_X_SIZE_READ_0 + bucket(n)]++;
    if (r->read_ts_min > l->ts)
        r->read_ts_min = l->ts;
    if (r->read_ts_max < l->ts)
        r->read_ts_max = l->ts;
    int64_t fresh = n;
    if (off >= 0 && o >= 0 && n > 0 && (fresh = dft_ivset_add(&ps->ofds[o].seen, off, off + n)) < 0)
        return -1;
    dft_io_slot *s = slot_of(ps, f, l->ts);
    if (!s)
        return -1;
    f->c[IO_X_BYTES_READ] += fresh;
    s->bytes += fresh;
    if (off < 0) {
        f->c[IO_X_UNPLACED_READS]++;
        s->unplaced += n;
    } else if (n > 0 && dft_ivset_add(&s->iv, off, off + n) < 0) {
        return -1;
    }
    return 0;
}

static void count_write(dft_io_file *f, int stdio, int64_t off, int64_t n, const dft_line *l,
                        int timed)
{
    if (stdio) {
        f->c[IO_STDIO_WRITES]++;
        f->c[IO_STDIO_BYTES_WRITTEN] += n;
        if (off >= 0 && off + n - 1 > f->c[IO_STDIO_MAX_BYTE_WRITTEN])
            f->c[IO_STDIO_MAX_BYTE_WRITTEN] = off + n - 1;
        if (timed)
            timer(f, 4, IO_STDIO_F_WRITE_TIME, l->ts, l->dur);
    } else {
        f->c[IO_POSIX_WRITES]++;
        f->c[IO_POSIX_BYTES_WRITTEN] += n;
        f->c[IO_POSIX_SIZE_WRITE_0 + bucket(n)]++;
        if (off >= 0) {
            if (off > f->last_byte_written)
                f->c[IO_POSIX_SEQ_WRITES]++;
            if (off == f->last_byte_written + 1)
                f->c[IO_POSIX_CONSEC_WRITES]++;
            f->last_byte_written = off + n - 1;
            if (off + n - 1 > f->c[IO_POSIX_MAX_BYTE_WRITTEN])
                f->c[IO_POSIX_MAX_BYTE_WRITTEN] = off + n - 1;
        }
        if (f->last_io == 1)
            f->c[IO_POSIX_RW_SWITCHES]++;
        f->last_io = 2;
        if (timed)
            timer(f, 1, IO_POSIX_F_WRITE_TIME, l->ts, l->dur);
    }
    f->c[IO_X_BYTES_WRITTEN] += n;
    f->c[IO_X_SIZE_WRITE_0 + bucket(n)]++;
}

static void meta(dft_io_file *f, int stdio, int counter, const dft_line *l)
{
    if (counter >= 0)
        f->c[counter]++;
    f->c[IO_X_META_OPS]++;
    timer(f, stdio ? 5 : 2, stdio ? IO_STDIO_F_META_TIME : IO_POSIX_F_META_TIME, l->ts, l->dur);
}

/* The offset of an access through ofd o, and the ofd's offset after n bytes. */
static int64_t advance(pass *ps, int64_t o, int64_t n)
{
    if (o < 0 || ps->ofds[o].pos < 0)
        return -1;
    int64_t off = ps->ofds[o].pos;
    ps->ofds[o].pos += n;
    return off;
}

/* sendfile, copy_file_range, splice: a read of the source and a write of
 * the destination, whichever of the two is traced; the time goes to the
 * source's reads (to the destination's writes when only it is traced). */
static int xfer(pass *ps, const dft_line *l, const io_args *a, int64_t n, int64_t src,
                int64_t dst)
{
    if (src >= 0) {
        int64_t o = (a->have & A_FD) ? dft_io_fd_ofd(ps, dft_io_fd_key(l, a->fd), src) : -1;
        if ((a->have & A_FD) && o < 0)
            return -1;
        int64_t off = (a->have & A_OFFSET) ? a->offset : advance(ps, o, n);
        if (count_read(ps, 0, src, o, off, n, l, 1) < 0)
            return -1;
    }
    if (dst >= 0) {
        int64_t o = (a->have & A_OUT_FD) ? dft_io_fd_ofd(ps, dft_io_fd_key(l, a->out_fd), dst) : -1;
        if ((a->have & A_OUT_FD) && o < 0)
            return -1;
        int64_t off = (a->have & A_OUT_OFFSET) ? a->out_offset : advance(ps, o, n);
        count_write(&ps->r->files[dst], 0, off, n, l, src < 0);
    }
    return 0;
}

int dft_io_event(pass *ps, const dft_line *l)
{
    io_args a;
    if (dft_io_scan_args(l, &a) < 0)
        return 0;
    int64_t file = (a.have & A_FHASH) ? dft_io_file_of(ps, &a.fhash, NULL)
                   : (a.have & A_FILE) ? dft_io_file_of(ps, NULL, &a.file) : -2;
    int64_t out = (a.have & A_OUT_FHASH) ? dft_io_file_of(ps, &a.out_fhash, NULL)
                  : (a.have & A_OUT_FILE) ? dft_io_file_of(ps, NULL, &a.out_file) : -2;
    if (file == -1 || out == -1)
        return -1;
    int op = op_of(l->cat, l->name);
    int64_t bytes = (l->have & DFT_HAVE_IO) ? l->io_bytes : 0;
    int failed = (a.have & A_RET) && a.ret < 0;
    ps->r->io_events++;
    if (op == DFT_IO_OP_XFER)
        return failed ? 0 : xfer(ps, l, &a, bytes, file, out);
    if (file < 0)
        return 0;
    dft_io_file *f = &ps->r->files[file];
    uint64_t key = dft_io_fd_key(l, a.fd);
    int64_t o;
    stream *s;
    switch (op) {
    case DFT_IO_OP_OPEN:
        meta(f, 0, IO_POSIX_OPENS, l);
        if ((a.have & A_RET) && a.ret >= 0) {
            /* O_APPEND: writes go to the end, whose offset is not known */
            o = dft_io_ofd_new(ps, file, (a.have & A_FLAGS) && (a.flags & 02000) ? -1 : 0);
            if (o < 0 || dft_io_fd_bind(ps, dft_io_fd_key(l, a.ret), o) < 0)
                return -1;
        }
        return 0;
    case DFT_IO_OP_CLOSE:
        meta(f, 0, -1, l);
        if (a.have & A_FD)
            dft_io_fd_drop(ps, key);
        return 0;
    case DFT_IO_OP_FCNTL: /* F_DUPFD (0) and F_DUPFD_CLOEXEC (1030) copy the descriptor */
        if (!((a.have & A_CMD) && (a.cmd == 0 || a.cmd == 1030))) {
            meta(f, 0, -1, l);
            return 0;
        }
        /* fall through */
    case DFT_IO_OP_DUP:
        meta(f, 0, IO_POSIX_DUPS, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0 && a.ret != a.fd) {
            o = dft_io_fd_ofd(ps, key, file);
            if (o < 0 || dft_io_fd_bind(ps, dft_io_fd_key(l, a.ret), o) < 0)
                return -1;
        }
        return 0;
    case DFT_IO_OP_READ:
    case DFT_IO_OP_PREAD:
        if (failed)
            return 0;
        o = (a.have & A_FD) ? dft_io_fd_ofd(ps, key, file) : -1;
        if ((a.have & A_FD) && o < 0)
            return -1;
        return count_read(ps, 0, file, o, op == DFT_IO_OP_PREAD ? ((a.have & A_OFFSET) ? a.offset : -1)
                                                         : advance(ps, o, bytes),
                          bytes, l, 1);
    case DFT_IO_OP_WRITE:
    case DFT_IO_OP_PWRITE:
    case DFT_IO_OP_DPRINTF:
        if (failed)
            return 0;
        o = (a.have & A_FD) ? dft_io_fd_ofd(ps, key, file) : -1;
        if ((a.have & A_FD) && o < 0)
            return -1;
        count_write(f, op == DFT_IO_OP_DPRINTF,
                    op == DFT_IO_OP_PWRITE ? ((a.have & A_OFFSET) ? a.offset : -1)
                                    : advance(ps, o, bytes), bytes, l, 1);
        return 0;
    case DFT_IO_OP_SEEK:
        meta(f, 0, IO_POSIX_SEEKS, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0) {
            if ((o = dft_io_fd_ofd(ps, key, file)) < 0)
                return -1;
            ps->ofds[o].pos = a.ret;
        }
        return 0;
    case DFT_IO_OP_FSYNC:
    case DFT_IO_OP_FDSYNC: /* Darshan counts their time as write time */
        f->c[op == DFT_IO_OP_FSYNC ? IO_POSIX_FSYNCS : IO_POSIX_FDSYNCS]++;
        timer(f, 1, IO_POSIX_F_WRITE_TIME, l->ts, l->dur);
        return 0;
    case DFT_IO_OP_STAT:
        meta(f, 0, IO_POSIX_STATS, l);
        return 0;
    case DFT_IO_OP_MMAP: /* the bytes read through a mapping are page faults: not seen */
        meta(f, 0, IO_POSIX_MMAPS, l);
        return 0;
    case DFT_IO_OP_META:
        meta(f, 0, -1, l);
        return 0;
    case DFT_IO_OP_SOPEN:
    case DFT_IO_OP_SFDOPEN:
        meta(f, 1, op == DFT_IO_OP_SOPEN ? IO_STDIO_OPENS : IO_STDIO_FDOPENS, l);
        if (!(a.have & A_FD) || a.fd < 0)
            return 0;
        if (op == DFT_IO_OP_SOPEN) {
            int append = (a.have & A_MODE) && a.mode.n && a.mode.p[0] == 'a';
            if ((o = dft_io_ofd_new(ps, file, append ? -1 : 0)) < 0 || dft_io_fd_bind(ps, key, o) < 0)
                return -1;
        } else if ((o = dft_io_fd_ofd(ps, key, file)) < 0) {
            return -1;
        }
        dft_io_stream_drop(ps, key);
        if (!(s = dft_io_stream_of(ps, key, 1)))
            return -1;
        s->ofd = o;
        s->pos = ps->ofds[o].pos;
        ps->ofds[o].refs++;
        return 0;
    case DFT_IO_OP_SCLOSE:
        meta(f, 1, -1, l);
        if (a.have & A_FD) {
            dft_io_stream_drop(ps, key);
            dft_io_fd_drop(ps, key); /* fclose closes the descriptor */
        }
        return 0;
    case DFT_IO_OP_SFLUSH: /* Darshan counts fflush's time as write time */
        f->c[IO_STDIO_FLUSHES]++;
        timer(f, 4, IO_STDIO_F_WRITE_TIME, l->ts, l->dur);
        return 0;
    case DFT_IO_OP_STELL:
        meta(f, 1, -1, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0 &&
            (s = dft_io_stream_of(ps, key, 0)))
            s->pos = a.ret;
        return 0;
    case DFT_IO_OP_SSEEK:
        meta(f, 1, IO_STDIO_SEEKS, l);
        if ((a.have & A_FD) && !failed && (s = dft_io_stream_of(ps, key, 0))) {
            int64_t whence = (a.have & A_WHENCE) ? a.whence : -1;
            if (whence == 0 && (a.have & A_OFFSET))
                s->pos = a.offset;
            else if (whence == 1 && (a.have & A_OFFSET) && s->pos >= 0)
                s->pos += a.offset;
            else
                s->pos = -1; /* SEEK_END: the file's size is not known */
        }
        return 0;
    case DFT_IO_OP_SREAD:
    case DFT_IO_OP_SWRITE: {
        int64_t off = -1;
        o = -1;
        if (a.have & A_FD) {
            if (!(s = dft_io_stream_of(ps, key, 0))) { /* a stream opened before the trace */
                if ((o = dft_io_fd_ofd(ps, key, file)) < 0 || !(s = dft_io_stream_of(ps, key, 1)))
                    return -1;
                s->ofd = o;
                ps->ofds[o].refs++;
            }
            o = s->ofd;
            off = s->pos;
            if (s->pos >= 0)
                s->pos += bytes;
        }
        if (op == DFT_IO_OP_SREAD)
            return count_read(ps, 1, file, o, off, bytes, l, 1);
        count_write(f, 1, off, bytes, l, 1);
        return 0;
    }
    default:
        return 0;
    }
}

