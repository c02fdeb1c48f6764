/* reader/parse.c: one trace line into a dft_line.
 *
 * Fast path: the exact key order dftracer writes (docs/trace-format.md), each
 * key matched with one memcmp.  Any line that departs from it (other key
 * order, the older tools' integer hashes, unknown keys, whitespace) goes
 * through the general JSON object parser below, which accepts any key order
 * and skips values it does not need (its grammar: reader/scan.c).  In
 * lenient mode strings may hold the older tools' unescaped quotes and
 * backslashes; strict mode (validate) accepts RFC 8259 JSON only.  Runs
 * without the GIL. */
#include "reader/reader.h"

#include <stdlib.h>
#include <string.h>

#include "format/lines.h"
#include "reader/scan.h"

/* An integer of at most 18 digits (no fraction or exponent); -1 otherwise. */
static inline int fast_int(dft_pstate *s, int64_t *v)
{
    const char *q = s->p;
    int neg = 0;
    if (q < s->end && *q == '-') {
        neg = 1;
        q++;
    }
    const char *d = q;
    const char *lim = s->end - q > 18 ? q + 18 : s->end; /* 18 digits never overflow */
    uint64_t x = 0;
    while (q < lim && (unsigned)(*q - '0') < 10)
        x = x * 10 + (uint64_t)(*q++ - '0');
    if (q == d || (q < s->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E')))
        return -1;
    *v = neg ? -(int64_t)x : (int64_t)x;
    s->p = q;
    return 0;
}

#define KEY_IS(k, lit) ((k).n == sizeof(lit) - 1 && memcmp((k).p, lit, sizeof(lit) - 1) == 0)

/* A value that is a string or a number: its body/text in *out. */
static int token(dft_pstate *s, dft_sv *out, int64_t *iv, int *is_int)
{
    dft_ws(s);
    if (s->p < s->end && *s->p == '"') {
        *is_int = 0;
        return dft_scan_string(s, out);
    }
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        const char *b = s->p;
        if (s->mode == DFT_PARSE_LENIENT && fast_int(s, iv) == 0) {
            out->p = b;
            out->n = (size_t)(s->p - b);
            *is_int = 1;
            return 0;
        }
        return dft_scan_number(s, iv, is_int, out);
    }
    *is_int = 0;
    out->p = NULL;
    out->n = 0;
    return dft_scan_skip(s, 1);
}

/* One member of the args object: hhash, name, value, module, num_events and
 * the byte counts are kept; a key ending in "hash" (and cwd) is a reference. */
static inline void arg_take(dft_line *l, dft_io_args *io, dft_sv key, dft_sv val, int64_t iv,
                            int is_int)
{
    switch (key.n) {
    case 3:
        if (KEY_IS(key, "ret") && is_int) {
            io->ret = iv;
            io->have |= DFT_IO_RET;
        }
        break;
    case 4:
        if (KEY_IS(key, "name"))
            l->a_name = val;
        else if (KEY_IS(key, "size") && is_int) {
            io->size = iv;
            io->have |= DFT_IO_SIZE;
        } else if (KEY_IS(key, "step"))
            l->have |= DFT_HAVE_STEP_KEY;
        break;
    case 5:
        if (KEY_IS(key, "hhash"))
            l->hhash = val;
        else if (KEY_IS(key, "value"))
            l->a_value = val;
        else if (KEY_IS(key, "count") && is_int) {
            io->count = iv;
            io->have |= DFT_IO_COUNT;
        }
        break;
    case 6:
        if (KEY_IS(key, "module") && val.p && !is_int)
            l->a_module = val;
        break;
    case 10:
        if (KEY_IS(key, "image_size") && is_int) {
            io->image_size = iv;
            io->have |= DFT_IO_IMAGE_SIZE;
        }
        else if (KEY_IS(key, "num_events") && is_int) {
            l->num_events = iv;
            l->have |= DFT_HAVE_NUM_EVENTS;
        }
        break;
    default:
        break;
    }
    /* hash references: hhash, fhash, cmd_hash, ..., cwd */
    if (val.p && l->nrefs < DFT_LINE_REFS &&
        ((key.n >= 4 && memcmp(key.p + key.n - 4, "hash", 4) == 0) || KEY_IS(key, "cwd")))
        l->refs[l->nrefs++] = val;
}

static void args_done(dft_line *l, const dft_io_args *io)
{
    if (io->have && dft_io_bytes(l->cat, l->name, io, &l->io_bytes))
        l->have |= DFT_HAVE_IO;
}

/* The args object through the general member walk (any spacing, escapes). */
static int args_object(dft_pstate *s, dft_line *l)
{
    dft_io_args io = {0, 0, 0, 0, 0};
    dft_ws(s);
    if (s->p >= s->end || *s->p != '{')
        return dft_scan_skip(s, 1);
    s->p++;
    dft_sv key;
    dft_members it;
    dft_members_start(&it, s->p, s->end, s->mode);
    int rc;
    while ((rc = dft_scan_next_member(s, &it, &key, 1)) == 1) {
        dft_sv val;
        int64_t iv = 0;
        int is_int = 0;
        if (token(s, &val, &iv, &is_int) < 0)
            return -1;
        arg_take(l, &io, key, val, iv, is_int);
    }
    if (rc < 0)
        return -1;
    args_done(l, &io);
    return 0;
}

/* The args object as dftracer writes it (no spaces, no escapes in keys or
 * string values, each value followed by ',' or '}'): each key and string
 * found in one scan; members.c walks such an object again on the same
 * terms (DFT_HAVE_PLAIN_ARGS).  Returns 0, or
 * -1 to have args_object read it from the start instead: it then meets the
 * same members the same way (the lenient string rule closes a string at the
 * first quote followed by ',' or '}', as this does), so the answer never
 * depends on which path read the line. */
static int args_fast(dft_pstate *s, dft_line *l)
{
    dft_io_args io = {0, 0, 0, 0, 0};
    if (s->p >= s->end || *s->p != '{')
        return -1;
    s->p++;
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"')
            return -1;
        const char *k = s->p + 1;
        const char *q = dft_plain_quote(k, s->end);
        if (!q || q + 1 >= s->end || q[1] != ':')
            return -1;
        dft_sv key = {k, (size_t)(q - k)};
        s->p = q + 2;
        dft_sv val = {NULL, 0};
        int64_t iv = 0;
        int is_int = 0;
        if (s->p < s->end && *s->p == '"') {
            const char *b = s->p + 1;
            q = dft_plain_quote(b, s->end);
            if (!q || q + 1 >= s->end || (q[1] != ',' && q[1] != '}'))
                return -1;
            val.p = b;
            val.n = (size_t)(q - b);
            s->p = q + 1;
        } else if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
            const char *b = s->p;
            if (fast_int(s, &iv) == 0) {
                is_int = 1;
                val.p = b;
                val.n = (size_t)(s->p - b);
            } else if (dft_scan_number(s, &iv, &is_int, &val) < 0) {
                return -1;
            }
        } else if (token(s, &val, &iv, &is_int) < 0) {
            return -1;
        }
        arg_take(l, &io, key, val, iv, is_int);
        if (s->p >= s->end)
            return -1;
        if (*s->p == '}') {
            s->p++;
            break;
        }
        if (*s->p != ',')
            return -1;
        s->p++;
    }
    args_done(l, &io);
    return 0;
}

