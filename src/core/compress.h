/* core/compress.h: one gzip member from one buffer, with the deflate library
 * chosen at build time (docs/performance.md):
 *   DFT_COMPRESS_ISAL        ISA-L's igzip (libisal), level 1
 *   DFT_COMPRESS_LIBDEFLATE  libdeflate's whole-buffer gzip API
 *   neither                  zlib (the fallback; the build never needs more)
 * Every backend writes standard gzip members that zlib, Python's gzip module
 * and the reader (reader/gz.c) read, concatenated or alone. */
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

/* "isal", "libdeflate" or "zlib", and the library's version. */
const char *dft_compress_backend(void);
const char *dft_compress_version(void);
/* The compression level the backend runs at. */
int dft_compress_level(void);

#endif
