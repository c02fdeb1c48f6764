/* reader/inflate.c: a gzip member's inflate behind one small interface
 * (reader/inflate.h), so gz.c's member loop is the same for both libraries.
 * ISA-L's isal_inflate checks the gzip header, CRC and length itself
 * (crc_flag ISAL_GZIP); zlib's inflate does with windowBits 15 + 16.
 * Pure C; runs without the GIL. */
#include "reader/inflate.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#if defined(DFT_COMPRESS_ISAL)
#include <isa-l/igzip_lib.h>

struct dft_inflater {
    struct inflate_state st; /* 85 KiB: on the heap, never on a stack */
};

dft_inflater *dft_inflater_new(void)
{
    dft_inflater *z = malloc(sizeof *z);
    if (!z)
        return NULL;
    isal_inflate_init(&z->st);
    z->st.crc_flag = ISAL_GZIP;
    return z;
}

void dft_inflater_free(dft_inflater *z) { free(z); }

int dft_inflater_member(dft_inflater *z)
{
    isal_inflate_reset(&z->st);
    z->st.crc_flag = ISAL_GZIP;
    return 0;
}

static const char *isal_why(int rc)
{
    switch (rc) {
    case ISAL_INVALID_BLOCK: return "invalid block";
    case ISAL_INVALID_SYMBOL: return "invalid symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER: return "incorrect header check";
    case ISAL_UNSUPPORTED_METHOD: return "unknown compression method";
    case ISAL_INCORRECT_CHECKSUM: return "incorrect data check";
    case ISAL_NEED_DICT: return "needs a dictionary";
    default: return "bad data";
    }
}

dft_inf_status dft_inflater_run(dft_inflater *z, const unsigned char *in, size_t *in_n, char *out,
                                size_t out_cap, size_t *out_n, const char **msg)
{
    /* isal's counts are 32-bit: hand it at most UINT_MAX at a time */
    uint32_t ain = *in_n > UINT_MAX ? UINT_MAX : (uint32_t)*in_n;
    uint32_t aout = out_cap > UINT_MAX ? UINT_MAX : (uint32_t)out_cap;
    z->st.next_in = (uint8_t *)in;
    z->st.avail_in = ain;
    z->st.next_out = (uint8_t *)out;
    z->st.avail_out = aout;
    int rc = isal_inflate(&z->st);
    *in_n = ain - z->st.avail_in;
    *out_n = aout - z->st.avail_out;
    if (rc < 0 || rc == ISAL_NEED_DICT) {
        *msg = isal_why(rc);
        return DFT_INF_BAD;
    }
    return z->st.block_state == ISAL_BLOCK_FINISH ? DFT_INF_MEMBER_END : DFT_INF_MORE;
}

const char *dft_inflater_backend(void) { return "isal"; }

#else
#include <zlib.h>

struct dft_inflater {
    z_stream zs;
};

dft_inflater *dft_inflater_new(void)
{
    dft_inflater *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    if (inflateInit2(&z->zs, 15 + 16) != Z_OK) {
        free(z);
        return NULL;
    }
    return z;
}

void dft_inflater_free(dft_inflater *z)
{
    if (!z)
        return;
    inflateEnd(&z->zs);
    free(z);
}

int dft_inflater_member(dft_inflater *z) { return inflateReset(&z->zs) == Z_OK ? 0 : -1; }

dft_inf_status dft_inflater_run(dft_inflater *z, const unsigned char *in, size_t *in_n, char *out,
                                size_t out_cap, size_t *out_n, const char **msg)
{
    uInt ain = *in_n > UINT_MAX ? UINT_MAX : (uInt)*in_n;
    uInt aout = out_cap > UINT_MAX ? UINT_MAX : (uInt)out_cap;
    z->zs.next_in = (Bytef *)in;
    z->zs.avail_in = ain;
    z->zs.next_out = (Bytef *)out;
    z->zs.avail_out = aout;
    int rc = inflate(&z->zs, Z_NO_FLUSH);
    *in_n = ain - z->zs.avail_in;
    *out_n = aout - z->zs.avail_out;
    switch (rc) {
    case Z_STREAM_END:
        return DFT_INF_MEMBER_END;
    case Z_OK:
    case Z_BUF_ERROR: /* no progress possible: more input or room wanted */
        return DFT_INF_MORE;
    case Z_MEM_ERROR:
        return DFT_INF_NOMEM;
    default:
        *msg = z->zs.msg ? z->zs.msg : "bad data";
        return DFT_INF_BAD;
    }
}

const char *dft_inflater_backend(void) { return "zlib"; }
#endif
