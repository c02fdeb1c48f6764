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
#include "reader/iostats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

#define SV_IS(v, lit) ((v).n == sizeof(lit) - 1 && memcmp((v).p, lit, sizeof(lit) - 1) == 0)

/* ---- the calls --------------------------------------------------------- */

enum op {
    OP_META, OP_OPEN, OP_CLOSE, OP_DUP, OP_FCNTL, OP_READ, OP_PREAD, OP_WRITE, OP_PWRITE,
    OP_XFER, OP_SEEK, OP_FSYNC, OP_FDSYNC, OP_STAT, OP_MMAP,
    OP_SMETA, OP_SOPEN, OP_SFDOPEN, OP_SCLOSE, OP_SFLUSH, OP_STELL, OP_SSEEK, OP_SREAD,
    OP_SWRITE, OP_DPRINTF,
};

typedef struct call {
    const char *name;
    enum op op;
} call;

/* Sorted by name (strcmp); the calls of docs/io-tracing.md's table that are
 * not plain metadata.  A name not here is metadata of its family. */
static const call calls[] = {
    {"_IO_fgets", OP_SREAD}, {"_IO_fputs", OP_SWRITE}, {"_IO_fread", OP_SREAD},
    {"_IO_fwrite", OP_SWRITE}, {"_IO_getc", OP_SREAD}, {"_IO_putc", OP_SWRITE},
    {"__fgets_chk", OP_SREAD}, {"__fgets_unlocked_chk", OP_SREAD},
    {"__fprintf_chk", OP_SWRITE}, {"__fread_chk", OP_SREAD},
    {"__fread_unlocked_chk", OP_SREAD}, {"__fxstat", OP_STAT}, {"__fxstat64", OP_STAT},
    {"__fxstatat", OP_STAT}, {"__fxstatat64", OP_STAT}, {"__getdelim", OP_SREAD},
    {"__lxstat", OP_STAT}, {"__lxstat64", OP_STAT}, {"__open64_2", OP_OPEN},
    {"__open_2", OP_OPEN}, {"__openat64_2", OP_OPEN}, {"__openat_2", OP_OPEN},
    {"__pread64", OP_PREAD}, {"__pread64_chk", OP_PREAD}, {"__pread_chk", OP_PREAD},
    {"__pwrite64", OP_PWRITE}, {"__read", OP_READ}, {"__read_chk", OP_READ},
    {"__vfprintf_chk", OP_SWRITE}, {"__write", OP_WRITE}, {"__xstat", OP_STAT},
    {"__xstat64", OP_STAT}, {"close", OP_CLOSE}, {"copy_file_range", OP_XFER},
    {"creat", OP_OPEN}, {"creat64", OP_OPEN}, {"dprintf", OP_DPRINTF}, {"dup", OP_DUP},
    {"dup2", OP_DUP}, {"dup3", OP_DUP}, {"fclose", OP_SCLOSE}, {"fcntl", OP_FCNTL},
    {"fcntl64", OP_FCNTL}, {"fdatasync", OP_FDSYNC}, {"fdopen", OP_SFDOPEN},
    {"fflush", OP_SFLUSH}, {"fgetc", OP_SREAD}, {"fgetc_unlocked", OP_SREAD},
    {"fgets", OP_SREAD}, {"fgets_unlocked", OP_SREAD}, {"fopen", OP_SOPEN},
    {"fopen64", OP_SOPEN}, {"fprintf", OP_SWRITE}, {"fputc", OP_SWRITE},
    {"fputc_unlocked", OP_SWRITE}, {"fputs", OP_SWRITE}, {"fputs_unlocked", OP_SWRITE},
    {"fread", OP_SREAD}, {"fread_unlocked", OP_SREAD}, {"fseek", OP_SSEEK},
    {"fseeko", OP_SSEEK}, {"fseeko64", OP_SSEEK}, {"fstat", OP_STAT}, {"fstat64", OP_STAT},
    {"fstatat", OP_STAT}, {"fstatat64", OP_STAT}, {"fsync", OP_FSYNC}, {"ftell", OP_STELL},
    {"ftello", OP_STELL}, {"ftello64", OP_STELL}, {"fwrite", OP_SWRITE},
    {"fwrite_unlocked", OP_SWRITE}, {"getc", OP_SREAD}, {"getc_unlocked", OP_SREAD},
    {"getdelim", OP_SREAD}, {"getline", OP_SREAD}, {"lseek", OP_SEEK}, {"lseek64", OP_SEEK},
    {"lstat", OP_STAT}, {"lstat64", OP_STAT}, {"mmap", OP_MMAP}, {"mmap64", OP_MMAP},
    {"open", OP_OPEN}, {"open64", OP_OPEN}, {"openat", OP_OPEN}, {"openat64", OP_OPEN},
    {"pread", OP_PREAD}, {"pread64", OP_PREAD}, {"preadv", OP_PREAD}, {"preadv2", OP_PREAD},
    {"preadv64", OP_PREAD}, {"preadv64v2", OP_PREAD}, {"putc", OP_SWRITE},
    {"putc_unlocked", OP_SWRITE}, {"pwrite", OP_PWRITE}, {"pwrite64", OP_PWRITE},
    {"pwritev", OP_PWRITE}, {"pwritev2", OP_PWRITE}, {"pwritev64", OP_PWRITE},
    {"pwritev64v2", OP_PWRITE}, {"read", OP_READ}, {"readv", OP_READ},
    {"sendfile", OP_XFER}, {"sendfile64", OP_XFER}, {"splice", OP_XFER}, {"stat", OP_STAT},
    {"stat64", OP_STAT}, {"statx", OP_STAT}, {"vdprintf", OP_DPRINTF},
    {"vfprintf", OP_SWRITE}, {"write", OP_WRITE}, {"writev", OP_WRITE},
};

