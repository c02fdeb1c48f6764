/* reader/iostats.c: one trace file's I/O per file it touched, for `dftracer
 * summary --io` and the report's I/O section (docs/cli.md, "I/O").
 *
 * One streaming pass.  Each POSIX/STDIO event is put on its file (its fhash,
 * resolved by the FH lines, or a merged trace's `file`) and counted as
 * Darshan counts it: POSIX_* and STDIO_* counters, access-size buckets,
 * sequential and consecutive accesses, no-overlap times.  The events carry
 * no file offset for read/write/fread (only pread & co. and lseek do), so
 * the offset of each access is followed here, as Darshan's wrappers follow
 * it: per descriptor from open (0) through reads, writes and lseek (whose
 * `ret` is the new offset), shared by dup/fcntl copies; per stdio stream
 * from fopen/fdopen (the descriptor's offset) through fread/fwrite, fseek and
 * ftell.  An access at an offset not known (a descriptor inherited from the
 * parent, after fseek(SEEK_END)) is counted but not placed.
 *
 * "Bytes read" counts each byte once per open: a program that reads a
 * header through a buffered descriptor and then the data again through an
 * fdopen'd duplicate (numpy's np.load) read the file once.  Per epoch (its
 * bounds given by the caller) the byte ranges read are kept, merged, for
 * the unique and re-read bytes.  Memory: per distinct file, its counters and
 * ranges (at most DFT_IVSET_MAX per epoch); per open descriptor, its ranges
 * until it is closed; never per event.  No GIL, no Python. */
#include "reader/iostats_pass.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/reader.h"

const char *const dft_io_counter_names[IO_NCOUNTERS] = {
#define B(P) P "0_100", P "100_1K", P "1K_10K", P "10K_100K", P "100K_1M", P "1M_4M", \
             P "4M_10M", P "10M_100M", P "100M_1G", P "1G_PLUS"
    "POSIX_OPENS", "POSIX_READS", "POSIX_WRITES", "POSIX_SEEKS", "POSIX_STATS",
    "POSIX_MMAPS", "POSIX_FSYNCS", "POSIX_FDSYNCS", "POSIX_DUPS", "POSIX_BYTES_READ",
    "POSIX_BYTES_WRITTEN", "POSIX_MAX_BYTE_READ", "POSIX_MAX_BYTE_WRITTEN",
    "POSIX_CONSEC_READS", "POSIX_CONSEC_WRITES", "POSIX_SEQ_READS", "POSIX_SEQ_WRITES",
    "POSIX_RW_SWITCHES", B("POSIX_SIZE_READ_"), B("POSIX_SIZE_WRITE_"),
    "POSIX_F_READ_TIME", "POSIX_F_WRITE_TIME", "POSIX_F_META_TIME",
    "STDIO_OPENS", "STDIO_FDOPENS", "STDIO_READS", "STDIO_WRITES", "STDIO_SEEKS",
    "STDIO_FLUSHES", "STDIO_BYTES_READ", "STDIO_BYTES_WRITTEN", "STDIO_MAX_BYTE_READ",
    "STDIO_MAX_BYTE_WRITTEN", "STDIO_F_READ_TIME", "STDIO_F_WRITE_TIME",
    "STDIO_F_META_TIME",
    "meta_ops", "bytes_read", "bytes_written", "unplaced_reads", B("read_"), B("write_"),
#undef B
};

/* ---- epochs and identity ----------------------------------------------- */

