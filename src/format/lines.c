/* format/lines.c: record -> JSON line.  Runs on writer threads, no GIL.
 *
 * One reservation per line (a bound from the record's size), then the line is
 * written through a raw cursor: literal parts are fixed-size copies, numbers
 * go through the two-digit table (json.c), strings through the escaper's
 * one-load plain path, and the parts that are the same on every line of a
 * file (the pid, the hhash) are formatted once per call.  What changes little
 * from one line to the next is formatted from the previous line's text: the
 * tid, the high digits of the timestamp, an id one above the last. */
#include "format/lines.h"

#define PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) += sizeof(lit) - 1)

/* Every line of a call shares these, formatted once. */
typedef struct fmt_const {
    char pid_tid[48]; /* ,"pid":<ctx pid>,"tid": */
    size_t pid_tid_len;
    char hhash[40];   /* ,"args":{"hhash":"<16 hex>" */
    int64_t tid;      /* the last line's tid, and its digits */
    char tid_text[24];
    size_t tid_len;
    int64_t id;       /* the last line's id (-1: none), and its digits */
    char id_text[24];
    size_t id_len;
    uint64_t ts_hi;   /* ts / 10^8 of the last 9-to-16-digit ts (0: none) */
    char ts_hi_text[8];
    size_t ts_hi_len;
} fmt_const;

static void const_init(fmt_const *k, const dft_fmt_ctx *ctx)
{
    char *o = k->pid_tid;
    PUT_LIT(o, DFT_LINE_PID);
    o = dft_json_put_int(o, ctx->pid);
    PUT_LIT(o, DFT_LINE_TID);
    k->pid_tid_len = (size_t)(o - k->pid_tid);
    o = k->hhash;
    PUT_LIT(o, DFT_LINE_ARGS "{\"hhash\":");
    dft_json_put_hash(o, ctx->hhash);
    k->tid = 0;
    k->tid_len = (size_t)(dft_json_put_int(k->tid_text, 0) - k->tid_text);
    k->id = -1;
    k->id_len = 0;
    k->ts_hi = 0;
    k->ts_hi_len = 0;
}

/* A thread's records come in runs: its tid is formatted once per run. */
static inline char *put_tid(char *o, int64_t tid, fmt_const *k)
{
    if (tid != k->tid) {
        k->tid = tid;
        k->tid_len = (size_t)(dft_json_put_int(k->tid_text, tid) - k->tid_text);
    }
    memcpy(o, k->tid_text, sizeof k->tid_text);
    return o + k->tid_len;
}
/* A thread's ids mostly count up by one: the last id's digits, incremented. */
static inline char *put_id(char *o, int64_t id, fmt_const *k)
{
    int done = 0;
    if (id > 0 && k->id >= 0 && (uint64_t)id == (uint64_t)k->id + 1) {
        char *d = k->id_text + k->id_len - 1;
        while (d >= k->id_text && *d == '9')
            *d-- = '0';
        if (d >= k->id_text) { /* else all nines: one digit more, formatted */
            ++*d;
            done = 1;
        }
    }
    if (!done)
        k->id_len = (size_t)(dft_json_put_int(k->id_text, id) - k->id_text);
    k->id = id;
    memcpy(o, k->id_text, sizeof k->id_text);
    return o + k->id_len;
}

/* Microsecond timestamps have 16 digits of which the first 8 change every
 * 100 s: those are reused, the last 8 formatted. */
static inline char *put_ts(char *o, int64_t ts, fmt_const *k)
{
    uint64_t u = (uint64_t)ts;
    if (ts < 100000000 || u >= 10000000000000000u)
        return dft_json_put_int(o, ts);
    uint64_t hi = u / 100000000u; /* 1 to 99,999,999 */
    if (hi != k->ts_hi) {
        k->ts_hi = hi;
        k->ts_hi_len = (size_t)(dft_json_put_int(k->ts_hi_text, (int64_t)hi) - k->ts_hi_text);
    }
    memcpy(o, k->ts_hi_text, sizeof k->ts_hi_text);
    return dft_json_put8(o + k->ts_hi_len, (uint32_t)(u - hi * 100000000u));
}
#define HHASH_LEN (sizeof(DFT_LINE_ARGS "{\"hhash\":") - 1 + 18)

static char *format_args(char *o, const char *p, unsigned nargs, int first, const char *lim)
{
    for (unsigned i = 0; i < nargs; i++) {
        uint8_t type = (uint8_t)p[0];
        uint8_t kl = (uint8_t)p[1];
        p += 2;
        if (!first)
            *o++ = ',';
        first = 0;
        o = dft_json_put_string_in(o, p, kl, lim);
        *o++ = ':';
        p += kl;
        if (type == DFT_ARG_STR) {
            uint32_t l;
            memcpy(&l, p, 4);
            o = dft_json_put_string_in(o, p + 4, l, lim);
            p += 4 + l;
            continue;
        }
        union {
            int64_t i;
            double f;
            uint64_t h;
        } v;
        memcpy(&v, p, 8);
        p += 8;
        if (type == DFT_ARG_INT)
            o = dft_json_put_int(o, v.i);
        else if (type == DFT_ARG_FLOAT)
            o = dft_json_put_double(o, v.f);
        else
            o = dft_json_put_hash(o, v.h);
    }
    return o;
}

