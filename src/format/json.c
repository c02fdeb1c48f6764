/* format/json.c: JSON string escaping (with UTF-8 validation) and number formatting.
 * Runs on writer threads without the GIL. */
#include "format/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int dft_sbuf_reserve(dft_sbuf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->cap - b->len >= n)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void dft_sbuf_free(dft_sbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

static const char digit_pairs[201] = "00010203040506070809"
                                     "10111213141516171819"
                                     "20212223242526272829"
                                     "30313233343536373839"
                                     "40414243444546474849"
                                     "50515253545556575859"
                                     "60616263646566676869"
                                     "70717273747576777879"
                                     "80818283848586878889"
                                     "90919293949596979899";

void dft_json_int(dft_sbuf *b, int64_t v)
{
    char tmp[24];
    char *end = tmp + sizeof tmp, *p = end;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        p -= 2;
        memcpy(p, digit_pairs + 2 * r, 2);
    }
    if (u >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * u, 2);
    } else {
        *--p = (char)('0' + u);
    }
    if (v < 0)
        *--p = '-';
    dft_sbuf_put(b, p, (size_t)(end - p));
}

void dft_json_double(dft_sbuf *b, double v)
{
    if (!isfinite(v)) { /* JSON has no NaN/Infinity */
        DFT_SBUF_LIT(b, "null");
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.17g", v);
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return;
    /* Shortest form that reads back the same value, as Python's repr does. */
    for (int prec = 1; prec < 17; prec++) {
        char t2[32];
        int m = snprintf(t2, sizeof t2, "%.*g", prec, v);
        if (m > 0 && (size_t)m < sizeof t2 && strtod(t2, NULL) == v) {
            memcpy(tmp, t2, (size_t)m + 1);
            n = m;
            break;
        }
    }
    dft_sbuf_put(b, tmp, (size_t)n);
    /* "1e+20" and "3" are valid JSON numbers; keep floats recognisable. */
    if (!memchr(tmp, '.', (size_t)n) && !memchr(tmp, 'e', (size_t)n) &&
        !memchr(tmp, 'n', (size_t)n))
        DFT_SBUF_LIT(b, ".0");
}

void dft_json_hash(dft_sbuf *b, uint64_t h)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[18];
    tmp[0] = '"';
    for (int i = 0; i < 16; i++)
        tmp[1 + i] = hex[(h >> (60 - 4 * i)) & 0xf];
    tmp[17] = '"';
    dft_sbuf_put(b, tmp, sizeof tmp);
}

/* Decodes the UTF-8 sequence at s.  Returns its length (1-4) when valid, or
 * minus the length of the maximal invalid subpart to replace by one U+FFFD
 * (the same rule as Python's bytes.decode("utf-8", "replace")).  Rejects
 * overlong forms, surrogates and values above U+10FFFF. */
static int utf8_scan(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return -i;
        unsigned lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i)
            return -i;
    }
    return need + 1;
}

void dft_json_string(dft_sbuf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    /* Worst case: every byte becomes \u00XX (6 bytes) or U+FFFD (3 bytes). */
    if (dft_sbuf_reserve(b, n * 6 + 2) != 0)
        return;
    char *o = b->data + b->len;
    *o++ = '"';
    while (s < end) {
        const unsigned char *run = s;
        while (s < end && *s >= 0x20 && *s < 0x7f && *s != '"' && *s != '\\')
            s++;
        if (s > run) {
            memcpy(o, run, (size_t)(s - run));
            o += s - run;
            if (s == end)
                break;
        }
        unsigned c = *s;
        if (c < 0x80) {
            *o++ = '\\';
            switch (c) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 0xf];
            }
            s++;
            continue;
        }
        int k = utf8_scan(s, (size_t)(end - s));
        if (k > 0) {
            memcpy(o, s, (size_t)k);
            o += k;
            s += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            s += -k;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
}