static int add_mark(pass *ps, int kind, int64_t epoch, int64_t ts)
{
    dft_io_result *r = ps->r;
    if (ps->last_mark < r->nmarks && r->marks[ps->last_mark].kind == kind &&
        r->marks[ps->last_mark].epoch == epoch) {
        dft_io_mark *m = &r->marks[ps->last_mark];
        m->ts = ts < m->ts ? ts : m->ts;
        return 0;
    }
    for (size_t i = 0; i < r->nmarks; i++)
        if (r->marks[i].kind == kind && r->marks[i].epoch == epoch) {
            r->marks[i].ts = ts < r->marks[i].ts ? ts : r->marks[i].ts;
            ps->last_mark = i;
            return 0;
        }
    if (DFT_GROW(r->marks, r->nmarks, ps->marks_cap, 16) != 0)
        return -1;
    r->marks[r->nmarks] = (dft_io_mark){kind, epoch, ts};
    ps->last_mark = r->nmarks++;
    return 0;
}

/* An event that starts or belongs to an epoch: --epoch-from's events (the
 * epoch in args.epoch, else their order), `dataloader/iter` and
 * `pipeline/iteration` with args.epoch, ai.pipeline's `epoch` and
 * `epoch.block`. */
static int marks(pass *ps, const dft_line *l)
{
    io_args a;
    a.have = 0;
    if (ps->epoch_from) {
        size_t sn = ps->epoch_from_len;
        if ((l->name.n == sn && memcmp(l->name.p, ps->epoch_from, sn) == 0) ||
            (l->cat.n + 1 + l->name.n == sn && memcmp(ps->epoch_from, l->cat.p, l->cat.n) == 0 &&
             ps->epoch_from[l->cat.n] == '/' &&
             memcmp(ps->epoch_from + l->cat.n + 1, l->name.p, l->name.n) == 0)) {
            if (dft_io_scan_args(l, &a) < 0)
                a.have = 0;
            int64_t e = (a.have & A_EPOCH) ? a.epoch : ps->named_seen;
            ps->named_seen++;
            return add_mark(ps, DFT_IO_MARK_NAMED, e, l->ts);
        }
    }
    if (SV_IS(l->cat, "dataloader") && SV_IS(l->name, "iter")) {
        /* a pass over a loader begins (its workers start prefetching inside
         * it): epoch e starts with the first of any loader's pass e (the
         * training loader's, or validation's when it runs first: both
         * passes belong to that epoch) */
        if (dft_io_scan_args(l, &a) == 0 && (a.have & A_EPOCH))
            return add_mark(ps, DFT_IO_MARK_LOADER, a.epoch, l->ts);
        return 0;
    }
    if (!SV_IS(l->cat, "pipeline"))
        return 0;
    if (SV_IS(l->name, "iteration")) {
        if (dft_io_scan_args(l, &a) == 0 && (a.have & A_EPOCH))
            return add_mark(ps, DFT_IO_MARK_ITERATION, a.epoch, l->ts);
    } else if (SV_IS(l->name, "epoch") || SV_IS(l->name, "epoch.block")) {
        if (dft_io_scan_args(l, &a) < 0)
            a.have = 0;
        int64_t e = (a.have & A_EPOCH) ? a.epoch : ps->pipeline_seen;
        ps->pipeline_seen++;
        return add_mark(ps, DFT_IO_MARK_PIPELINE, e, l->ts);
    }
    return 0;
}

/* The FH lines: each file's path by its hash. */
static int metadata(pass *ps, const dft_line *l)
{
    if (SV_IS(l->name, "FH")) {
        uint64_t h;
        size_t slot;
        if (dft_hash_token(l->a_value, &h) < 0)
            return 0;
        int f = dft_u64map_get(&ps->paths, h, 1, &slot);
        if (f < 0)
            return -1;
        if (f == 1)
            return 0;
        char *p = malloc(sizeof(size_t) + l->a_name.n + 1);
        if (!p)
            return -1;
        memcpy(p, &l->a_name.n, sizeof(size_t));
        dft_copy_sv(p + sizeof(size_t), l->a_name.n + 1, l->a_name);
        ps->paths.vals[slot] = p;
    }
    return 0;
}

