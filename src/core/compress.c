/* core/compress.c: the deflate backend (see compress.h).  Pure: no global
 * state, no threads; runs on writer threads without the GIL, and in signal
 * handlers on a compressor allocated beforehand.
 *
 * Levels, measured on torch-like op events (docs/performance.md): each
 * backend runs at the level where it is fastest per byte with a ratio no
 * worse than zlib level 1, because the writer must keep up with the hot path;
 * libdeflate level 1 is faster than zlib level 1 and compresses better,
 * igzip level 1 is faster again at the same ratio. */
#include "core/compress.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(DFT_COMPRESS_ISAL)
#include <isa-l/igzip_lib.h>
#if __has_include(<isa-l.h>)
#include <isa-l.h> /* the version macros */
#endif
#define LEVEL 1
#define LEVEL_BUF ISAL_DEF_LVL1_DEFAULT

struct dft_compressor {
    struct isal_zstream s;
    uint8_t level_buf[LEVEL_BUF];
};

dft_compressor *dft_compressor_new(void) { return calloc(1, sizeof(dft_compressor)); }

void dft_compressor_free(dft_compressor *c) { free(c); }

size_t dft_compress_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap)
{
    if (n > UINT32_MAX || cap > UINT32_MAX)
        return 0;
    struct isal_zstream *s = &c->s;
    isal_deflate_init(s);
    s->gzip_flag = IGZIP_GZIP; /* header and trailer: one complete member */
    s->level = LEVEL;
    s->level_buf = c->level_buf;
    s->level_buf_size = sizeof c->level_buf;
    s->end_of_stream = 1;
    s->flush = NO_FLUSH;
    s->next_in = (uint8_t *)in;
    s->avail_in = (uint32_t)n;
    s->next_out = (uint8_t *)out;
    s->avail_out = (uint32_t)cap;
    if (isal_deflate(s) != COMP_OK || s->internal_state.state != ZSTATE_END)
        return 0;
    return cap - s->avail_out;
}

const char *dft_compress_backend(void) { return "isal"; }

const char *dft_compress_version(void)
{
#ifdef ISAL_MAJOR_VERSION
#define DFT_STR2(x) #x
#define DFT_STR(x) DFT_STR2(x)
    return DFT_STR(ISAL_MAJOR_VERSION) "." DFT_STR(ISAL_MINOR_VERSION) "." DFT_STR(ISAL_PATCH_VERSION);
#else
    return "";
#endif
}

#elif defined(DFT_COMPRESS_LIBDEFLATE)
#include <libdeflate.h>
#define LEVEL 1

struct dft_compressor {
    struct libdeflate_compressor *d;
};

dft_compressor *dft_compressor_new(void)
{
    dft_compressor *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    c->d = libdeflate_alloc_compressor(LEVEL);
    if (!c->d) {
        free(c);
        return NULL;
    }
    return c;
}

void dft_compressor_free(dft_compressor *c)
{
    if (c) {
        libdeflate_free_compressor(c->d);
        free(c);
    }
}

size_t dft_compress_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap)
{
    return libdeflate_gzip_compress(c->d, in, n, out, cap);
}

const char *dft_compress_backend(void) { return "libdeflate"; }
const char *dft_compress_version(void) { return LIBDEFLATE_VERSION_STRING; }

#else
#include <zlib.h>
#define LEVEL 1

struct dft_compressor {
    z_stream z;
};

dft_compressor *dft_compressor_new(void)
{
    dft_compressor *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    /* windowBits 15 + 16: a gzip wrapper. */
    if (deflateInit2(&c->z, LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(c);
        return NULL;
    }
    return c;
}

void dft_compressor_free(dft_compressor *c)
{
    if (c) {
        deflateEnd(&c->z);
        free(c);
    }
}

size_t dft_compress_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap)
{
    if (n > UINT32_MAX || cap > UINT32_MAX || deflateReset(&c->z) != Z_OK)
        return 0;
    c->z.next_in = (Bytef *)in;
    c->z.avail_in = (uInt)n;
    c->z.next_out = (Bytef *)out;
    c->z.avail_out = (uInt)cap;
    if (deflate(&c->z, Z_FINISH) != Z_STREAM_END)
        return 0;
    return cap - c->z.avail_out;
}

const char *dft_compress_backend(void) { return "zlib"; }
const char *dft_compress_version(void) { return zlibVersion(); }
#endif

int dft_compress_level(void) { return LEVEL; }

/* Larger than any backend's worst case (stored blocks: 5 bytes per 64 KiB,
 * plus the gzip header and trailer), zlib's deflateBound and libdeflate's
 * gzip bound included. */
size_t dft_compress_bound(size_t n) { return n + (n >> 3) + 1024; }
