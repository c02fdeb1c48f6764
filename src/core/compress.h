/* core/compress.h: one gzip member from one buffer (docs/performance.md):
 * deflated by the line encoder (core/deflate_lines.h), with the CRC-32 and
 * the fallback for text that is not trace lines from the deflate library
 * chosen at build time:
 *   DFT_COMPRESS_ISAL        ISA-L's igzip (libisal), level 1
 *   DFT_COMPRESS_LIBDEFLATE  libdeflate's whole-buffer gzip API
 *   neither                  zlib (the fallback; the build never needs more)
 * Every member is a standard gzip member that zlib, Python's gzip module and
 * the reader (reader/gz.c) read, concatenated or alone. */
#ifndef DFT_CORE_COMPRESS_H
#define DFT_CORE_COMPRESS_H

#include <stddef.h>

typedef struct dft_compressor dft_compressor;

/* A compressor with all its state allocated; NULL when out of memory.  Any
 * thread; one compressor is used by one thread at a time. */
dft_compressor *dft_compressor_new(void);
void dft_compressor_free(dft_compressor *c);

/* Room that dft_compress_member needs at out for n input bytes. */
size_t dft_compress_bound(size_t n);

/* Deflates in[0, n) into one complete gzip member at out (cap bytes, at least
 * dft_compress_bound(n)).  Returns the member's length, or 0 on failure.
 * Allocates nothing and takes no lock, so it may run in a signal handler on
 * a compressor made beforehand.  Any thread, no GIL. */
size_t dft_compress_member(dft_compressor *c, const char *in, size_t n, char *out, size_t cap);

/* Which encoder deflates a member: AUTO is the line encoder, or the library
 * when the line encoder compresses the text poorly (what
 * dft_compress_member does); FASTEST is whichever of the two takes the least
 * time per byte in this build (ISA-L's igzip where the build has it, else
 * the line encoder), for a writer that falls behind; LINES and LIBRARY force
 * one (tests, benchmarks). */
typedef enum {
    DFT_ENCODER_AUTO,
    DFT_ENCODER_LINES,
    DFT_ENCODER_LIBRARY,
    DFT_ENCODER_FASTEST
} dft_encoder;
size_t dft_compress_member_with(dft_compressor *c, const char *in, size_t n, char *out,
                                size_t cap, dft_encoder enc);

/* "isal", "libdeflate" or "zlib", and the library's version. */
const char *dft_compress_backend(void);
const char *dft_compress_version(void);
/* The compression level the library runs at (for the fallback). */
int dft_compress_level(void);

#endif
