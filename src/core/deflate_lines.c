/* core/deflate_lines.c: the match finder of the line encoder (see
 * deflate_lines.h); core/deflate_block.c codes what it finds.
 *
 * The input is cut into fields, each starting at a `,` `{` `}` or newline.
 * At a field start that no match covers, two candidates are tried: the last
 * earlier field with the same bytes (one hash table slot per hash, so the
 * most recent one), and the running match's distance.  The longer wins; a
 * candidate also takes back the literals just before the field when they
 * match too (a timestamp's last digits before `,"dur":`).  A match runs as
 * far as the bytes agree, across fields and lines; where it stops inside a
 * field, the rest of that field is literals.  On trace lines that gives two
 * matches per line (from the name to the timestamp's high digits, and from
 * the timestamp's low digits through the next line's id) and literals for
 * the digits that change, which is what an exhaustive deflate search
 * (libdeflate level 12) finds too.  Pure; any thread, no GIL, signal
 * handlers: no allocation, no lock. */
#include "core/deflate_lines.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/deflate_block.h"

#define TABLE_BITS 14
#define MAX_SEQ 16384 /* matches per block: the block's codes follow its own counts */
#define WINDOW 32768
#define MIN_MATCH 4   /* a 3-byte match rarely costs less than its literals */
#define MAX_MATCH 258
#define MAX_INPUT ((size_t)1 << 30)

struct dft_line_deflater {
    /* Positions are base + offset into the current input, so the entries of
     * earlier inputs (below base) read as empty without clearing the table. */
    uint32_t base;
    uint32_t table[1u << TABLE_BITS];
    dft_seq seq[MAX_SEQ];
    dft_block_freqs freqs; /* of the block being chosen */
};

dft_line_deflater *dft_line_deflater_new(void)
{
    dft_deflate_tables_init();
    dft_line_deflater *d = calloc(1, sizeof *d);
    if (d)
        d->base = 1;
    return d;
}

void dft_line_deflater_free(dft_line_deflater *d) { free(d); }

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static const uint8_t is_field_start[256] = {[','] = 1, ['{'] = 1, ['}'] = 1, ['\n'] = 1};

/* The first field start at or after k, or n: 16 bytes per step, since
 * fields are short. */
static inline size_t find_start(const uint8_t *in, size_t k, size_t n)
{
#if defined(__SSE2__)
    const __m128i comma = _mm_set1_epi8(','), open = _mm_set1_epi8('{');
    const __m128i close = _mm_set1_epi8('}'), nl = _mm_set1_epi8('\n');
    while (k + 16 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(in + k));
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, open)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, close), _mm_cmpeq_epi8(v, nl)));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits)
            return k + (unsigned)__builtin_ctz(bits);
        k += 16;
    }
#endif
    while (k < n && !is_field_start[in[k]])
        k++;
    return k;
}

/* The first field start at or after k (*s) and the one after it (*e): both
 * from one 16-byte load when they are that close, as after a match that
 * ends in a number. */
static inline void find_two_starts(const uint8_t *in, size_t k, size_t n, size_t *s, size_t *e)
{
#if defined(__SSE2__)
    if (k + 16 <= n) {
        const __m128i comma = _mm_set1_epi8(','), open = _mm_set1_epi8('{');
        const __m128i close = _mm_set1_epi8('}'), nl = _mm_set1_epi8('\n');
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(in + k));
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, open)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, close), _mm_cmpeq_epi8(v, nl)));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits) {
            *s = k + (unsigned)__builtin_ctz(bits);
            bits &= bits - 1;
            *e = bits ? k + (unsigned)__builtin_ctz(bits) : find_start(in, k + 16, n);
            return;
        }
    }
#endif
    *s = find_start(in, k, n);
    *e = *s < n ? find_start(in, *s + 1, n) : n;
}

/* A hash of the field in[s, e): its first 16 bytes, its last 8 and its
 * length.  Fields that differ elsewhere may share a slot; a candidate is
 * only ever used for as many bytes as really match. */
static inline uint32_t field_hash(const uint8_t *in, size_t s, size_t e, size_t n)
{
    size_t len = e - s;
    uint64_t a = 0, b = 0, c = 0;
    if (s + 16 <= n) {
        a = load64(in + s);
        b = load64(in + s + 8);
        if (len < 8) {
            a &= ~(uint64_t)0 >> (64 - 8 * len);
            b = 0;
        } else if (len < 16) {
            b = len == 8 ? 0 : b & (~(uint64_t)0 >> (128 - 8 * len));
        }
    } else {
        uint8_t t[16] = {0};
        memcpy(t, in + s, len < 16 ? len : 16);
        a = load64(t);
        b = load64(t + 8);
    }
    if (len > 16)
        c = load64(in + e - 8);
    /* Three independent products: the search loop waits on this hash. */
    uint64_t h = a * 0x9E3779B97F4A7C15u + (b ^ len) * 0xC2B2AE3D27D4EB4Fu +
                 c * 0x165667B19E3779F9u;
    return (uint32_t)(h >> (64 - TABLE_BITS));
}

/* How many bytes from a equal those from b, up to max. */
static inline size_t match_forward(const uint8_t *a, const uint8_t *b, size_t max)
{
    size_t k = 0;
#if defined(__SSE2__)
    while (k + 16 <= max) {
        __m128i x = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + k)),
                                   _mm_loadu_si128((const __m128i *)(const void *)(b + k)));
        unsigned ne = (unsigned)_mm_movemask_epi8(x) ^ 0xFFFFu;
        if (ne)
            return k + (unsigned)__builtin_ctz(ne);
        k += 16;
    }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (k + 8 <= max) {
        uint64_t x = load64(a + k) ^ load64(b + k);
        if (x)
            return k + ((unsigned)__builtin_ctzll(x) >> 3);
        k += 8;
    }