static enum op op_of(dft_sv cat, dft_sv name)
{
    int stdio = SV_IS(cat, "STDIO");
    size_t lo = 0, hi = sizeof calls / sizeof *calls;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        size_t cn = strlen(calls[mid].name);
        int d = memcmp(name.p, calls[mid].name, name.n < cn ? name.n : cn);
        if (d == 0)
            d = name.n < cn ? -1 : name.n > cn;
        if (d == 0)
            return calls[mid].op;
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return stdio ? OP_SMETA : OP_META;
}

/* ---- args -------------------------------------------------------------- */

enum { A_FD = 1, A_OUT_FD = 2, A_RET = 4, A_OFFSET = 8, A_OUT_OFFSET = 16, A_WHENCE = 32,
       A_CMD = 64, A_FLAGS = 128, A_EPOCH = 256, A_PPID = 512, A_VALUE = 1024,
       A_FHASH = 2048, A_OUT_FHASH = 4096, A_FILE = 8192, A_OUT_FILE = 16384, A_MODE = 32768,
       A_NUM_WORKERS = 65536 };

typedef struct io_args {
    unsigned have;
    int64_t fd, out_fd, ret, offset, out_offset, whence, cmd, flags, epoch, ppid, value,
        num_workers;
    dft_sv fhash, out_fhash, file, out_file, mode;
} io_args;

static void ws(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
}

static int int_of(const char *p, const char *end, int64_t *v)
{
    int neg = p < end && *p == '-';
    const char *d = p + neg;
    int64_t x = 0;
    const char *q = d;
    while (q < end && *q >= '0' && *q <= '9' && q - d < 18)
        x = x * 10 + (*q++ - '0');
    if (q == d || q != end)
        return -1;
    *v = neg ? -x : x;
    return 0;
}

