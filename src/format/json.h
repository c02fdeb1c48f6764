/* format/json.h: appending JSON text to a growable byte buffer.
 * All functions run on writer threads (or at init); none takes the GIL. */
#ifndef DFT_JSON_H
#define DFT_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct dft_sbuf {
    char *data;
    size_t len;
    size_t cap;
    int failed; /* an allocation failed; the content is incomplete */
} dft_sbuf;

/* Makes room for n more bytes; returns 0 on success, -1 (and sets failed). */
int dft_sbuf_reserve(dft_sbuf *b, size_t n);
void dft_sbuf_free(dft_sbuf *b);

static inline void dft_sbuf_put(dft_sbuf *b, const char *s, size_t n)
{
    if (b->cap - b->len < n && dft_sbuf_reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

#define DFT_SBUF_LIT(b, lit) dft_sbuf_put((b), (lit), sizeof(lit) - 1)

/* The raw forms write at o, which has room (see each), and return the end.
 * Writers reserve once per line and then call these without checks. */
char *dft_json_put_int(char *o, int64_t v);          /* at most 20 bytes */
char *dft_json_put_double(char *o, double v);        /* at most 26 bytes */
char *dft_json_put_hash(char *o, uint64_t h);        /* 18 bytes */
char *dft_json_put_string(char *o, const char *s, size_t n); /* at most 6n + 2 */

void dft_json_int(dft_sbuf *b, int64_t v);
void dft_json_double(dft_sbuf *b, double v);
/* 16 lowercase hex digits in quotes. */
void dft_json_hash(dft_sbuf *b, uint64_t h);
/* A quoted JSON string; invalid UTF-8 becomes U+FFFD. */
void dft_json_string(dft_sbuf *b, const char *s, size_t n);

#endif
