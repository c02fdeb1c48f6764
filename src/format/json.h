/* format/json.h: appending JSON text to a growable byte buffer.
 * All functions run on writer threads (or at init); none takes the GIL. */
#ifndef DFT_JSON_H
#define DFT_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
char *dft_json_put_int_any(char *o, int64_t v);      /* at most 20 bytes */
char *dft_json_put_double(char *o, double v);        /* at most 26 bytes */
char *dft_json_put_hash(char *o, uint64_t h);        /* 18 bytes */
char *dft_json_put_string(char *o, const char *s, size_t n); /* at most 6n + 2 */

/* "00" "01" ... "99": two digits per lookup. */
extern const char dft_json_digit_pairs[201];

/* Exactly eight digits of u < 10^8, leading zeros included.  Inline: the
 * writer's timestamps are mostly this. */
static inline char *dft_json_put8(char *o, uint32_t u)
{
    uint32_t a = u / 10000, b = u % 10000;
    memcpy(o, dft_json_digit_pairs + 2 * (a / 100), 2);
    memcpy(o + 2, dft_json_digit_pairs + 2 * (a % 100), 2);
    memcpy(o + 4, dft_json_digit_pairs + 2 * (b / 100), 2);
    memcpy(o + 6, dft_json_digit_pairs + 2 * (b % 100), 2);
    return o + 8;
}

/* Any int64, at most 20 bytes.  Inline for the ones below 100 (durations,
 * levels, most int args): no call for those. */
static inline char *dft_json_put_int(char *o, int64_t v)
{
    if ((uint64_t)v < 10) {
        *o = (char)('0' + v);
        return o + 1;
    }
    if ((uint64_t)v < 100) {
        memcpy(o, dft_json_digit_pairs + 2 * v, 2);
        return o + 2;
    }
    return dft_json_put_int_any(o, v);
}
/* Nonzero in the high bit of each byte of w that is below 0x20, is 0x7f or
 * above, or is '"' or '\\': the bytes that leave the plain-copy fast path. */
static inline uint64_t dft_json_special_bytes(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t ctl = (w - ones * 0x20) & ~w;  /* < 0x20 */
    uint64_t top = (w + ones) | w;          /* >= 0x7f */
    uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
    uint64_t eq = ((q - ones) & ~q) | ((bs - ones) & ~bs);
    return (ctl | top | eq) & high;
}

/* dft_json_put_string for a string in a buffer that may be read up to
 * readable_end: a string of up to 64 bytes is then checked and copied in whole
 * words, which needs room for 2 + n rounded up to 16 bytes at o.  Inline: it
 * is the writer's per-field path. */
static inline __attribute__((always_inline)) char *
dft_json_put_string_in(char *o, const char *s, size_t n, const char *readable_end)
{
#if defined(__SSE2__)
    /* Most names, categories and keys: one 16-byte load, four compares.  A
     * signed compare below 0x20 also takes the bytes >= 0x80. */
    if (n <= 16 && readable_end - s >= 16) {
        __m128i w = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i bad = _mm_or_si128(
            _mm_or_si128(_mm_cmplt_epi8(w, _mm_set1_epi8(0x20)), _mm_cmpeq_epi8(w, _mm_set1_epi8(0x7f))),
            _mm_or_si128(_mm_cmpeq_epi8(w, _mm_set1_epi8('"')), _mm_cmpeq_epi8(w, _mm_set1_epi8('\\'))));
        if ((unsigned)_mm_movemask_epi8(bad) & ((1u << n) - 1))
            return dft_json_put_string(o, s, n);
        _mm_storeu_si128((__m128i *)(void *)(o + 1), w);
        o[0] = '"';
        o[1 + n] = '"';
        return o + n + 2;
    }
#endif
    size_t words = (n + 7) / 8;
    if (n <= 64 && (size_t)(readable_end - s) >= 8 * words) {
        /* Whole words, the last one's bytes past the string masked off: their
         * flags cannot disturb the string's own (borrows only run upwards). */
        char *q = o + 1;
        size_t i = 0;
        for (; i + 1 < words; i++) {
            uint64_t w;
            memcpy(&w, s + 8 * i, 8);
            if (dft_json_special_bytes(w))
                return dft_json_put_string(o, s, n);
            memcpy(q + 8 * i, &w, 8);
        }
        size_t tail = n - 8 * i; /* 1 to 8, or 0 for the empty string */
        if (tail) {
            uint64_t w;
            memcpy(&w, s + 8 * i, 8);
            uint64_t keep = ~0ull >> (64 - 8 * tail);
            if (dft_json_special_bytes(w) & keep)
                return dft_json_put_string(o, s, n);
            memcpy(q + 8 * i, &w, 8);
        }
        o[0] = '"';
        o[1 + n] = '"';
        return o + n + 2;
    }
    return dft_json_put_string(o, s, n);
}


void dft_json_int(dft_sbuf *b, int64_t v);
/* A quoted JSON string; invalid UTF-8 becomes U+FFFD. */
void dft_json_string(dft_sbuf *b, const char *s, size_t n);

#endif