static void arg_value(io_args *a, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
    static const struct {
        const char *key;
        unsigned bit;
        size_t off;
    } ints[] = {
        {"fd", A_FD, offsetof(io_args, fd)},
        {"out_fd", A_OUT_FD, offsetof(io_args, out_fd)},
        {"ret", A_RET, offsetof(io_args, ret)},
        {"offset", A_OFFSET, offsetof(io_args, offset)},
        {"out_offset", A_OUT_OFFSET, offsetof(io_args, out_offset)},
        {"whence", A_WHENCE, offsetof(io_args, whence)},
        {"cmd", A_CMD, offsetof(io_args, cmd)},
        {"flags", A_FLAGS, offsetof(io_args, flags)},
        {"epoch", A_EPOCH, offsetof(io_args, epoch)},
        {"ppid", A_PPID, offsetof(io_args, ppid)},
        {"value", A_VALUE, offsetof(io_args, value)},
        {"num_workers", A_NUM_WORKERS, offsetof(io_args, num_workers)},
    };
    if (is_str) {
        if (SV_IS(key, "fhash")) {
            a->fhash = str;
            a->have |= A_FHASH;
        } else if (SV_IS(key, "out_fhash")) {
            a->out_fhash = str;
            a->have |= A_OUT_FHASH;
        } else if (SV_IS(key, "file")) {
            a->file = str;
            a->have |= A_FILE;
        } else if (SV_IS(key, "out_file")) {
            a->out_file = str;
            a->have |= A_OUT_FILE;
        } else if (SV_IS(key, "mode")) {
            a->mode = str;
            a->have |= A_MODE;
        } else if (SV_IS(key, "value") && int_of(str.p, str.p + str.n, &a->value) == 0) {
            a->have |= A_VALUE; /* the older tools' CM rank: "value": "2" */
        }
        return;
    }
    if (SV_IS(key, "fhash") || SV_IS(key, "out_fhash")) { /* the older tools' integers */
        dft_sv t = {vp, (size_t)(vend - vp)};
        if (key.n == 5) {
            a->fhash = t;
            a->have |= A_FHASH;
        } else {
            a->out_fhash = t;
            a->have |= A_OUT_FHASH;
        }
        return;
    }
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (key.n == strlen(ints[i].key) && memcmp(key.p, ints[i].key, key.n) == 0 &&
            int_of(vp, vend, (int64_t *)((char *)a + ints[i].off)) == 0)
            a->have |= ints[i].bit;
}

/* The members of the args object of a line that parsed as an event. */
static int scan_args(const char *text, size_t n, io_args *a)
{
    const char *p = text, *end = text + n;
    dft_sv key, str = {NULL, 0};
    memset(a, 0, sizeof *a);
    ws(&p, end);
    if (p >= end || *p++ != '{')
        return -1;
    for (;;) {
        ws(&p, end);
        if (p < end && *p == '}')
            return 0;
        if (dft_json_scan_string(&p, end, &key) < 0)
            return -1;
        ws(&p, end);
        if (p >= end || *p++ != ':')
            return -1;
        ws(&p, end);
        if (SV_IS(key, "args") && p < end && *p == '{') {
            p++;
            for (;;) {
                ws(&p, end);
                if (p < end && *p == '}') {
                    p++;
                    break;
                }
                if (dft_json_scan_string(&p, end, &key) < 0)
                    return -1;
                ws(&p, end);
                if (p >= end || *p++ != ':')
                    return -1;
                ws(&p, end);
                const char *vp = p;
                int is_str = p < end && *p == '"';
                if (is_str ? dft_json_scan_string(&p, end, &str) < 0
                           : dft_json_scan_value(&p, end) < 0)
                    return -1;
                arg_value(a, key, vp, p, str, is_str);
                ws(&p, end);
                if (p < end && *p == ',')
                    p++;
            }
        } else if (dft_json_scan_value(&p, end) < 0) {
            return -1;
        }
        ws(&p, end);
        if (p < end && *p == ',')
            p++;
    }
}

/* ---- the pass's state -------------------------------------------------- */

typedef struct ofd {  /* an open file description: what dup'd descriptors share */
    int64_t file;     /* index into r->files */
    int64_t pos;      /* -1: not known */
    int refs;         /* descriptors and streams on it; 0: free */
    dft_ivset seen;   /* bytes read through it (each counted once) */
} ofd;

typedef struct stream {
    int64_t ofd, pos; /* pos -1: not known */
    int used;
} stream;