static int int_field(dft_pstate *s, int64_t *v, unsigned bit, dft_line *l, const char *why)
{
    dft_sv t;
    int is_int = 0;
    dft_ws(s);
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        /* a value of another type: keep the line, leave the field out */
        if (s->mode == DFT_PARSE_STRICT)
            return dft_scan_fail(s, why);
        return dft_scan_skip(s, 1);
    }
    if (dft_scan_number(s, v, &is_int, &t) < 0)
        return -1;
    if (!is_int && s->mode == DFT_PARSE_STRICT)
        return dft_scan_fail(s, why);
    l->have |= bit;
    return 0;
}

static char ph_letter(dft_sv v, int is_num, int64_t iv)
{
    if (is_num) /* the dev dialect's numeric phases */
        return iv == 1 ? 'X' : iv == 2 ? 'C' : iv == 3 ? 'X' : iv == 4 ? 'M' : '?';
    return v.n >= 1 ? v.p[0] : '?';
}

/* General path: any key order. */
static int general(dft_pstate *s, dft_line *l)
{
    const char *args_at = NULL;
    dft_ws(s);
    if (s->p >= s->end || *s->p != '{')
        return dft_scan_fail(s, "not a JSON object");
    s->p++; /* "{}" too goes on to the check of what follows it */
    dft_sv key;
    dft_members it;
    dft_members_start(&it, s->p, s->end, s->mode);
    int more;
    while ((more = dft_scan_next_member(s, &it, &key, 0)) == 1) {
        dft_sv val;
        int64_t iv;
        int is_int;
        int rc = 0;
        if (KEY_IS(key, "id"))
            rc = int_field(s, &l->id, DFT_HAVE_ID, l, "id is not an integer");
        else if (KEY_IS(key, "pid"))
            rc = int_field(s, &l->pid, DFT_HAVE_PID, l, "pid is not an integer");
        else if (KEY_IS(key, "tid"))
            rc = int_field(s, &l->tid, DFT_HAVE_TID, l, "tid is not an integer");
        else if (KEY_IS(key, "ts"))
            rc = int_field(s, &l->ts, DFT_HAVE_TS, l, "ts is not an integer");
        else if (KEY_IS(key, "dur"))
            rc = int_field(s, &l->dur, DFT_HAVE_DUR, l, "dur is not an integer");
        else if (KEY_IS(key, "name") || KEY_IS(key, "cat")) {
            dft_ws(s);
            if (s->p < s->end && *s->p == '"')
                rc = dft_scan_string(s, key.n == 4 ? &l->name : &l->cat);
            else
                rc = s->mode == DFT_PARSE_STRICT ? dft_scan_fail(s, "name/cat is not a string")
                                                 : dft_scan_skip(s, 1);
        } else if (KEY_IS(key, "ph")) {
            rc = token(s, &val, &iv, &is_int);
            if (rc == 0) {
                l->ph = ph_letter(val, is_int, iv);
                if (is_int)
                    l->have |= DFT_HAVE_NUMERIC_PH;
            }
        } else if (KEY_IS(key, "args")) {
            /* args needs the name and cat for its byte rule: parsed after the rest */
            dft_ws(s);
            args_at = s->p;
            rc = dft_scan_skip(s, 1);
        } else
            rc = dft_scan_skip(s, 1);
        if (rc < 0)
            return -1;
    }
    if (more < 0)
        return -1;
    dft_ws(s);
    if (s->p != s->end)
        return dft_scan_fail(s, "text after the object");
    if (args_at) {
        const char *end = s->p;
        s->p = args_at;
        if (args_object(s, l) < 0)
            return -1;
        if (*args_at == '{') /* the object's text, for dft_line_args */
            l->args = (dft_sv){args_at, (size_t)(s->p - args_at)};
        s->p = end;
    }
    return 0;
}