static int read_lines(pass *ps, dft_rd *rd)
{
    dft_io_result *r = ps->r;
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next_parsed(rd, &text, &n, &l, &r->bad)) == DFT_RD_OK) {
        r->events++;
        if (dft_ident_line(&r->who, &l)) {
            if (metadata(ps, &l) < 0)
                return -1;
            continue;
        }
        if (l.ph != 'X' || (l.have & (DFT_HAVE_TS | DFT_HAVE_DUR)) != (DFT_HAVE_TS | DFT_HAVE_DUR) ||
            !dft_dur_ok(l.ts, l.dur))
            continue;
        if (SV_IS(l.cat, "POSIX") || SV_IS(l.cat, "STDIO")) {
            if (dft_io_event(ps, &l) < 0)
                return -1;
        } else if (!SV_IS(l.cat, "dftracer") && marks(ps, &l) < 0) {
            return -1;
        }
    }
    r->long_lines = rd->long_lines;
    return (int)st;
}

/* Gives each file its path from the FH lines (or its hash when none). */
static int name_files(pass *ps)
{
    dft_io_result *r = ps->r;
    for (size_t i = 0; i < r->nfiles; i++) {
        dft_io_file *f = &r->files[i];
        if (f->path)
            continue;
        size_t slot;
        const char *p = NULL;
        size_t len = 0;
        if (dft_u64map_get(&ps->paths, f->key, 0, &slot) == 1 && ps->paths.vals[slot]) {
            memcpy(&len, ps->paths.vals[slot], sizeof len);
            p = (const char *)ps->paths.vals[slot] + sizeof(size_t);
        }
        char buf[40];
        if (!p) { /* a hash without its FH line: named by the hash */
            len = (size_t)snprintf(buf, sizeof buf, "<fhash %016llx>", (unsigned long long)f->key);
            p = buf;
        }
        if (!(f->path = malloc(len + 1)))
            return -1;
        memcpy(f->path, p, len);
        f->path[len] = 0;
        f->path_len = len;
    }
    return 0;
}

int dft_io_read(const char *path, const char *epoch_from, const int64_t *bounds, size_t nbounds,
                dft_io_result *r)
{
    memset(r, 0, sizeof *r);
    dft_ident_init(&r->who);
    r->read_ts_min = INT64_MAX;
    r->read_ts_max = INT64_MIN;
    dft_rd rd;
    if (dft_rd_open(&rd, path) < 0)
        return -1;
    pass ps;
    memset(&ps, 0, sizeof ps);
    ps.r = r;
    ps.epoch_from = epoch_from && *epoch_from ? epoch_from : NULL;
    ps.epoch_from_len = ps.epoch_from ? strlen(ps.epoch_from) : 0;
    ps.bounds = bounds;
    ps.nbounds = bounds ? nbounds : 0;
    int st = read_lines(&ps, &rd);
    r->members = rd.members;
    if (st >= 0 && st != DFT_RD_EOF)
        snprintf(r->err, sizeof r->err, "%s", rd.err);
    dft_rd_close(&rd);
    if (st >= 0 && name_files(&ps) < 0)
        st = -1;
    r->status = st;
    if (st < 0)
        snprintf(r->err, sizeof r->err, "out of memory");
    for (size_t i = 0; i < ps.nofds; i++)
        dft_ivset_free(&ps.ofds[i].seen);
    free(ps.ofds);
    free(ps.streams);
    dft_u64map_free(&ps.fmap, 0);
    dft_u64map_free(&ps.fds, 0);
    dft_u64map_free(&ps.smap, 0);
    dft_u64map_free(&ps.paths, 1);
    return 0;
}

void dft_io_free(dft_io_result *r)
{
    for (size_t i = 0; i < r->nfiles; i++) {
        free(r->files[i].path);
        for (size_t j = 0; j < r->files[i].nslots; j++)
            dft_ivset_free(&r->files[i].slots[j].iv);
        free(r->files[i].slots);
    }
    free(r->files);
    free(r->marks);
    memset(r, 0, sizeof *r);
}