typedef struct pass {
    dft_io_result *r;
    const char *epoch_from;
    size_t epoch_from_len;
    const int64_t *bounds;
    size_t nbounds;
    dft_u64map fmap;   /* file key -> index + 1 */
    size_t files_cap;
    dft_u64map paths;  /* fhash -> malloc'd "len:path" (FH lines) */
    dft_u64map fds;    /* descriptor -> ofd index + 1 */
    ofd *ofds;
    size_t nofds, ofds_cap;
    dft_u64map smap;   /* descriptor -> stream index + 1 */
    stream *streams;
    size_t nstreams, streams_cap;
    size_t marks_cap, last_mark;
    int64_t named_seen, pipeline_seen;
    int have_pid;
} pass;

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static void copy_sv(char *dst, size_t cap, dft_sv v)
{
    size_t n = v.n < cap - 1 ? v.n : cap - 1;
    if (n)
        memcpy(dst, v.p, n);
    dst[n] = 0;
}

/* The file an event names (fhash token, or a path string): its index, -1
 * out of memory, -2 none. */
static int64_t file_of(pass *ps, const dft_sv *hash, const dft_sv *path)
{
    uint64_t key;
    if (hash) {
        if (dft_hash_token(*hash, &key) < 0)
            return -2;
    } else {
        key = fnv(path->p, path->n) | (1ull << 63); /* a space apart from fhash values */
    }
    size_t slot;
    int f = dft_u64map_get(&ps->fmap, key, 1, &slot);
    if (f < 0)
        return -1;
    if (f)
        return (int64_t)(intptr_t)ps->fmap.vals[slot] - 1;
    dft_io_result *r = ps->r;
    if (r->nfiles == ps->files_cap) {
        size_t cap = ps->files_cap ? ps->files_cap * 2 : 64;
        dft_io_file *nf = realloc(r->files, cap * sizeof *nf);
        if (!nf)
            return -1;
        r->files = nf;
        ps->files_cap = cap;
    }
    dft_io_file *fi = &r->files[r->nfiles];
    memset(fi, 0, sizeof *fi);
    fi->key = key;
    if (path) {
        fi->path = malloc(path->n + 1);
        if (!fi->path)
            return -1;
        copy_sv(fi->path, path->n + 1, *path);
        fi->path_len = path->n;
    }
    ps->fmap.vals[slot] = (void *)(intptr_t)(r->nfiles + 1);
    return (int64_t)r->nfiles++;
}

static uint64_t fd_key(const dft_line *l, int64_t fd)
{
    return ((uint64_t)l->pid * 0x9e3779b97f4a7c15ull) ^ (uint64_t)fd;
}

static int64_t ofd_new(pass *ps, int64_t file, int64_t pos)
{
    for (size_t i = 0; i < ps->nofds; i++) /* reuse a free one: open descriptors are few */
        if (ps->ofds[i].refs == 0) {
            ps->ofds[i] = (ofd){file, pos, 0, {NULL, 0, 0, 0}};
            return (int64_t)i;
        }
    if (ps->nofds == ps->ofds_cap) {
        size_t cap = ps->ofds_cap ? ps->ofds_cap * 2 : 16;
        ofd *n = realloc(ps->ofds, cap * sizeof *n);
        if (!n)
            return -1;
        ps->ofds = n;
        ps->ofds_cap = cap;
    }
    ps->ofds[ps->nofds] = (ofd){file, pos, 0, {NULL, 0, 0, 0}};
    return (int64_t)ps->nofds++;
}

static void ofd_unref(pass *ps, int64_t o)
{
    if (o >= 0 && --ps->ofds[o].refs <= 0) {
        ps->ofds[o].refs = 0;
        dft_ivset_free(&ps->ofds[o].seen);
    }
}

/* Drops descriptor fd (close, fclose, or a dup2 over it). */
static void fd_drop(pass *ps, uint64_t key)
{
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 0, &slot) == 1 && ps->fds.vals[slot]) {
        ofd_unref(ps, (int64_t)(intptr_t)ps->fds.vals[slot] - 1);
        ps->fds.vals[slot] = NULL;
    }
}