#endif
    while (k < max && a[k] == b[k])
        k++;
    return k;
}

/* How many of the max bytes before a equal those before b; b - 8 and a - 8
 * must be readable when max > 0 (in[0, 8) exists before any match source). */
static inline size_t match_backward(const uint8_t *a, const uint8_t *b, size_t max)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (max <= 8) { /* the usual few digits: one compare, no loop */
        uint64_t x = load64(a - 8) ^ load64(b - 8);
        size_t k = x ? (unsigned)__builtin_clzll(x) >> 3 : 8;
        return k < max ? k : max;
    }
#endif
    size_t k = 0;
    while (k < max && a[-1 - (ptrdiff_t)k] == b[-1 - (ptrdiff_t)k])
        k++;
    return k;
}

typedef struct cursor {
    dft_line_deflater *d;
    dft_bitout out;
    const uint8_t *in;
    size_t nseq, block_start;
    int failed;
} cursor;

/* Codes in[block_start, end) as one block: seqs cover it exactly. */
static void flush_block(cursor *c, size_t end, int final)
{
    if (!c->failed && dft_deflate_block(&c->out, c->in + c->block_start, end - c->block_start,
                                        c->d->seq, c->nseq, &c->d->freqs, final) != 0)
        c->failed = 1;
    memset(&c->d->freqs, 0, sizeof c->d->freqs);
    c->nseq = 0;
    c->block_start = end;
}

/* Literals in[lit, start), then a match of len bytes at dist, cut into
 * pieces of at most 258 (none shorter than 3). */
static void emit(cursor *c, size_t lit, size_t start, size_t len, uint32_t dist)
{
    uint32_t litlen = (uint32_t)(start - lit);
    dft_block_freqs *f = &c->d->freqs;
    const uint8_t *p = c->in + lit;
    for (uint32_t k = 0; k < litlen; k++)
        f->lit[p[k]]++;
    while (len > 0) {
        size_t k = len <= MAX_MATCH ? len : len - MAX_MATCH >= 3 ? MAX_MATCH : len - 3;
        dft_seq *q = &c->d->seq[c->nseq++];
        q->litlen = litlen;
        dft_seq_match(q, f, (unsigned)k, dist);
        litlen = 0;
        start += k;
        len -= k;
        if (c->nseq == MAX_SEQ)
            flush_block(c, start, 0);
    }
}

size_t dft_line_deflate(dft_line_deflater *d, const char *in_, size_t n, char *out, size_t cap)
{
    if (n > MAX_INPUT || cap < 16)
        return 0;
    if (d->base > UINT32_MAX - (uint32_t)n - 1) {
        memset(d->table, 0, sizeof d->table);
        d->base = 1;
    }
    const uint8_t *in = (const uint8_t *)in_;
    const uint32_t base = d->base;
    cursor c = {.d = d, .in = in};
    c.out.p = (uint8_t *)out;
    c.out.end = (uint8_t *)out + cap;
    size_t lit = 0; /* the end of the last match: in[lit, s) are literals */
    uint32_t run = 0; /* the running match's distance */
    memset(&d->freqs, 0, sizeof d->freqs);
    size_t s = 0, e = find_start(in, 1, n);
    while (s < n) {
        /* [s, e): a field that no match covers the start of */
        uint32_t h = field_hash(in, s, e, n);
        uint32_t cand[2] = {d->table[h] >= base ? base + (uint32_t)s - d->table[h] : 0, run};
        d->table[h] = base + (uint32_t)s;
        size_t best = 0, best_back = 0, best_fwd = 0;
        uint32_t best_d = 0;
        for (int k = 0; k < 2; k++) {
            uint32_t dist = cand[k];
            if (dist == 0 || dist > WINDOW || dist > s)
                continue;
            size_t fwd = match_forward(in + s, in + s - dist, n - s);
            if (fwd == 0)
                continue;
            size_t max_back = s - lit < s - dist ? s - lit : s - dist;
            size_t back = s - dist < 8 ? 0 /* no 8 bytes before the source */
                                       : match_backward(in + s, in + s - dist, max_back);
            size_t score = fwd + back;
            if (score > best || (score == best && dist < best_d)) {
                best = score;
                best_back = back;
                best_fwd = fwd;
                best_d = dist;
            }
            if (k == 0 && fwd > e - s)
                break; /* the same field, and what follows: the running match is not tried */
        }
        if (best < MIN_MATCH) {
            s = e; /* the field's bytes stay literals */
            e = s < n ? find_start(in, s + 1, n) : n;
            continue;
        }
        emit(&c, lit, s - best_back, best, best_d);
        lit = s + best_fwd; /* not through best_back: the loop waits on lit */
        run = best_d;
        /* The fields the match covers are skipped (neither searched nor
         * indexed); the next search is at the first field start from its end. */
        find_two_starts(in, lit, n, &s, &e);
    }
    d->base = base + (uint32_t)n + 1;
    for (size_t k = lit; k < n; k++) /* the last literals, which no match follows */
        d->freqs.lit[in[k]]++;
    c.d->seq[c.nseq++] = (dft_seq){.litlen = (uint32_t)(n - lit)};
    flush_block(&c, n, 1);
    if (c.failed)
        return 0;
    return dft_bitout_finish(&c.out, (const uint8_t *)out);
}