/* Room for any line of record r: each byte of the record's strings and keys
 * may become six, each 8-byte number at most 26 characters, plus the fixed
 * keys and punctuation (under 256 bytes).  The header's 64 bytes (384 of the
 * bound) give at least 200 bytes to spare, which the fixed-size copies past a
 * field's end (at most 23 bytes) use. */
static size_t line_bound(const dft_rec *r) { return 6 * (size_t)r->size + 256; }

/* lim: the end of the chunk, up to which record bytes may be read. */
static char *format_one(char *o, const dft_rec *r, const dft_fmt_ctx *ctx, fmt_const *k,
                        const char *lim)
{
    const char *p = (const char *)(r + 1);
    PUT_LIT(o, DFT_LINE_ID);
    o = put_id(o, r->id, k);
    PUT_LIT(o, DFT_LINE_NAME);
    o = dft_json_put_string_in(o, p, r->name_len, lim);
    p += r->name_len;
    PUT_LIT(o, DFT_LINE_CAT);
    o = dft_json_put_string_in(o, p, r->cat_len, lim);
    p += r->cat_len;
    if (r->pid == 0) {
        memcpy(o, k->pid_tid, sizeof k->pid_tid); /* fixed size: one copy */
        o += k->pid_tid_len;
    } else {
        PUT_LIT(o, DFT_LINE_PID);
        o = dft_json_put_int(o, r->pid);
        PUT_LIT(o, DFT_LINE_TID);
    }
    o = put_tid(o, r->tid, k);
    switch (r->ph) {
    case DFT_PH_COMPLETE:
        PUT_LIT(o, DFT_LINE_TS);
        o = put_ts(o, r->ts, k);
        PUT_LIT(o, DFT_LINE_DUR);
        o = dft_json_put_int(o, r->dur < 0 ? 0 : r->dur);
        PUT_LIT(o, DFT_LINE_PH "\"X\"");
        break;
    case DFT_PH_INSTANT:
        PUT_LIT(o, DFT_LINE_TS);
        o = put_ts(o, r->ts, k);
        PUT_LIT(o, DFT_LINE_PH "\"i\",\"s\":\"t\"");
        break;
    case DFT_PH_COUNTER:
        PUT_LIT(o, DFT_LINE_TS);
        o = put_ts(o, r->ts, k);
        PUT_LIT(o, DFT_LINE_PH "\"C\"");
        break;
    default: PUT_LIT(o, DFT_LINE_PH "\"M\""); break;
    }
    int nesting = r->ph != DFT_PH_COUNTER && r->ph != DFT_PH_METADATA &&
                  !(r->flags & DFT_EV_NO_NESTING);
    int with_hhash = ctx->inc_metadata && r->ph != DFT_PH_COUNTER;
    if (!with_hhash && r->nargs == 0) {
        PUT_LIT(o, "}\n");
        return o;
    }
    int first = 1;
    if (with_hhash) {
        memcpy(o, k->hhash, HHASH_LEN);
        o += HHASH_LEN;
        if (nesting && r->level == 1 && r->p_idx == -1) {
            PUT_LIT(o, ",\"level\":1,\"p_idx\":-1"); /* outside any scope: most events */
        } else if (nesting) {
            PUT_LIT(o, ",\"level\":");
            o = dft_json_put_int(o, r->level);
            PUT_LIT(o, ",\"p_idx\":");
            o = dft_json_put_int(o, r->p_idx);
        }
        first = 0;
    } else {
        PUT_LIT(o, DFT_LINE_ARGS "{");
    }
    o = format_args(o, p, r->nargs, first, lim);
    PUT_LIT(o, "}}\n");
    return o;
}

size_t dft_format_records(dft_sbuf *out, const char *data, size_t *pos, size_t end,
                          const dft_fmt_ctx *ctx, size_t limit)
{
    fmt_const k;
    const_init(&k, ctx);
    size_t lines = 0;
    size_t p = *pos;
    while (p + sizeof(dft_rec) <= end && out->len < limit && !out->failed) {
        const dft_rec *r = (const dft_rec *)(data + p);
        if (r->size < sizeof(dft_rec) || p + r->size > end) {
            p = end; /* cannot happen for records we encoded; stop rather than misread */
            break;
        }
        size_t bound = line_bound(r);
        if (out->cap - out->len < bound && dft_sbuf_reserve(out, bound) != 0)
            break; /* out->failed tells the caller */
        out->len = (size_t)(format_one(out->data + out->len, r, ctx, &k, data + end) - out->data);
        p += r->size;
        lines++;
    }
    if (p + sizeof(dft_rec) > end)
        p = end;
    *pos = p;
    return lines;
}