/* Binds descriptor fd to ofd o: 0, or -1 out of memory. */
static int fd_bind(pass *ps, uint64_t key, int64_t o)
{
    fd_drop(ps, key);
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 1, &slot) < 0)
        return -1;
    ps->fds.vals[slot] = (void *)(intptr_t)(o + 1);
    ps->ofds[o].refs++;
    return 0;
}

/* The ofd of descriptor fd; one with an unknown offset when the descriptor
 * was opened before the trace saw it.  -1 out of memory. */
static int64_t fd_ofd(pass *ps, uint64_t key, int64_t file)
{
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 0, &slot) == 1 && ps->fds.vals[slot])
        return (int64_t)(intptr_t)ps->fds.vals[slot] - 1;
    int64_t o = ofd_new(ps, file, -1);
    if (o < 0 || fd_bind(ps, key, o) < 0)
        return -1;
    return o;
}

static stream *stream_of(pass *ps, uint64_t key, int create)
{
    size_t slot;
    int f = dft_u64map_get(&ps->smap, key, create, &slot);
    if (f < 0)
        return NULL;
    if (f == 1 && ps->smap.vals[slot])
        return &ps->streams[(intptr_t)ps->smap.vals[slot] - 1];
    if (!create)
        return NULL;
    size_t i;
    for (i = 0; i < ps->nstreams && ps->streams[i].used; i++)
        ;
    if (i == ps->nstreams) {
        if (ps->nstreams == ps->streams_cap) {
            size_t cap = ps->streams_cap ? ps->streams_cap * 2 : 16;
            stream *n = realloc(ps->streams, cap * sizeof *n);
            if (!n)
                return NULL;
            ps->streams = n;
            ps->streams_cap = cap;
        }
        ps->nstreams++;
    }
    ps->streams[i] = (stream){-1, -1, 1};
    ps->smap.vals[slot] = (void *)(intptr_t)(i + 1);
    return &ps->streams[i];
}

static void stream_drop(pass *ps, uint64_t key)
{
    size_t slot;
    if (dft_u64map_get(&ps->smap, key, 0, &slot) == 1 && ps->smap.vals[slot]) {
        stream *s = &ps->streams[(intptr_t)ps->smap.vals[slot] - 1];
        ofd_unref(ps, s->ofd);
        s->used = 0;
        ps->smap.vals[slot] = NULL;
    }
}

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
        int64_t o = (a->have & A_FD) ? fd_ofd(ps, fd_key(l, a->fd), src) : -1;
        if ((a->have & A_FD) && o < 0)
            return -1;
        int64_t off = (a->have & A_OFFSET) ? a->offset : advance(ps, o, n);
        if (count_read(ps, 0, src, o, off, n, l, 1) < 0)
            return -1;
    }
    if (dst >= 0) {
        int64_t o = (a->have & A_OUT_FD) ? fd_ofd(ps, fd_key(l, a->out_fd), dst) : -1;
        if ((a->have & A_OUT_FD) && o < 0)
            return -1;
        int64_t off = (a->have & A_OUT_OFFSET) ? a->out_offset : advance(ps, o, n);
        count_write(&ps->r->files[dst], 0, off, n, l, src < 0);
    }
    return 0;
}

