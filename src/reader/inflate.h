/* reader/inflate.h: one gzip member at a time, through ISA-L's igzip when the
 * build has it (about three times zlib's speed on trace text:
 * docs/performance.md, "Reading"), else zlib.  Either way the member's CRC
 * and length are checked.  No GIL needed; no Python object touched. */
#ifndef DFT_READER_INFLATE_H
#define DFT_READER_INFLATE_H

#include <stddef.h>

typedef enum dft_inf_status {
    DFT_INF_MORE = 0,       /* more input or output room wanted */
    DFT_INF_MEMBER_END = 1, /* the member ended (its trailer checked) */
    DFT_INF_BAD = 2,        /* the data does not decode (msg says why) */
    DFT_INF_NOMEM = 3,
} dft_inf_status;

typedef struct dft_inflater dft_inflater; /* opaque: zlib's or igzip's state */

/* A new inflater, or NULL (out of memory). */
dft_inflater *dft_inflater_new(void);
void dft_inflater_free(dft_inflater *z);
/* Starts a new member (the bytes at the next call begin with its header). */
int dft_inflater_member(dft_inflater *z);
/* Inflates from in[0..*in_n) into out[0..out_cap): on return *in_n and
 * *out_n say how much was taken and made.  Stops at the member's end. */
dft_inf_status dft_inflater_run(dft_inflater *z, const unsigned char *in, size_t *in_n, char *out,
                                size_t out_cap, size_t *out_n, const char **msg);
/* "isal" or "zlib": what the reader inflates with. */
const char *dft_inflater_backend(void);

#endif
