/* reader/members.c: the passes' reading of an event's args: dft_line_args
 * hands each member of the args object the parser found to a callback (a
 * plain object in one scan, any other through reader/scan.c's member walk),
 * dft_arg_table_read puts a member into the field a table names, and
 * dft_end_signal reads the signal of an `end` event.  Pure; no GIL. */
#include "reader/reader.h"

#include <stdatomic.h>
#include <string.h>

/* The members of the args object opened in *args, each handed to fn. */
static int args_walk(dft_members *args, dft_arg_fn fn, void *ctx)
{
    dft_sv key;
    int rc;
    while ((rc = dft_members_next(args, &key)) == 1) {
        const char *v = args->p;
        dft_sv str = {NULL, 0};
        int is_str = v < args->end && *v == '"';
        if (is_str ? dft_json_scan_string(&args->p, args->end, &str) < 0
                   : dft_json_scan_value(&args->p, args->end) < 0)
            return -1;
        fn(ctx, key, v, args->p, str, is_str);
    }
    return rc < 0 ? -1 : 0;
}

/* The args object of a line whose parse found it plain (DFT_HAVE_PLAIN_ARGS:
 * parse.c's args_fast): "key":value members, no spaces, keys and strings
 * without backslashes closing at their first quote, each value followed by
 * ',' or '}'; so each is found in one scan and nothing can fail. */
static void plain_walk(const char *p, const char *end, dft_arg_fn fn, void *ctx)
{
    while (p < end && *p == '"') {
        const char *k = p + 1;
        const char *q = dft_plain_quote(k, end);
        if (!q)
            return;
        dft_sv key = {k, (size_t)(q - k)};
        const char *v = q + 2; /* past '":' */
        dft_sv str = {NULL, 0};
        int is_str = v < end && *v == '"';
        if (is_str) {
            q = dft_plain_quote(v + 1, end);
            if (!q)
                return;
            str = (dft_sv){v + 1, (size_t)(q - v - 1)};
            p = q + 1;
        } else if (v < end && (*v == '-' || (*v >= '0' && *v <= '9'))) {
            for (p = v; p < end && *p != ','; p++)
                ;
        } else {
            p = v;
            if (dft_json_scan_value(&p, end) < 0)
                return;
        }
        fn(ctx, key, v, p, str, is_str);
        p++; /* the ',' */
    }
}

int dft_line_args(const dft_line *l, dft_arg_fn fn, void *ctx)
{
    dft_members args;
    if (!l->args.p)
        return 0;
    if ((l->have & DFT_HAVE_PLAIN_ARGS) && l->args.n >= 2) {
        plain_walk(l->args.p + 1, l->args.p + l->args.n - 1, fn, ctx);
        return 0;
    }
    if (dft_members_open(&args, l->args.p, l->args.p + l->args.n) < 0)
        return -1;
    return args_walk(&args, fn, ctx);
}

static void end_signal_arg(void *ctx, dft_sv key, const char *v, const char *vend, dft_sv str,
                           int is_str)
{
    (void)str;
    int64_t x;
    if (!is_str && key.n == 6 && memcmp(key.p, "signal", 6) == 0 &&
        dft_members_int(v, vend, &x) == 0)
        *(int64_t *)ctx = x;
}

int dft_end_signal(const dft_line *l)
{
    int64_t sig = 0;
    if (dft_line_args(l, end_signal_arg, &sig) < 0)
        sig = 0; /* a malformed object: the line's own problem, no signal read */
    return sig >= 1 && sig <= DFT_SIGNAL_MAX ? (int)sig : 0;
}

/* The bit of a key in a table's signature (bit 63 also marks it computed:
 * a key on that bit is only never turned away). */
static inline uint64_t key_bit(const char *k, size_t n)
{
    return 1ull << ((n * 7 + (unsigned char)k[0] * 3 + (unsigned char)k[n - 1]) & 63);
}

int dft_arg_table_read(dft_arg_table *t, void *obj, unsigned *have, dft_sv key, const char *v,
                       const char *vend, dft_sv str, int is_str)
{
    if (key.n == 0)
        return 0;
    uint64_t sig = atomic_load_explicit(&t->keys, memory_order_relaxed);
    if (!sig) {
        sig = 1ull << 63;
        for (size_t i = 0; i < t->n; i++)
            sig |= key_bit(t->fields[i].key, t->fields[i].key_len);
        atomic_store_explicit(&t->keys, sig, memory_order_relaxed);
    }
    if (!(sig & key_bit(key.p, key.n)))
        return 0;
    for (size_t i = 0; i < t->n; i++) {
        const dft_arg_field *f = &t->fields[i];
        if (key.n != f->key_len || f->key[0] != key.p[0] ||
            !dft_bytes_eq(f->key + 1, key.p + 1, key.n - 1))
            continue;
        char *at = (char *)obj + f->off;
        int64_t x;
        if (f->kind == DFT_ARG_FIELD_STR) {
            if (is_str) {
                memcpy(at, &str, sizeof str);
                *have |= f->bit;
            }
        } else if (is_str ? f->kind == DFT_ARG_FIELD_INT_TEXT &&
                                dft_members_int(str.p, str.p + str.n, &x) == 0
                          : dft_members_int(v, vend, &x) == 0) {
            memcpy(at, &x, sizeof x);
            *have |= f->bit;
        }
        return 1;
    }
    return 0;
}

int dft_members_int(const char *p, const char *end, int64_t *v)
{
    int neg = p < end && *p == '-';
    const char *d = p + neg;
    int64_t x = 0;
    const char *q = d;
    while (q < end && *q >= '0' && *q <= '9' && q - d < 18)
        x = x * 10 + (*q++ - '0');
    if (q == d || q != end)
        return -1;
    *v = neg ? -x : x;
    return 0;
}
