/* core/deflate_block.c: deflate blocks from chosen literals and matches (see
 * deflate_block.h).  Each block gets Huffman codes built from its own symbol
 * counts (RFC 1951 §3.2.7), unless storing its bytes is smaller.  Pure apart
 * from two constant symbol tables filled once; any thread, no GIL, and
 * signal handlers: no allocation, no lock. */
#include "core/deflate_block.h"

#include <pthread.h>
#include <string.h>

#define LITLEN_SYMS DFT_LITLEN_SYMS
#define DIST_SYMS DFT_DIST_SYMS
#define CL_SYMS 19 /* the code-length alphabet of the block header */
#define MAX_CODE_LEN 15
#define MAX_CL_LEN 7
#define END_OF_BLOCK 256

/* The order in which code-length code lengths are sent (§3.2.7). */
static const uint8_t cl_order[CL_SYMS] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5,
                                          11, 4, 12, 3, 13, 2, 14, 1, 15};

/* ---- bits out ------------------------------------------------------------ */

static inline void store64(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* k <= 56 bits.  Without a branch: the whole buffer is stored (8 bytes, so
 * the caller checked the room for a block's size plus 16 bytes) and the
 * pointer moves by the whole bytes in it, leaving fewer than 8 bits. */
#define PUT_BITS(bits, nbits, p, v, k)                                                     \
    do {                                                                                   \
        (bits) |= (uint64_t)(v) << (nbits);                                                \
        (nbits) += (k);                                                                    \
        store64((p), (bits));                                                              \
        (p) += (nbits) >> 3;                                                               \
        (bits) >>= (nbits) & ~7u; /* nbits < 64: at most 7 + 56 */                         \
        (nbits) &= 7;                                                                      \
    } while (0)

static inline void put_bits(dft_bitout *o, uint64_t v, unsigned k)
{
    PUT_BITS(o->bits, o->n, o->p, v, k);
}

/* Writes the pending bits, the last byte padded with zeros. */
static void flush_to_byte(dft_bitout *o)
{
    if (o->n > 0)
        *o->p++ = (uint8_t)o->bits;
    o->bits = 0;
    o->n = 0;
}

size_t dft_bitout_finish(dft_bitout *out, const uint8_t *base)
{
    flush_to_byte(out);
    return (size_t)(out->p - base);
}

/* ---- Huffman codes --------------------------------------------------------- */

/* Code lengths for freq[0, nsym), none longer than maxlen: a minimum-
 * redundancy code (the two-queue construction over symbols sorted by
 * count), then lengths past maxlen folded back in while keeping the Kraft
 * sum at one (as miniz does).  Unused symbols get 0; when fewer than two
 * are used, two get length 1, since inflaters reject a one-code tree. */
static void build_lengths(const uint32_t *freq, unsigned nsym, unsigned maxlen, uint8_t *lens)
{
    uint16_t sym[LITLEN_SYMS];
    uint32_t w[2 * LITLEN_SYMS];
    uint16_t parent[2 * LITLEN_SYMS];
    uint8_t depth[2 * LITLEN_SYMS];
    unsigned used = 0;
    memset(lens, 0, nsym);
    for (unsigned s = 0; s < nsym; s++)
        if (freq[s])
            sym[used++] = (uint16_t)s;
    if (used < 2) {
        unsigned a = used ? sym[0] : 0;
        lens[a] = 1;
        lens[a == 0 ? 1 : 0] = 1;
        return;
    }
    /* Insertion sort by count (stable): at most 286 symbols, once per block. */
    for (unsigned i = 1; i < used; i++) {
        uint16_t s = sym[i];
        unsigned j = i;
        while (j > 0 && freq[sym[j - 1]] > freq[s]) {
            sym[j] = sym[j - 1];
            j--;
        }
        sym[j] = s;
    }
    for (unsigned i = 0; i < used; i++)
        w[i] = freq[sym[i]];
    unsigned leaf = 0, node = used, next = used;
    for (unsigned k = 0; k + 1 < used; k++) {
        unsigned pick[2];
        for (int c = 0; c < 2; c++) {
            if (leaf < used && (node >= next || w[leaf] <= w[node]))
                pick[c] = leaf++;
            else
                pick[c] = node++;
        }
        w[next] = w[pick[0]] + w[pick[1]];
        parent[pick[0]] = parent[pick[1]] = (uint16_t)next;
        next++;
    }
    unsigned root = next - 1;
    depth[root] = 0;
    for (unsigned i = root; i-- > 0;)
        depth[i] = (uint8_t)(depth[parent[i]] + 1 > 32 ? 32 : depth[parent[i]] + 1);
    unsigned count[33] = {0};
    for (unsigned i = 0; i < used; i++)
        count[depth[i]]++;
    for (unsigned l = maxlen + 1; l <= 32; l++) {
        count[maxlen] += count[l];
        count[l] = 0;
    }
    uint32_t total = 0;
    for (unsigned l = 1; l <= maxlen; l++)
        total += count[l] << (maxlen - l);
    while (total != (1u << maxlen)) {
        count[maxlen]--;
        for (unsigned l = maxlen - 1; l > 0; l--)
            if (count[l]) {
                count[l]--;
                count[l + 1] += 2;
                break;
            }
        total--;
    }
    /* The rarest symbols get the longest codes. */
    unsigned i = 0;
    for (unsigned l = maxlen; l >= 1; l--)
        for (unsigned c = count[l]; c > 0; c--)
            lens[sym[i++]] = (uint8_t)l;
}

/* Canonical codes for lens, bit-reversed: deflate sends codes from their
 * most significant bit, and put_bits sends the least significant first. */
static void build_codes(const uint8_t *lens, unsigned nsym, uint16_t *codes)
{
    unsigned count[MAX_CODE_LEN + 1] = {0}, next[MAX_CODE_LEN + 2];
    for (unsigned s = 0; s < nsym; s++)
        count[lens[s]]++;
    count[0] = 0;
    unsigned code = 0;
    for (unsigned l = 1; l <= MAX_CODE_LEN; l++) {
        code = (code + count[l - 1]) << 1;
        next[l] = code;
    }
    for (unsigned s = 0; s < nsym; s++) {
        unsigned l = lens[s];
        if (!l) {
            codes[s] = 0;
            continue;
        }
        unsigned c = next[l]++, r = 0;
        for (unsigned b = 0; b < l; b++)
            r |= ((c >> b) & 1u) << (l - 1 - b);
        codes[s] = (uint16_t)r;
    }
}

/* ---- one block --------------------------------------------------------------- */

typedef struct block_codes {
    uint32_t lf[LITLEN_SYMS], df[DIST_SYMS], clf[CL_SYMS];
    uint8_t ll[LITLEN_SYMS], dl[DIST_SYMS], cll[CL_SYMS];
    uint16_t lc[LITLEN_SYMS], dc[DIST_SYMS], clc[CL_SYMS];
    uint8_t rle[LITLEN_SYMS + DIST_SYMS]; /* the header's code-length symbols */
    uint8_t rle_x[LITLEN_SYMS + DIST_SYMS];
    unsigned nrle, hlit, hdist, hclen;
} block_codes;

/* Run-length codes the concatenated code lengths with symbols 16-18. */
static void header_rle(block_codes *b)
{
    uint8_t all[LITLEN_SYMS + DIST_SYMS];
    memcpy(all, b->ll, b->hlit);
    memcpy(all + b->hlit, b->dl, b->hdist);
    unsigned n = b->hlit + b->hdist, k = 0;
    b->nrle = 0;
    memset(b->clf, 0, sizeof b->clf);
    while (k < n) {
        uint8_t v = all[k];
        unsigned run = 1;
        while (k + run < n && all[k + run] == v)
            run++;
        k += run;
        if (v == 0) {
            while (run >= 11) {
                unsigned r = run > 138 ? 138 : run;
                b->rle[b->nrle] = 18, b->rle_x[b->nrle++] = (uint8_t)(r - 11), b->clf[18]++;
                run -= r;
            }
            if (run >= 3) {
                b->rle[b->nrle] = 17, b->rle_x[b->nrle++] = (uint8_t)(run - 3), b->clf[17]++;
                run = 0;
            }
        } else {
            b->rle[b->nrle] = v, b->rle_x[b->nrle++] = 0, b->clf[v]++;
            run--;
            while (run >= 3) {
                unsigned r = run > 6 ? 6 : run;
                b->rle[b->nrle] = 16, b->rle_x[b->nrle++] = (uint8_t)(r - 3), b->clf[16]++;
                run -= r;
            }
        }
        while (run-- > 0)
            b->rle[b->nrle] = v, b->rle_x[b->nrle++] = 0, b->clf[v]++;
    }
}

static const uint8_t rle_extra[CL_SYMS] = {[16] = 2, [17] = 3, [18] = 7};

/* The first length and distance of each symbol (RFC 1951 §3.2.5). */
static const uint16_t len_base[29] = {3,   4,   5,   6,   7,   8,   9,   10,  11,  13,
                                      15,  17,  19,  23,  27,  31,  35,  43,  51,  59,
                                      67,  83,  99,  115, 131, 163, 195, 227, 258};
static const uint16_t dist_base[DIST_SYMS] = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};

uint8_t dft_len_sym[259];
uint8_t dft_dist_sym[512];

static void fill_tables(void)
{
    for (unsigned s = 0; s < 29; s++) {
        unsigned end = s == 28 ? 259 : len_base[s + 1];
        for (unsigned l = len_base[s]; l < end; l++)
            dft_len_sym[l] = (uint8_t)s;
    }
    dft_len_sym[258] = 28; /* 258 has its own symbol, not 284's last value */
    for (unsigned s = 0; s < DIST_SYMS; s++) {
        unsigned end = s + 1 < DIST_SYMS ? dist_base[s + 1] : 32769;
        for (unsigned d = dist_base[s]; d < end; d++) {
            if (d <= 256)
                dft_dist_sym[d - 1] = (uint8_t)s;
            else
                dft_dist_sym[256 + ((d - 1) >> 7)] = (uint8_t)s;
        }
    }
}

void dft_deflate_tables_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_tables);
}