/* Fast path helpers: a literal key token, then an integer or a string. */
#define LIT(s, lit) ((size_t)((s)->end - (s)->p) >= sizeof(lit) - 1 && \
                     memcmp((s)->p, lit, sizeof(lit) - 1) == 0 && ((s)->p += sizeof(lit) - 1, 1))

static int fast_str(dft_pstate *s, dft_sv *out)
{
    const char *b = s->p;
    const char *q = dft_plain_quote(b, s->end);
    if (!q || q + 1 >= s->end || q[1] != ',')
        return -1;
    if (s->mode == DFT_PARSE_STRICT)
        for (const char *c = b; c < q; c++)
            if ((unsigned char)*c < 0x20)
                return -1;
    out->p = b;
    out->n = (size_t)(q - b);
    s->p = q + 1;
    return 0;
}

/* Returns 0 when the line is in dftracer's exact layout, -1 to fall back. */
static int fast(dft_pstate *s, dft_line *l)
{
    if (!LIT(s, DFT_LINE_ID) || fast_int(s, &l->id) < 0 || !LIT(s, DFT_LINE_NAME "\"") ||
        fast_str(s, &l->name) < 0 || !LIT(s, DFT_LINE_CAT "\"") || fast_str(s, &l->cat) < 0 ||
        !LIT(s, DFT_LINE_PID) || fast_int(s, &l->pid) < 0 || !LIT(s, DFT_LINE_TID) ||
        fast_int(s, &l->tid) < 0)
        return -1;
    l->have = DFT_HAVE_ID | DFT_HAVE_PID | DFT_HAVE_TID;
    if (LIT(s, DFT_LINE_TS)) {
        if (fast_int(s, &l->ts) < 0)
            return -1;
        l->have |= DFT_HAVE_TS;
        if (LIT(s, DFT_LINE_DUR)) {
            if (fast_int(s, &l->dur) < 0)
                return -1;
            l->have |= DFT_HAVE_DUR;
        }
    }
    if (!LIT(s, DFT_LINE_PH "\"") || s->p + 2 > s->end || s->p[1] != '"')
        return -1;
    l->ph = s->p[0];
    s->p += 2;
    if (l->ph == 'i' && !LIT(s, ",\"s\":\"t\""))
        return -1;
    if (LIT(s, DFT_LINE_ARGS)) {
        const char *args = s->p;
        if (s->mode == DFT_PARSE_LENIENT && args_fast(s, l) == 0) {
            l->have |= DFT_HAVE_PLAIN_ARGS;
        } else {
            /* back to what the args walk set, then the general walk */
            s->p = args;
            l->have &= ~(unsigned)(DFT_HAVE_NUM_EVENTS | DFT_HAVE_IO | DFT_HAVE_STEP_KEY);
            l->hhash = l->a_name = l->a_value = l->a_module = (dft_sv){NULL, 0};
            l->nrefs = 0;
            if (args_object(s, l) < 0)
                return -1;
        }
        if (*args == '{') /* the object's text, for dft_line_args */
            l->args = (dft_sv){args, (size_t)(s->p - args)};
    }
    if (!LIT(s, "}") || s->p != s->end)
        return -1;
    return 0;
}

