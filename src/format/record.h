/* format/record.h: the compact binary record a traced thread appends to its
 * buffer, and how a dft_event is encoded into one.
 *
 * The encoder is inline because it is the hot path of every event; the
 * decoder is format/lines.c.  Nothing here knows buffers or threads. */
#ifndef DFT_FORMAT_RECORD_H
#define DFT_FORMAT_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dftracer.h"

#define DFT_NAME_MAX 4096       /* longer names are truncated */
#define DFT_CAT_MAX 255
#define DFT_KEY_MAX 255
#define DFT_ARGS_MAX 64
#define DFT_STR_BUDGET 49152    /* bytes of string argument values per record */
#define DFT_REC_MAX (96 * 1024) /* upper bound of one encoded record */

#define DFT_PH_METADATA 'M'

/* Record header, 8-byte aligned, followed by name, cat, then the args:
 *   u8 type, u8 key_len, key bytes, then an 8-byte value (int64/double/hash)
 *   or a u32 length and the string bytes. */
typedef struct dft_rec {
    uint32_t size; /* whole record, a multiple of 8 */
    uint8_t ph;
    uint8_t nargs;
    uint16_t name_len;
    uint8_t cat_len;
    uint8_t flags; /* DFT_EV_* */
    uint16_t reserved;
    int32_t level;
    int64_t id;
    int64_t p_idx;
    int64_t ts;
    int64_t dur;
    int64_t tid;
    int64_t pid; /* 0: the file's pid */
} dft_rec;

/* Where an event sits in its thread's nesting, decided by the buffer. */
typedef struct dft_rec_place {
    int64_t id;
    int32_t level;
    int64_t p_idx;
    int64_t tid;
} dft_rec_place;

static inline size_t dft_align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* At most max bytes of the n at s, never splitting a UTF-8 character: the cut
 * backs off over at most 3 continuation bytes (invalid input stays as it was). */
static inline size_t dft_clamp_utf8(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    for (int k = 0; k < 3 && max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80; k++)
        max--;
    return max;
}

static inline size_t dft_rec_key_len(const dft_arg *a)
{
    return dft_clamp_utf8(a->key, a->key_len ? a->key_len : strlen(a->key), DFT_KEY_MAX);
}

/* The encoded size of ev (a multiple of 8, at most DFT_REC_MAX).  Any thread. */
/* always_inline: the hot path's; an out-of-line copy costs ~40 instructions
 * per event (benchmarks/core/bench_instructions.py). */
static inline __attribute__((always_inline)) size_t dft_record_size(const dft_event *ev)
{
    size_t n = sizeof(dft_rec) + dft_clamp_utf8(ev->name, ev->name_len, DFT_NAME_MAX) +
               dft_clamp_utf8(ev->cat, ev->cat_len, DFT_CAT_MAX);
    size_t budget = DFT_STR_BUDGET;
    unsigned nargs = ev->nargs > DFT_ARGS_MAX ? DFT_ARGS_MAX : ev->nargs;
    for (unsigned i = 0; i < nargs; i++) {
        const dft_arg *a = &ev->args[i];
        n += 2 + dft_rec_key_len(a);
        if (a->type == DFT_ARG_STR) {
            size_t l = dft_clamp_utf8(a->v.s.ptr, a->v.s.len, budget);
            budget -= l;
            n += 4 + l;
        } else {
            n += 8;
        }
    }
    return dft_align8(n);
}

/* Encodes ev at dst, which has room for size = dft_record_size(ev) bytes.
 * Any thread, no GIL. */
static inline __attribute__((always_inline)) void
dft_record_encode(char *dst, const dft_event *ev, size_t size, const dft_rec_place *at)
{
    dft_rec *r = (dft_rec *)dst;
    unsigned nargs = ev->nargs > DFT_ARGS_MAX ? DFT_ARGS_MAX : ev->nargs;
    r->size = (uint32_t)size;
    r->ph = (uint8_t)ev->ph;
    r->nargs = (uint8_t)nargs;
    r->name_len = (uint16_t)dft_clamp_utf8(ev->name, ev->name_len, DFT_NAME_MAX);
    r->cat_len = (uint8_t)dft_clamp_utf8(ev->cat, ev->cat_len, DFT_CAT_MAX);
    r->flags = (uint8_t)ev->flags;
    r->reserved = 0;
    r->level = at->level;
    r->id = at->id;
    r->p_idx = at->p_idx;
    r->ts = ev->ts;
    r->dur = ev->dur;
    r->tid = at->tid;
    r->pid = ev->pid;
    char *p = dst + sizeof(dft_rec);
    memcpy(p, ev->name, r->name_len);
    p += r->name_len;
    memcpy(p, ev->cat, r->cat_len);
    p += r->cat_len;
    size_t budget = DFT_STR_BUDGET;
    for (unsigned i = 0; i < nargs; i++) {
        const dft_arg *a = &ev->args[i];
        size_t kl = dft_rec_key_len(a);
        *p++ = (char)a->type;
        *p++ = (char)kl;
        memcpy(p, a->key, kl);
        p += kl;
        if (a->type == DFT_ARG_STR) {
            uint32_t l = (uint32_t)dft_clamp_utf8(a->v.s.ptr, a->v.s.len, budget);
            budget -= l;
            memcpy(p, &l, 4);
            memcpy(p + 4, a->v.s.ptr, l);
            p += 4 + l;
        } else {
            memcpy(p, &a->v, 8);
            p += 8;
        }
    }
    /* Zero the padding (< 8 bytes) so the chunk is fully initialised. */
    while (p < dst + size)
        *p++ = 0;
}

#endif
