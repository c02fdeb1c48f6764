/* core/deflate_block.h: the entropy half of a deflate encoder (RFC 1951).
 * It takes what a match finder chose for a stretch of input (runs of
 * literals, each followed by a match) and writes it as deflate blocks: a
 * dynamic Huffman block, or stored blocks when those are smaller.  Pure (two
 * constant symbol tables, filled once by dft_deflate_tables_init), no
 * allocation; any thread, no GIL, and signal handlers. */
#ifndef DFT_CORE_DEFLATE_BLOCK_H
#define DFT_CORE_DEFLATE_BLOCK_H

#include <stddef.h>
#include <stdint.h>

/* litlen literals, then (when len > 0) a match of len bytes (3 to 258) that
 * copies from dist bytes back (1 to 32768), with their symbols (the length
 * symbol less 257) as dft_seq_match sets them. */
typedef struct dft_seq {
    uint32_t litlen;
    uint16_t len;
    uint16_t dist;
    uint8_t lsym, dsym;
} dft_seq;

#define DFT_LITLEN_SYMS 286 /* 0-255 literals, 256 end of block, 257-285 lengths */
#define DFT_DIST_SYMS 30

/* How often each symbol occurs in a block: counted by the match finder as it
 * chooses, so that the block writer walks the sequences once. */
typedef struct dft_block_freqs {
    uint32_t lit[DFT_LITLEN_SYMS];
    uint32_t dist[DFT_DIST_SYMS];
} dft_block_freqs;

/* Symbol tables (RFC 1951 §3.2.5), filled once by dft_deflate_tables_init:
 * length 3..258 -> length symbol less 257; distance d -> distance symbol at
 * [d - 1] for d <= 256, else at [256 + ((d - 1) >> 7)]. */
extern uint8_t dft_len_sym[259];
extern uint8_t dft_dist_sym[512];
void dft_deflate_tables_init(void);

/* Sets a match of len (3 to 258) at dist (1 to 32768) into q, with its
 * symbols, and counts them in f. */
static inline void dft_seq_match(dft_seq *q, dft_block_freqs *f, unsigned len, unsigned dist)
{
    unsigned ls = dft_len_sym[len];
    unsigned ds = dft_dist_sym[dist <= 256 ? dist - 1 : 256 + ((dist - 1) >> 7)];
    q->len = (uint16_t)len;
    q->dist = (uint16_t)dist;
    q->lsym = (uint8_t)ls;
    q->dsym = (uint8_t)ds;
    f->lit[257 + ls]++;
    f->dist[ds]++;
}

/* Bits out, least significant first (RFC 1951 §3.1.1). */
typedef struct dft_bitout {
    uint8_t *p, *end;
    uint64_t bits;
    unsigned n; /* bits held in .bits, < 8 between calls */
} dft_bitout;

/* Writes the block (or blocks) for in[0, n), coded as seqs[0, nseq) (their
 * literals and matches cover exactly n bytes; a match may reach back before
 * in, into what earlier blocks of the same stream wrote), whose symbols f
 * counts (the end-of-block symbol is added here).  final: sets BFINAL.
 * Returns 0, or -1 when out has no room (out is then spent). */
int dft_deflate_block(dft_bitout *out, const uint8_t *in, size_t n, const dft_seq *seqs,
                      size_t nseq, const dft_block_freqs *f, int final);

/* Pads the last byte; returns the number of bytes written since out->p was
 * first set to base. */
size_t dft_bitout_finish(dft_bitout *out, const uint8_t *base);

#endif