static int io_event(pass *ps, const char *text, size_t n, const dft_line *l)
{
    io_args a;
    if (scan_args(text, n, &a) < 0)
        return 0;
    int64_t file = (a.have & A_FHASH) ? file_of(ps, &a.fhash, NULL)
                   : (a.have & A_FILE) ? file_of(ps, NULL, &a.file) : -2;
    int64_t out = (a.have & A_OUT_FHASH) ? file_of(ps, &a.out_fhash, NULL)
                  : (a.have & A_OUT_FILE) ? file_of(ps, NULL, &a.out_file) : -2;
    if (file == -1 || out == -1)
        return -1;
    enum op op = op_of(l->cat, l->name);
    int64_t bytes = (l->have & DFT_HAVE_IO) ? l->io_bytes : 0;
    int failed = (a.have & A_RET) && a.ret < 0;
    ps->r->io_events++;
    if (op == OP_XFER)
        return failed ? 0 : xfer(ps, l, &a, bytes, file, out);
    if (file < 0)
        return 0;
    dft_io_file *f = &ps->r->files[file];
    uint64_t key = fd_key(l, a.fd);
    int64_t o;
    stream *s;
    switch (op) {
    case OP_OPEN:
        meta(f, 0, IO_POSIX_OPENS, l);
        if ((a.have & A_RET) && a.ret >= 0) {
            /* O_APPEND: writes go to the end, whose offset is not known */
            o = ofd_new(ps, file, (a.have & A_FLAGS) && (a.flags & 02000) ? -1 : 0);
            if (o < 0 || fd_bind(ps, fd_key(l, a.ret), o) < 0)
                return -1;
        }
        return 0;
    case OP_CLOSE:
        meta(f, 0, -1, l);
        if (a.have & A_FD)
            fd_drop(ps, key);
        return 0;
    case OP_FCNTL: /* F_DUPFD (0) and F_DUPFD_CLOEXEC (1030) copy the descriptor */
        if (!((a.have & A_CMD) && (a.cmd == 0 || a.cmd == 1030))) {
            meta(f, 0, -1, l);
            return 0;
        }
        /* fall through */
    case OP_DUP:
        meta(f, 0, IO_POSIX_DUPS, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0 && a.ret != a.fd) {
            o = fd_ofd(ps, key, file);
            if (o < 0 || fd_bind(ps, fd_key(l, a.ret), o) < 0)
                return -1;
        }
        return 0;
    case OP_READ:
    case OP_PREAD:
        if (failed)
            return 0;
        o = (a.have & A_FD) ? fd_ofd(ps, key, file) : -1;
        if ((a.have & A_FD) && o < 0)
            return -1;
        return count_read(ps, 0, file, o, op == OP_PREAD ? ((a.have & A_OFFSET) ? a.offset : -1)
                                                         : advance(ps, o, bytes),
                          bytes, l, 1);
    case OP_WRITE:
    case OP_PWRITE:
    case OP_DPRINTF:
        if (failed)
            return 0;
        o = (a.have & A_FD) ? fd_ofd(ps, key, file) : -1;
        if ((a.have & A_FD) && o < 0)
            return -1;
        count_write(f, op == OP_DPRINTF,
                    op == OP_PWRITE ? ((a.have & A_OFFSET) ? a.offset : -1)
                                    : advance(ps, o, bytes), bytes, l, 1);
        return 0;
    case OP_SEEK:
        meta(f, 0, IO_POSIX_SEEKS, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0) {
            if ((o = fd_ofd(ps, key, file)) < 0)
                return -1;
            ps->ofds[o].pos = a.ret;
        }
        return 0;
    case OP_FSYNC:
    case OP_FDSYNC: /* Darshan counts their time as write time */
        f->c[op == OP_FSYNC ? IO_POSIX_FSYNCS : IO_POSIX_FDSYNCS]++;
        timer(f, 1, IO_POSIX_F_WRITE_TIME, l->ts, l->dur);
        return 0;
    case OP_STAT:
        meta(f, 0, IO_POSIX_STATS, l);
        return 0;
    case OP_MMAP: /* the bytes read through a mapping are page faults: not seen */
        meta(f, 0, IO_POSIX_MMAPS, l);
        return 0;
    case OP_META:
        meta(f, 0, -1, l);
        return 0;
    case OP_SOPEN:
    case OP_SFDOPEN:
        meta(f, 1, op == OP_SOPEN ? IO_STDIO_OPENS : IO_STDIO_FDOPENS, l);
        if (!(a.have & A_FD) || a.fd < 0)
            return 0;
        if (op == OP_SOPEN) {
            int append = (a.have & A_MODE) && a.mode.n && a.mode.p[0] == 'a';
            if ((o = ofd_new(ps, file, append ? -1 : 0)) < 0 || fd_bind(ps, key, o) < 0)
                return -1;
        } else if ((o = fd_ofd(ps, key, file)) < 0) {
            return -1;
        }
        stream_drop(ps, key);
        if (!(s = stream_of(ps, key, 1)))
            return -1;
        s->ofd = o;
        s->pos = ps->ofds[o].pos;
        ps->ofds[o].refs++;
        return 0;
    case OP_SCLOSE:
        meta(f, 1, -1, l);
        if (a.have & A_FD) {
            stream_drop(ps, key);
            fd_drop(ps, key); /* fclose closes the descriptor */
        }
        return 0;
    case OP_SFLUSH: /* Darshan counts fflush's time as write time */
        f->c[IO_STDIO_FLUSHES]++;
        timer(f, 4, IO_STDIO_F_WRITE_TIME, l->ts, l->dur);
        return 0;
    case OP_STELL:
        meta(f, 1, -1, l);
        if ((a.have & (A_FD | A_RET)) == (A_FD | A_RET) && a.ret >= 0 &&
            (s = stream_of(ps, key, 0)))
            s->pos = a.ret;
        return 0;
    case OP_SSEEK:
        meta(f, 1, IO_STDIO_SEEKS, l);
        if ((a.have & A_FD) && !failed && (s = stream_of(ps, key, 0))) {
            int64_t whence = (a.have & A_WHENCE) ? a.whence : -1;
            if (whence == 0 && (a.have & A_OFFSET))
                s->pos = a.offset;
            else if (whence == 1 && (a.have & A_OFFSET) && s->pos >= 0)
                s->pos += a.offset;
            else
                s->pos = -1; /* SEEK_END: the file's size is not known */
        }
        return 0;
    case OP_SREAD:
    case OP_SWRITE: {
        int64_t off = -1;
        o = -1;
        if (a.have & A_FD) {
            if (!(s = stream_of(ps, key, 0))) { /* a stream opened before the trace */
                if ((o = fd_ofd(ps, key, file)) < 0 || !(s = stream_of(ps, key, 1)))
                    return -1;
                s->ofd = o;
                ps->ofds[o].refs++;
            }
            o = s->ofd;
            off = s->pos;
            if (s->pos >= 0)
                s->pos += bytes;
        }
        if (op == OP_SREAD)
            return count_read(ps, 1, file, o, off, bytes, l, 1);
        count_write(f, 1, off, bytes, l, 1);
        return 0;
    }
    default:
        return 0;
    }
}

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
    if (r->nmarks == ps->marks_cap) {
        size_t cap = ps->marks_cap ? ps->marks_cap * 2 : 16;
        dft_io_mark *m = realloc(r->marks, cap * sizeof *m);
        if (!m)
            return -1;
        r->marks = m;
        ps->marks_cap = cap;
    }
    r->marks[r->nmarks] = (dft_io_mark){kind, epoch, ts};
    ps->last_mark = r->nmarks++;
    return 0;
}

