/* reader/iostats_tables.c: the I/O pass's tables (reader/iostats.c drives
 * the pass, reader/iostats_count.c counts each event): an event's args read
 * into an io_args, the data files by key (an fhash or a merged trace's
 * path), and the open descriptors (each bound to an open file description,
 * shared by dup/fcntl copies) and stdio streams whose offsets the pass
 * follows.  No GIL, no Python. */
#include "reader/iostats_pass.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "format/grow.h"
#include "reader/reader.h"

static void arg_value(void *ctx, dft_sv key, const char *vp, const char *vend, dft_sv str,
                      int is_str)
{
    io_args *a = ctx;
#define INT(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(io_args, f), DFT_ARG_FIELD_INT)
#define STR(k, bit, f) DFT_ARG_FIELD(k, bit, offsetof(io_args, f), DFT_ARG_FIELD_STR)
    static const dft_arg_field fields[] = {
        INT("fd", A_FD, fd), INT("out_fd", A_OUT_FD, out_fd), INT("ret", A_RET, ret),
        INT("offset", A_OFFSET, offset), INT("out_offset", A_OUT_OFFSET, out_offset),
        INT("whence", A_WHENCE, whence), INT("cmd", A_CMD, cmd), INT("flags", A_FLAGS, flags),
        INT("epoch", A_EPOCH, epoch), INT("ppid", A_PPID, ppid),
        /* the older tools' CM rank: "value": "2" */
        DFT_ARG_FIELD("value", A_VALUE, offsetof(io_args, value), DFT_ARG_FIELD_INT_TEXT),
        INT("num_workers", A_NUM_WORKERS, num_workers), STR("fhash", A_FHASH, fhash),
        STR("out_fhash", A_OUT_FHASH, out_fhash), STR("file", A_FILE, file),
        STR("out_file", A_OUT_FILE, out_file), STR("mode", A_MODE, mode),
    };
#undef INT
#undef STR
    if (!is_str && (SV_IS(key, "fhash") || SV_IS(key, "out_fhash"))) {
        str = (dft_sv){vp, (size_t)(vend - vp)}; /* the older tools' integers: their text */
        is_str = 1;
    }
    static dft_arg_table table = DFT_ARG_TABLE(fields);
    dft_arg_table_read(&table, a, &a->have, key, vp, vend, str, is_str);
}

/* The members of the args object of a line that parsed as an event. */
int dft_io_scan_args(const dft_line *l, io_args *a)
{
    memset(a, 0, sizeof *a);
    return dft_line_args(l, arg_value, a);
}

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* The file an event names (fhash token, or a path string): its index, -1
 * out of memory, -2 none. */
int64_t dft_io_file_of(pass *ps, const dft_sv *hash, const dft_sv *path)
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
    if (DFT_GROW(r->files, r->nfiles, ps->files_cap, 64) != 0)
        return -1;
    dft_io_file *fi = &r->files[r->nfiles];
    memset(fi, 0, sizeof *fi);
    fi->key = key;
    if (path) {
        fi->path = malloc(path->n + 1);
        if (!fi->path)
            return -1;
        dft_copy_sv(fi->path, path->n + 1, *path);
        fi->path_len = path->n;
    }
    ps->fmap.vals[slot] = (void *)(intptr_t)(r->nfiles + 1);
    return (int64_t)r->nfiles++;
}

uint64_t dft_io_fd_key(const dft_line *l, int64_t fd)
{
    return ((uint64_t)l->pid * 0x9e3779b97f4a7c15ull) ^ (uint64_t)fd;
}

int64_t dft_io_ofd_new(pass *ps, int64_t file, int64_t pos)
{
    for (size_t i = 0; i < ps->nofds; i++) /* reuse a free one: open descriptors are few */
        if (ps->ofds[i].refs == 0) {
            ps->ofds[i] = (ofd){file, pos, 0, {NULL, 0, 0, 0}};
            return (int64_t)i;
        }
    if (DFT_GROW(ps->ofds, ps->nofds, ps->ofds_cap, 16) != 0)
        return -1;
    ps->ofds[ps->nofds] = (ofd){file, pos, 0, {NULL, 0, 0, 0}};
    return (int64_t)ps->nofds++;
}

void dft_io_ofd_unref(pass *ps, int64_t o)
{
    if (o >= 0 && --ps->ofds[o].refs <= 0) {
        ps->ofds[o].refs = 0;
        dft_ivset_free(&ps->ofds[o].seen);
    }
}

/* Drops descriptor fd (close, fclose, or a dup2 over it). */
void dft_io_fd_drop(pass *ps, uint64_t key)
{
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 0, &slot) == 1 && ps->fds.vals[slot]) {
        dft_io_ofd_unref(ps, (int64_t)(intptr_t)ps->fds.vals[slot] - 1);
        ps->fds.vals[slot] = NULL;
    }
}

/* Binds descriptor fd to ofd o: 0, or -1 out of memory. */
int dft_io_fd_bind(pass *ps, uint64_t key, int64_t o)
{
    dft_io_fd_drop(ps, key);
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 1, &slot) < 0)
        return -1;
    ps->fds.vals[slot] = (void *)(intptr_t)(o + 1);
    ps->ofds[o].refs++;
    return 0;
}

/* The ofd of descriptor fd; one with an unknown offset when the descriptor
 * was opened before the trace saw it.  -1 out of memory. */
int64_t dft_io_fd_ofd(pass *ps, uint64_t key, int64_t file)
{
    size_t slot;
    if (dft_u64map_get(&ps->fds, key, 0, &slot) == 1 && ps->fds.vals[slot])
        return (int64_t)(intptr_t)ps->fds.vals[slot] - 1;
    int64_t o = dft_io_ofd_new(ps, file, -1);
    if (o < 0 || dft_io_fd_bind(ps, key, o) < 0)
        return -1;
    return o;
}

stream *dft_io_stream_of(pass *ps, uint64_t key, int create)
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
        if (DFT_GROW(ps->streams, ps->nstreams, ps->streams_cap, 16) != 0)
            return NULL;
        ps->nstreams++;
    }
    ps->streams[i] = (stream){-1, -1, 1};
    ps->smap.vals[slot] = (void *)(intptr_t)(i + 1);
    return &ps->streams[i];
}

void dft_io_stream_drop(pass *ps, uint64_t key)
{
    size_t slot;
    if (dft_u64map_get(&ps->smap, key, 0, &slot) == 1 && ps->smap.vals[slot]) {
        stream *s = &ps->streams[(intptr_t)ps->smap.vals[slot] - 1];
        dft_io_ofd_unref(ps, s->ofd);
        s->used = 0;
        ps->smap.vals[slot] = NULL;
    }
}
