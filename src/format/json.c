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

const char dft_json_digit_pairs[201] = "00010203040506070809"
                                     "10111213141516171819"
                                     "20212223242526272829"
                                     "30313233343536373839"
                                     "40414243444546474849"
                                     "50515253545556575859"
                                     "60616263646566676869"
                                     "70717273747576777879"
                                     "80818283848586878889"
                                     "90919293949596979899";

/* The digits of u < 10^8, without leading zeros. */
static inline char *put_small(char *o, uint32_t u)
{
    if (u < 10) {
        *o = (char)('0' + u);
        return o + 1;
    }
    if (u < 100) {
        memcpy(o, dft_json_digit_pairs + 2 * u, 2);
        return o + 2;
    }
    if (u >= 10000000)
        return dft_json_put8(o, u);
    int n = u < 1000 ? 3 : u < 10000 ? 4 : u < 100000 ? 5 : u < 1000000 ? 6 : u < 10000000 ? 7 : 8;
    char *end = o + n, *p = end;
    while (u >= 100) {
        uint32_t r = u % 100;
        u /= 100;
        p -= 2;
        memcpy(p, dft_json_digit_pairs + 2 * r, 2);
    }
    if (u >= 10)
        memcpy(p - 2, dft_json_digit_pairs + 2 * u, 2);
    else
        p[-1] = (char)('0' + u);
    return end;
}

char *dft_json_put_int_any(char *o, int64_t v)
{
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        *o++ = '-';
        u = (uint64_t)0 - u;
    }
    if (u < 100000000u)
        return put_small(o, (uint32_t)u);
    if (u < 10000000000000000u) { /* 9 to 16 digits: microsecond timestamps */
        o = put_small(o, (uint32_t)(u / 100000000u));
        return dft_json_put8(o, (uint32_t)(u % 100000000u));
    }
    o = put_small(o, (uint32_t)(u / 10000000000000000u));
    o = dft_json_put8(o, (uint32_t)(u / 100000000u % 100000000u));
    return dft_json_put8(o, (uint32_t)(u % 100000000u));
}

void dft_json_int(dft_sbuf *b, int64_t v)
{
    if (dft_sbuf_reserve(b, 20) == 0)
        b->len = (size_t)(dft_json_put_int(b->data + b->len, v) - b->data);
}

char *dft_json_put_double(char *o, double v)
{
    if (!isfinite(v)) { /* JSON has no NaN/Infinity */
        memcpy(o, "null", 4);
        return o + 4;
    }
    if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {
        /* Integral values print as Python's repr does: "3.0", "-0.0". */
        if (v == 0 && signbit(v))
            *o++ = '-';
        o = dft_json_put_int(o, (int64_t)v);
        memcpy(o, ".0", 2);
        return o + 2;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.17g", v);
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return o;
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
    memcpy(o, tmp, (size_t)n);
    o += n;
    /* "1e+20" and "3" are valid JSON numbers; keep floats recognisable. */
    if (!memchr(tmp, '.', (size_t)n) && !memchr(tmp, 'e', (size_t)n) &&
        !memchr(tmp, 'n', (size_t)n)) {
        memcpy(o, ".0", 2);
        o += 2;
    }
    return o;
}

char *dft_json_put_hash(char *o, uint64_t h)
{
    static const char hex[] = "0123456789abcdef";
    o[0] = '"';
    for (int i = 0; i < 16; i++)
        o[1 + i] = hex[(h >> (60 - 4 * i)) & 0xf];
    o[17] = '"';
    return o + 18;
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

/* 1 for the bytes copied as they are: printable ASCII but '"' and '\\'. */
#define R16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
static const unsigned char plain[256] = {
    R16(0), R16(0),                                     /* 0x00-0x1f */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,     /* 0x20-0x2f: '"' */
    R16(1), R16(1),                                     /* 0x30-0x4f */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,     /* 0x50-0x5f: '\\' */
    R16(1),                                             /* 0x60-0x6f */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,     /* 0x70-0x7f: DEL */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0),
};
#undef R16

char *dft_json_put_string(char *o, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    *o++ = '"';
    while (s < end) {
        /* Plain printable ASCII: eight bytes at a time, then byte by byte. */
        while (end - s >= 8) {
            uint64_t w;
            memcpy(&w, s, 8);
            if (dft_json_special_bytes(w))
                break;
            memcpy(o, &w, 8);
            o += 8;
            s += 8;
        }
        if (s < end && end - s < 8 && (size_t)(end - (const unsigned char *)str) >= 8) {
            /* The last word of the string overlaps what is already copied. */
            uint64_t w;
            memcpy(&w, end - 8, 8);
            if (!dft_json_special_bytes(w)) {
                memcpy(o + (end - s) - 8, &w, 8);
                o += end - s;
                break;
            }
        }
        while (s < end && plain[*s])
            *o++ = (char)*s++;
        if (s == end)
            break;
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
    return o;
}

void dft_json_string(dft_sbuf *b, const char *str, size_t n)
{
    /* Worst case: every byte becomes \u00XX (6 bytes) or U+FFFD (3 bytes). */
    if (dft_sbuf_reserve(b, n * 6 + 2) != 0)
        return;
    b->len = (size_t)(dft_json_put_string(b->data + b->len, str, n) - b->data);
}