int dft_line_is_bracket(const char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t' || s[n - 1] == ','))
        n--;
    while (n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    return n == 0 || (n == 1 && (*s == '[' || *s == ']'));
}

dft_rd_status dft_rd_next_event(dft_rd *r, const char **text, size_t *n, dft_line *l,
                                const char **why)
{
    dft_rd_status st;
    while ((st = dft_rd_next(r, text, n)) == DFT_RD_OK && dft_line_is_bracket(*text, *n))
        ;
    if (st != DFT_RD_OK)
        return st;
    while (*n > 0 && ((*text)[*n - 1] == '\r' || (*text)[*n - 1] == ',' || (*text)[*n - 1] == ' '))
        (*n)--;
    if (dft_line_parse(*text, *n, DFT_PARSE_LENIENT, l, why) == 0)
        *why = NULL;
    return st;
}

dft_rd_status dft_rd_next_parsed(dft_rd *r, const char **text, size_t *n, dft_line *l,
                                 dft_rd_bad *bad)
{
    const char *why;
    dft_rd_status st;
    while ((st = dft_rd_next_event(r, text, n, l, &why)) == DFT_RD_OK && why)
        dft_rd_bad_line(bad, r, why);
    if (st != DFT_RD_OK)
        bad->lines += r->long_lines;
    return st;
}

/* An empty line: every field zero but refs, which nrefs guards (a memset of
 * the whole struct costs more than the parse of a short line's numbers). */
static inline void line_reset(dft_line *l)
{
    static const dft_sv none = {NULL, 0};
    l->have = 0;
    l->id = l->pid = l->tid = l->ts = l->dur = l->io_bytes = l->num_events = 0;
    l->ph = '?';
    l->name = l->cat = l->hhash = l->a_name = l->a_value = l->a_module = l->args = none;
    l->nrefs = 0;
}

int dft_line_parse(const char *text, size_t n, dft_parse_mode mode, dft_line *out,
                   const char **why)
{
    /* tolerate a trailing comma or CR (JSON-array style files) */
    while (n > 0 && (text[n - 1] == '\r' || text[n - 1] == ',' || text[n - 1] == ' '))
        n--;
    dft_pstate s = {text, text + n, mode, NULL};
    line_reset(out);
    if (fast(&s, out) == 0)
        goto ok;
    s.p = text;
    s.why = NULL;
    line_reset(out);
    if (general(&s, out) < 0) {
        *why = s.why ? s.why : "not JSON";
        return -1;
    }
ok:
    if (mode == DFT_PARSE_STRICT && !dft_utf8_valid((const unsigned char *)text, n)) {
        *why = "invalid UTF-8";
        return -1;
    }
    if (!out->name.p || out->ph == '?') {
        *why = "a JSON object but not a trace event (no \"name\" or \"ph\")";
        return -1;
    }
    return 0;
}

