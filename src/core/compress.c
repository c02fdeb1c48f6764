/* core/compress.c: one gzip member from one buffer (see compress.h).  Pure:
 * no global state, no threads; runs on writer threads without the GIL, and
 * in signal handlers on a compressor allocated beforehand.
 *
 * The member is deflated by the line encoder (core/deflate_lines.c), which
 * finds the matches of trace lines field by field: smaller than any level of
 * the libraries below on trace lines and faster than the fastest of them
 * (docs/performance.md).  The deflate library the build found computes the
 * CRC-32 and deflates whatever the line encoder does not compress well (text
 * that is not trace lines), at the level where it is fastest per byte:
 * ISA-L's igzip level 1, libdeflate level 1, or zlib level 1. */
#include "core/compress.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/deflate_lines.h"

#if defined(DFT_COMPRESS_ISAL)
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#if __has_include(<isa-l.h>)
#include <isa-l.h> /* the version macros */
#endif
#define LEVEL 1
#define LEVEL_BUF ISAL_DEF_LVL1_DEFAULT
#define LIBRARY_IS_FASTEST 1 /* igzip level 1 deflates faster than the line encoder */

typedef struct library {
    struct isal_zstream s;
    uint8_t level_buf[LEVEL_BUF];
} library;

static int library_init(library *l)
{
    (void)l;
    return 0;
}

static void library_end(library *l) { (void)l; }

static size_t library_member(library *l, const char *in, size_t n, char *out, size_t cap)
{
    if (n > UINT32_MAX || cap > UINT32_MAX)
        return 0;
    struct isal_zstream *s = &l->s;
    isal_deflate_init(s);
    s->gzip_flag = IGZIP_GZIP; /* header and trailer: one complete member */
    s->level = LEVEL;
    s->level_buf = l->level_buf;
    s->level_buf_size = sizeof l->level_buf;
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

static uint32_t crc32_of(const char *in, size_t n)
{
    return crc32_gzip_refl(0, (const unsigned char *)in, n);
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

typedef struct library {
    struct libdeflate_compressor *d;
} library;

static int library_init(library *l)
{
    l->d = libdeflate_alloc_compressor(LEVEL);
    return l->d ? 0 : -1;
}

static void library_end(library *l) { libdeflate_free_compressor(l->d); }

static size_t library_member(library *l, const char *in, size_t n, char *out, size_t cap)
{
    return libdeflate_gzip_compress(l->d, in, n, out, cap);
}

static uint32_t crc32_of(const char *in, size_t n) { return libdeflate_crc32(0, in, n); }

const char *dft_compress_backend(void) { return "libdeflate"; }
const char *dft_compress_version(void) { return LIBDEFLATE_VERSION_STRING; }

#else
#include <zlib.h>
#define LEVEL 1

typedef struct library {
    z_stream z;
} library;

static int library_init(library *l)
{
    /* windowBits 15 + 16: a gzip wrapper. */
    return deflateInit2(&l->z, LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -1;
}

static void library_end(library *l) { deflateEnd(&l->z); }

static size_t library_member(library *l, const char *in, size_t n, char *out, size_t cap)
{
    if (n > UINT32_MAX || cap > UINT32_MAX || deflateReset(&l->z) != Z_OK)
        return 0;
    l->z.next_in = (Bytef *)in;
    l->z.avail_in = (uInt)n;
    l->z.next_out = (Bytef *)out;
    l->z.avail_out = (uInt)cap;
    if (deflate(&l->z, Z_FINISH) != Z_STREAM_END)
        return 0;
    return cap - l->z.avail_out;
}

static uint32_t crc32_of(const char *in, size_t n)
{
    uLong c = crc32(0, Z_NULL, 0);
    while (n > 0) { /* crc32() takes a uInt length */
        uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
        c = crc32(c, (const Bytef *)in, k);
        in += k;
        n -= k;
    }
    return (uint32_t)c;
}

const char *dft_compress_backend(void) { return "zlib"; }
const char *dft_compress_version(void) { return zlibVersion(); }
#endif

struct dft_compressor {
    dft_line_deflater *lines;
    library lib;
};

dft_compressor *dft_compressor_new(void)
{
    dft_compressor *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->lines = dft_line_deflater_new();
    if (!c->lines || library_init(&c->lib) != 0) {
        dft_line_deflater_free(c->lines);
        free(c);
        return NULL;
    }
    return c;
}

void dft_compressor_free(dft_compressor *c)
{
    if (c) {
        library_end(&c->lib);
        dft_line_deflater_free(c->lines);
        free(c);
    }
}

int dft_compress_level(void) { return LEVEL; }

/* Larger than any backend's worst case (stored blocks: 5 bytes per 64 KiB,
 * plus the gzip header and trailer), zlib's deflateBound and libdeflate's
 * gzip bound included. */
size_t dft_compress_bound(size_t n) { return n + (n >> 3) + 1024; }

/* RFC 1952: no name, no mtime, "unix"; XFL 0. */
static const uint8_t gzip_header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};

static void put_le32(char *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    memcpy(o, b, 4);
}

/* The line encoder's member, or 0 when it does not fit. */
static size_t lines_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap)
{
    if (cap < sizeof gzip_header + 8)
        return 0;
    memcpy(out, gzip_header, sizeof gzip_header);
    size_t k = dft_line_deflate(c->lines, in, n, out + sizeof gzip_header,
                                cap - sizeof gzip_header - 8);
    if (!k)
        return 0;
    char *t = out + sizeof gzip_header + k;
    put_le32(t, crc32_of(in, n));
    put_le32(t + 4, (uint32_t)n); /* ISIZE: the length mod 2^32 */
    return sizeof gzip_header + k + 8;
}

size_t dft_compress_member_with(dft_compressor *c, const char *in, size_t n, char *out,
                                size_t cap, dft_encoder enc)
{
#ifdef LIBRARY_IS_FASTEST
    if (enc == DFT_ENCODER_FASTEST)
        enc = DFT_ENCODER_LIBRARY;
#else
    if (enc == DFT_ENCODER_FASTEST) /* libdeflate and zlib at level 1 are slower than it */
        enc = DFT_ENCODER_AUTO;
#endif
    if (enc == DFT_ENCODER_LIBRARY)
        return library_member(&c->lib, in, n, out, cap);
    size_t k = lines_member(c, in, n, out, cap);
    /* Trace lines come out at 2 to 6% of their size; text the line encoder
     * cannot take apart goes to the library (written over it). */
    if (enc == DFT_ENCODER_AUTO && (k == 0 || k > n / 8 + 64))
        return library_member(&c->lib, in, n, out, cap);
    return k;
}

size_t dft_compress_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap)
{
    return dft_compress_member_with(c, in, n, out, cap, DFT_ENCODER_AUTO);
}