/* An event that starts or belongs to an epoch: --epoch-from's events (the
 * epoch in args.epoch, else their order), `pipeline/iteration` with
 * args.epoch, ai.pipeline's `epoch` and `epoch.block`. */
static int marks(pass *ps, const char *text, size_t n, const dft_line *l)
{
    io_args a;
    a.have = 0;
    if (ps->epoch_from) {
        size_t sn = ps->epoch_from_len;
        if ((l->name.n == sn && memcmp(l->name.p, ps->epoch_from, sn) == 0) ||
            (l->cat.n + 1 + l->name.n == sn && memcmp(ps->epoch_from, l->cat.p, l->cat.n) == 0 &&
             ps->epoch_from[l->cat.n] == '/' &&
             memcmp(ps->epoch_from + l->cat.n + 1, l->name.p, l->name.n) == 0)) {
            if (scan_args(text, n, &a) < 0)
                a.have = 0;
            int64_t e = (a.have & A_EPOCH) ? a.epoch : ps->named_seen;
            ps->named_seen++;
            return add_mark(ps, DFT_IO_MARK_NAMED, e, l->ts);
        }
    }
    if (!SV_IS(l->cat, "pipeline"))
        return 0;
    if (SV_IS(l->name, "iteration")) {
        if (scan_args(text, n, &a) == 0 && (a.have & A_EPOCH))
            return add_mark(ps, DFT_IO_MARK_ITERATION, a.epoch, l->ts);
    } else if (SV_IS(l->name, "epoch") || SV_IS(l->name, "epoch.block")) {
        if (scan_args(text, n, &a) < 0)
            a.have = 0;
        int64_t e = (a.have & A_EPOCH) ? a.epoch : ps->pipeline_seen;
        ps->pipeline_seen++;
        return add_mark(ps, DFT_IO_MARK_PIPELINE, e, l->ts);
    }
    return 0;
}

