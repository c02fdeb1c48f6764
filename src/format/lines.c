/* format/lines.c: record -> JSON line.  Runs on writer threads, no GIL. */
#include "format/lines.h"

static void format_args(dft_sbuf *o, const char *p, unsigned nargs, int first)
{
    for (unsigned i = 0; i < nargs; i++) {
        uint8_t type = (uint8_t)p[0];
        uint8_t kl = (uint8_t)p[1];
        p += 2;
        if (!first)
            DFT_SBUF_LIT(o, ",");
        first = 0;
        dft_json_string(o, p, kl);
        DFT_SBUF_LIT(o, ":");
        p += kl;
        if (type == DFT_ARG_STR) {
            uint32_t l;
            memcpy(&l, p, 4);
            dft_json_string(o, p + 4, l);
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
            dft_json_int(o, v.i);
        else if (type == DFT_ARG_FLOAT)
            dft_json_double(o, v.f);
        else
            dft_json_hash(o, v.h);
    }
}

static void format_one(dft_sbuf *o, const dft_rec *r, const dft_fmt_ctx *ctx)
{
    const char *p = (const char *)(r + 1);
    DFT_SBUF_LIT(o, "{\"id\":");
    dft_json_int(o, r->id);
    DFT_SBUF_LIT(o, ",\"name\":");
    dft_json_string(o, p, r->name_len);
    p += r->name_len;
    DFT_SBUF_LIT(o, ",\"cat\":");
    dft_json_string(o, p, r->cat_len);
    p += r->cat_len;
    DFT_SBUF_LIT(o, ",\"pid\":");
    dft_json_int(o, r->pid ? r->pid : ctx->pid);
    DFT_SBUF_LIT(o, ",\"tid\":");
    dft_json_int(o, r->tid);
    if (r->ph != DFT_PH_METADATA) {
        DFT_SBUF_LIT(o, ",\"ts\":");
        dft_json_int(o, r->ts);
    }
    if (r->ph == DFT_PH_COMPLETE) {
        DFT_SBUF_LIT(o, ",\"dur\":");
        dft_json_int(o, r->dur < 0 ? 0 : r->dur);
    }
    switch (r->ph) {
    case DFT_PH_COMPLETE: DFT_SBUF_LIT(o, ",\"ph\":\"X\""); break;
    case DFT_PH_INSTANT: DFT_SBUF_LIT(o, ",\"ph\":\"i\",\"s\":\"t\""); break;
    case DFT_PH_COUNTER: DFT_SBUF_LIT(o, ",\"ph\":\"C\""); break;
    default: DFT_SBUF_LIT(o, ",\"ph\":\"M\""); break;
    }
    int nesting = r->ph != DFT_PH_COUNTER && r->ph != DFT_PH_METADATA &&
                  !(r->flags & DFT_EV_NO_NESTING);
    int with_hhash = ctx->inc_metadata && r->ph != DFT_PH_COUNTER;
    if (!with_hhash && r->nargs == 0) {
        DFT_SBUF_LIT(o, "}\n");
        return;
    }
    DFT_SBUF_LIT(o, ",\"args\":{");
    int first = 1;
    if (with_hhash) {
        DFT_SBUF_LIT(o, "\"hhash\":");
        dft_json_hash(o, ctx->hhash);
        if (nesting) {
            DFT_SBUF_LIT(o, ",\"level\":");
            dft_json_int(o, r->level);
            DFT_SBUF_LIT(o, ",\"p_idx\":");
            dft_json_int(o, r->p_idx);
        }
        first = 0;
    }
    format_args(o, p, r->nargs, first);
    DFT_SBUF_LIT(o, "}}\n");
}

size_t dft_format_records(dft_sbuf *out, const char *data, size_t *pos, size_t end,
                          const dft_fmt_ctx *ctx, size_t limit)
{
    size_t lines = 0;
    size_t p = *pos;
    while (p + sizeof(dft_rec) <= end && out->len < limit) {
        const dft_rec *r = (const dft_rec *)(data + p);
        if (r->size < sizeof(dft_rec) || p + r->size > end) {
            p = end; /* cannot happen for records we encoded; stop rather than misread */
            break;
        }
        format_one(out, r, ctx);
        p += r->size;
        lines++;
    }
    if (p + sizeof(dft_rec) > end)
        p = end;
    *pos = p;
    return lines;
}