/* Extra bits of each length symbol (257..285) and distance symbol. */
static const uint8_t len_extra[LITLEN_SYMS] = {
    [265] = 1, [266] = 1, [267] = 1, [268] = 1, [269] = 2, [270] = 2, [271] = 2, [272] = 2,
    [273] = 3, [274] = 3, [275] = 3, [276] = 3, [277] = 4, [278] = 4, [279] = 4, [280] = 4,
    [281] = 5, [282] = 5, [283] = 5, [284] = 5};
static const uint8_t dist_extra[DIST_SYMS] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                              6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

/* Builds the codes of a dynamic block with the counts f; returns its size
 * in bits. */
static uint64_t plan_dynamic(block_codes *b, const dft_block_freqs *f)
{
    memcpy(b->lf, f->lit, sizeof b->lf);
    memcpy(b->df, f->dist, sizeof b->df);
    b->lf[END_OF_BLOCK] = 1;
    uint64_t extra = 0;
    for (unsigned s = 257; s < LITLEN_SYMS; s++)
        extra += (uint64_t)b->lf[s] * len_extra[s];
    for (unsigned s = 0; s < DIST_SYMS; s++)
        extra += (uint64_t)b->df[s] * dist_extra[s];
    build_lengths(b->lf, LITLEN_SYMS, MAX_CODE_LEN, b->ll);
    build_lengths(b->df, DIST_SYMS, MAX_CODE_LEN, b->dl);
    build_codes(b->ll, LITLEN_SYMS, b->lc);
    build_codes(b->dl, DIST_SYMS, b->dc);
    b->hlit = LITLEN_SYMS;
    while (b->hlit > 257 && !b->ll[b->hlit - 1])
        b->hlit--;
    b->hdist = DIST_SYMS;
    while (b->hdist > 1 && !b->dl[b->hdist - 1])
        b->hdist--;
    header_rle(b);
    build_lengths(b->clf, CL_SYMS, MAX_CL_LEN, b->cll);
    build_codes(b->cll, CL_SYMS, b->clc);
    b->hclen = CL_SYMS;
    while (b->hclen > 4 && !b->cll[cl_order[b->hclen - 1]])
        b->hclen--;
    uint64_t bits = 3 + 5 + 5 + 4 + 3 * (uint64_t)b->hclen + extra;
    for (unsigned s = 0; s < CL_SYMS; s++)
        bits += (uint64_t)b->clf[s] * (b->cll[s] + rle_extra[s]);
    for (unsigned s = 0; s < LITLEN_SYMS; s++)
        bits += (uint64_t)b->lf[s] * b->ll[s];
    for (unsigned s = 0; s < DIST_SYMS; s++)
        bits += (uint64_t)b->df[s] * b->dl[s];
    return bits;
}