static int metadata(pass *ps, const char *text, size_t n, const dft_line *l)
{
    dft_io_result *r = ps->r;
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
        copy_sv(p + sizeof(size_t), l->a_name.n + 1, l->a_name);
        ps->paths.vals[slot] = p;
    } else if (SV_IS(l->name, "HH")) {
        if (!r->host[0])
            copy_sv(r->host, sizeof r->host, l->a_name);
    } else if (SV_IS(l->name, "process_name")) {
        copy_sv(r->process_name, sizeof r->process_name, l->a_name);
        if (l->have & DFT_HAVE_PID)
            r->pid = l->pid;
    } else if (SV_IS(l->name, "rank") || SV_IS(l->a_name, "rank")) {
        io_args a; /* the rank rule of docs/trace-format.md: the last valid one wins */
        if (scan_args(text, n, &a) == 0 && (a.have & A_VALUE) && a.value >= 0 &&
            a.value <= INT32_MAX)
            r->rank = a.value;
    } else if (SV_IS(l->name, "worker")) {
        io_args a; /* a DataLoader worker's id (docs/trace-format.md, "Workers"): the last wins */
        if (scan_args(text, n, &a) == 0 && (a.have & A_VALUE) && a.value >= 0 &&
            a.value <= INT32_MAX) {
            r->worker = a.value;
            r->num_workers = (a.have & A_NUM_WORKERS) && a.num_workers > a.value
                                 ? a.num_workers : -1;
        }
    }
    return 0;
}

static int read_lines(pass *ps, dft_rd *rd)
{
    dft_io_result *r = ps->r;
    const char *text, *why;
    size_t n;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next(rd, &text, &n)) == DFT_RD_OK) {
        if (dft_line_is_bracket(text, n))
            continue;
        while (n > 0 && (text[n - 1] == '\r' || text[n - 1] == ',' || text[n - 1] == ' '))
            n--;
        if (dft_line_parse(text, n, DFT_PARSE_LENIENT, &l, &why) < 0) {
            if (r->bad_lines++ == 0) {
                r->first_bad_line = rd->line_no;
                r->first_bad = why;
            }
            continue;
        }
        r->events++;
        if (!ps->have_pid && (l.have & DFT_HAVE_PID)) {
            r->pid = l.pid;
            ps->have_pid = 1;
        }
        if (l.ph == 'M') {
            if (metadata(ps, text, n, &l) < 0)
                return -1;
            continue;
        }
        if (l.ph != 'X' || (l.have & (DFT_HAVE_TS | DFT_HAVE_DUR)) != (DFT_HAVE_TS | DFT_HAVE_DUR) ||
            !dft_dur_ok(l.ts, l.dur))
            continue;
        if (SV_IS(l.cat, "POSIX") || SV_IS(l.cat, "STDIO")) {
            if (io_event(ps, text, n, &l) < 0)
                return -1;
        } else if (SV_IS(l.cat, "dftracer")) {
            io_args a;
            if (SV_IS(l.name, "start") && scan_args(text, n, &a) == 0 && (a.have & A_PPID))
                r->ppid = a.ppid;
        } else if (marks(ps, text, n, &l) < 0) {
            return -1;
        }
    }
    r->long_lines = rd->long_lines;
    r->bad_lines += rd->long_lines;
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
    r->pid = r->ppid = r->rank = r->worker = r->num_workers = -1;
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