/* The symbols go through a local bit buffer, kept in registers. */
#define PUT(v, k) PUT_BITS(bits, nbits, p, v, k)

/* The header of a dynamic block: its code lengths, run-length coded. */
static void write_header(dft_bitout *o, const block_codes *b, int final)
{
    put_bits(o, (unsigned)(final ? 1 : 0) | (2u << 1), 3);
    put_bits(o, b->hlit - 257, 5);
    put_bits(o, b->hdist - 1, 5);
    put_bits(o, b->hclen - 4, 4);
    for (unsigned i = 0; i < b->hclen; i++)
        put_bits(o, b->cll[cl_order[i]], 3);
    for (unsigned i = 0; i < b->nrle; i++) {
        unsigned s = b->rle[i];
        put_bits(o, b->clc[s], b->cll[s]);
        if (rle_extra[s])
            put_bits(o, b->rle_x[i], rle_extra[s]);
    }
}

/* The block's literals and matches with the codes in b, and its end. */
static void write_symbols(dft_bitout *o, const block_codes *b, const uint8_t *in,
                          const dft_seq *seqs, size_t nseq)
{
    /* Each length's code and extra bits as one field. */
    uint32_t lcode[259];
    uint8_t lbits[259];
    for (unsigned l = 3; l <= 258; l++) {
        unsigned ls = dft_len_sym[l], sym = 257 + ls;
        lcode[l] = b->lc[sym] | ((uint32_t)(l - len_base[ls]) << b->ll[sym]);
        lbits[l] = (uint8_t)(b->ll[sym] + len_extra[sym]);
    }
    uint64_t bits = o->bits;
    unsigned nbits = o->n;
    uint8_t *p = o->p;
    const uint8_t *src = in;
    for (size_t i = 0; i < nseq; i++) {
        const dft_seq *q = &seqs[i];
        uint32_t k = 0;
        for (; k + 2 <= q->litlen; k += 2) { /* two literals: at most 30 bits */
            unsigned a = src[k], c = src[k + 1];
            PUT(b->lc[a] | ((uint32_t)b->lc[c] << b->ll[a]), b->ll[a] + b->ll[c]);
        }
        if (k < q->litlen)
            PUT(b->lc[src[k]], b->ll[src[k]]);
        src += q->litlen;
        if (q->len) { /* length and distance: at most 20 + 28 bits, one store */
            unsigned ds = q->dsym;
            uint64_t dv = b->dc[ds] | ((uint64_t)(q->dist - dist_base[ds]) << b->dl[ds]);
            PUT(lcode[q->len] | (dv << lbits[q->len]), lbits[q->len] + b->dl[ds] + dist_extra[ds]);
            src += q->len;
        }
    }
    PUT(b->lc[END_OF_BLOCK], b->ll[END_OF_BLOCK]);
    o->bits = bits;
    o->n = nbits;
    o->p = p;
}
#undef PUT

/* Stored blocks of at most 65535 bytes: header bits, padding, LEN, NLEN. */
static void write_stored(dft_bitout *o, const uint8_t *in, size_t n, int final)
{
    do {
        size_t k = n > 65535 ? 65535 : n;
        put_bits(o, (unsigned)(final && k == n ? 1 : 0), 3);
        flush_to_byte(o);
        uint8_t h[4] = {(uint8_t)k, (uint8_t)(k >> 8), (uint8_t)~k, (uint8_t)(~k >> 8)};
        memcpy(o->p, h, 4);
        memcpy(o->p + 4, in, k);
        o->p += 4 + k;
        in += k;
        n -= k;
    } while (n > 0);
}

int dft_deflate_block(dft_bitout *out, const uint8_t *in, size_t n, const dft_seq *seqs,
                      size_t nseq, const dft_block_freqs *f, int final)
{
    block_codes b;
    uint64_t dyn = plan_dynamic(&b, f);
    size_t stored_blocks = n / 65535 + 1;
    uint64_t stored = 8 * ((uint64_t)n + 5 * stored_blocks + 1);
    size_t room = (size_t)(out->end - out->p);
    if (stored < dyn) {
        if (room < n + 5 * stored_blocks + 16)
            return -1;
        write_stored(out, in, n, final);
        return 0;
    }
    if (room < dyn / 8 + 16)
        return -1;
    write_header(out, &b, final);
    write_symbols(out, &b, in, seqs, nseq);
    return 0;
}
