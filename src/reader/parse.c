/* reader/parse.c: one trace line into a dft_line.
 *
 * Fast path: the exact key order dftracer writes (docs/trace-format.md), each
 * key matched with one memcmp.  Any line that departs from it (other key
 * order, the older tools' integer hashes, unknown keys, whitespace) goes
 * through the general JSON object parser below, which accepts any key order
 * and skips values it does not need.  In lenient mode strings may hold the
 * older tools' unescaped quotes and backslashes; strict mode (validate)
 * accepts RFC 8259 JSON only.  Runs without the GIL. */
#include "reader/reader.h"

#include <stdlib.h>
#include <string.h>

#include "format/lines.h"

typedef struct pstate {
    const char *p, *end;
    dft_parse_mode mode;
    const char *why;
} pstate;

static void ws(pstate *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
        s->p++;
}

static int fail(pstate *s, const char *why)
{
    if (!s->why)
        s->why = why;
    return -1;
}

/* After a member of an object or array: 1 when a ',' follows (another
 * member), 0 after the closing bracket, -1 (why) when neither does. */
static int after_member(pstate *s, char close, const char *why)
{
    ws(s);
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        return 1;
    }
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    return fail(s, why);
}

static int string(pstate *s, dft_sv *out);

/* The next member of the object walked by *it (reader/members.c, started in
 * s->mode), from s->p: 1 with its key and s->p at its value; 0 at the
 * object's end; -1 with the reason (in_args: the args object's). */
static int next_member(pstate *s, dft_members *it, dft_sv *key, int in_args)
{
    static const char *const why[2][4] = {
        {"", "bad key", "missing ':'", "missing ',' or '}'"},
        {"", "bad key in args", "missing ':' in args", "missing ',' or '}' in args"},
    };
    it->p = s->p;
    int rc = dft_members_next(it, key);
    s->p = it->p;
    if (rc < 0)
        return fail(s, it->why ? it->why : why[in_args][it->fault]);
    return rc;
}

/* Strict checks of a string body: escapes and control characters. */
static int check_string_body(pstate *s, const char *b, const char *e)
{
    for (const char *q = b; q < e; q++) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20)
            return fail(s, "control character inside a string");
        if (c == '\\') {
            q++;
            if (q >= e)
                return fail(s, "bad escape in a string");
            switch (*q) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                break;
            case 'u':
                for (int k = 1; k <= 4; k++) {
                    char h = q + k < e ? q[k] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
                          (h >= 'A' && h <= 'F')))
                        return fail(s, "bad \\u escape in a string");
                }
                q += 4;
                break;
            default:
                return fail(s, "bad escape in a string");
            }
        }
    }
    return 0;
}

/* A string at s->p (which is '"'): its body in *out. */
static int string(pstate *s, dft_sv *out)
{
    const char *b = s->p + 1, *q = b;
    for (;;) {
        q = memchr(q, '"', (size_t)(s->end - q));
        if (!q)
            return fail(s, "unterminated string");
        size_t bs = 0;
        while (q - bs > b && q[-1 - (ptrdiff_t)bs] == '\\')
            bs++;
        if (bs % 2 == 1) {
            q++;
            continue;
        }
        if (s->mode == DFT_PARSE_LENIENT) {
            /* Older tools wrote names unescaped: a quote followed by anything
             * but a separator is part of the string. */
            const char *a = q + 1;
            while (a < s->end && *a == ' ')
                a++;
            if (a < s->end && *a != ',' && *a != ':' && *a != '}' && *a != ']') {
                q++;
                continue;
            }
        }
        break;
    }
    if (s->mode == DFT_PARSE_STRICT && check_string_body(s, b, q) < 0)
        return -1;
    out->p = b;
    out->n = (size_t)(q - b);
    s->p = q + 1;
    return 0;
}

/* A number; *is_int tells whether it is an integer fitting int64. */
static int number(pstate *s, int64_t *iv, int *is_int, dft_sv *text)
{
    const char *b = s->p, *q = b;
    if (q < s->end && *q == '-')
        q++;
    const char *d = q;
    uint64_t v = 0;
    int overflow = 0;
    while (q < s->end && *q >= '0' && *q <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            overflow = 1;
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (q == d)
        return fail(s, "bad value");
    if (s->mode == DFT_PARSE_STRICT && *d == '0' && q - d > 1)
        return fail(s, "number with a leading zero");
    int frac = 0;
    if (q < s->end && *q == '.') {
        frac = 1;
        const char *f = ++q;
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
        if (q == f)
            return fail(s, "bad number");
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        frac = 1;
        q++;
        if (q < s->end && (*q == '+' || *q == '-'))
            q++;
        const char *f = q;
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
        if (q == f)
            return fail(s, "bad number");
    }
    text->p = b;
    text->n = (size_t)(q - b);
    s->p = q;
    if (!frac && !overflow && v <= (uint64_t)INT64_MAX) {
        *is_int = 1;
        *iv = *b == '-' ? -(int64_t)v : (int64_t)v;
    } else {
        *is_int = 0;
        char tmp[64];
        size_t n = text->n < sizeof tmp - 1 ? text->n : sizeof tmp - 1;
        memcpy(tmp, b, n);
        tmp[n] = 0;
        double dv = strtod(tmp, NULL);
        *iv = dv >= 9.2e18 ? INT64_MAX : dv <= -9.2e18 ? INT64_MIN : (int64_t)dv;
    }
    return 0;
}

/* An integer of at most 18 digits (no fraction or exponent); -1 otherwise. */
static int fast_int(pstate *s, int64_t *v)
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

static int skip_value(pstate *s, int depth);

static int literal(pstate *s, const char *lit, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return fail(s, "bad value");
    s->p += n;
    return 0;
}

static int skip_value(pstate *s, int depth)
{
    if (depth > 64)
        return fail(s, "nested too deeply");
    ws(s);
    if (s->p >= s->end)
        return fail(s, "line ends inside a value");
    dft_sv sv;
    int64_t iv;
    int is_int;
    switch (*s->p) {
    case '"':
        return string(s, &sv);
    case 't':
        return literal(s, "true", 4);
    case 'f':
        return literal(s, "false", 5);
    case 'n':
        return literal(s, "null", 4);
    case '{': {
        s->p++;
        dft_members it;
        dft_members_start(&it, s->p, s->end, s->mode);
        int rc;
        while ((rc = next_member(s, &it, &sv, 0)) == 1)
            if (skip_value(s, depth + 1) < 0)
                return -1;
        return rc;
    }
    case '[':
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 0;
        }
        for (;;) {
            if (skip_value(s, depth + 1) < 0)
                return -1;
            int more = after_member(s, ']', "missing ',' or ']'");
            if (more <= 0)
                return more;
        }
    default:
        return number(s, &iv, &is_int, &sv);
    }
}

#define KEY_IS(k, lit) ((k).n == sizeof(lit) - 1 && memcmp((k).p, lit, sizeof(lit) - 1) == 0)

/* A value that is a string or a number: its body/text in *out. */
static int token(pstate *s, dft_sv *out, int64_t *iv, int *is_int)
{
    ws(s);
    if (s->p < s->end && *s->p == '"') {
        *is_int = 0;
        return string(s, out);
    }
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        const char *b = s->p;
        if (s->mode == DFT_PARSE_LENIENT && fast_int(s, iv) == 0) {
            out->p = b;
            out->n = (size_t)(s->p - b);
            *is_int = 1;
            return 0;
        }
        return number(s, iv, is_int, out);
    }
    *is_int = 0;
    out->p = NULL;
    out->n = 0;
    return skip_value(s, 1);
}

/* The args object: picks out hhash, name, value, module, num_events and byte
 * counts. */
static int args_object(pstate *s, dft_line *l)
{
    dft_io_args io = {0, 0, 0, 0, 0};
    ws(s);
    if (s->p >= s->end || *s->p != '{')
        return skip_value(s, 1);
    s->p++;
    dft_sv key;
    dft_members it;
    dft_members_start(&it, s->p, s->end, s->mode);
    int rc;
    while ((rc = next_member(s, &it, &key, 1)) == 1) {
        dft_sv val;
        int64_t iv = 0;
        int is_int = 0;
        if (token(s, &val, &iv, &is_int) < 0)
            return -1;
        switch (key.n) {
        case 3:
            if (KEY_IS(key, "ret") && is_int) {
                io.ret = iv;
                io.have |= DFT_IO_RET;
            }
            break;
        case 4:
            if (KEY_IS(key, "name"))
                l->a_name = val;
            else if (KEY_IS(key, "size") && is_int) {
                io.size = iv;
                io.have |= DFT_IO_SIZE;
            }
            break;
        case 5:
            if (KEY_IS(key, "hhash"))
                l->hhash = val;
            else if (KEY_IS(key, "value"))
                l->a_value = val;
            else if (KEY_IS(key, "count") && is_int) {
                io.count = iv;
                io.have |= DFT_IO_COUNT;
            }
            break;
        case 6:
            if (KEY_IS(key, "module") && val.p && !is_int)
                l->a_module = val;
            break;
        case 10:
            if (KEY_IS(key, "image_size") && is_int) {
                io.image_size = iv;
                io.have |= DFT_IO_IMAGE_SIZE;
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
    if (rc < 0)
        return -1;
    if (io.have && dft_io_bytes(l->cat, l->name, &io, &l->io_bytes))
        l->have |= DFT_HAVE_IO;
    return 0;
}

static int int_field(pstate *s, int64_t *v, unsigned bit, dft_line *l, const char *why)
{
    dft_sv t;
    int is_int = 0;
    ws(s);
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        /* a value of another type: keep the line, leave the field out */
        if (s->mode == DFT_PARSE_STRICT)
            return fail(s, why);
        return skip_value(s, 1);
    }
    if (number(s, v, &is_int, &t) < 0)
        return -1;
    if (!is_int && s->mode == DFT_PARSE_STRICT)
        return fail(s, why);
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
static int general(pstate *s, dft_line *l)
{
    const char *args_at = NULL;
    ws(s);
    if (s->p >= s->end || *s->p != '{')
        return fail(s, "not a JSON object");
    s->p++; /* "{}" too goes on to the check of what follows it */
    dft_sv key;
    dft_members it;
    dft_members_start(&it, s->p, s->end, s->mode);
    int more;
    while ((more = next_member(s, &it, &key, 0)) == 1) {
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
            ws(s);
            if (s->p < s->end && *s->p == '"')
                rc = string(s, key.n == 4 ? &l->name : &l->cat);
            else
                rc = s->mode == DFT_PARSE_STRICT ? fail(s, "name/cat is not a string")
                                                 : skip_value(s, 1);
        } else if (KEY_IS(key, "ph")) {
            rc = token(s, &val, &iv, &is_int);
            if (rc == 0) {
                l->ph = ph_letter(val, is_int, iv);
                if (is_int)
                    l->have |= DFT_HAVE_NUMERIC_PH;
            }
        } else if (KEY_IS(key, "args")) {
            /* args needs the name and cat for its byte rule: parsed after the rest */
            ws(s);
            args_at = s->p;
            rc = skip_value(s, 1);
        } else
            rc = skip_value(s, 1);
        if (rc < 0)
            return -1;
    }
    if (more < 0)
        return -1;
    ws(s);
    if (s->p != s->end)
        return fail(s, "text after the object");
    if (args_at) {
        const char *end = s->p;
        s->p = args_at;
        if (args_object(s, l) < 0)
            return -1;
        s->p = end;
    }
    return 0;
}

/* Fast path helpers: a literal key token, then an integer or a string. */
#define LIT(s, lit) ((size_t)((s)->end - (s)->p) >= sizeof(lit) - 1 && \
                     memcmp((s)->p, lit, sizeof(lit) - 1) == 0 && ((s)->p += sizeof(lit) - 1, 1))

static int fast_str(pstate *s, dft_sv *out)
{
    const char *b = s->p;
    const char *q = memchr(b, '"', (size_t)(s->end - b));
    if (!q || q + 1 >= s->end || q[1] != ',' || memchr(b, '\\', (size_t)(q - b)))
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
static int fast(pstate *s, dft_line *l)
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
        if (args_object(s, l) < 0)
            return -1;
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

static int utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            cp = c & 0x07;
        } else
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (p[i + j] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + j] & 0x3f);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += k + 1;
    }
    return 1;
}

int dft_line_parse(const char *text, size_t n, dft_parse_mode mode, dft_line *out,
                   const char **why)
{
    /* tolerate a trailing comma or CR (JSON-array style files) */
    while (n > 0 && (text[n - 1] == '\r' || text[n - 1] == ',' || text[n - 1] == ' '))
        n--;
    pstate s = {text, text + n, mode, NULL};
    memset(out, 0, sizeof *out);
    out->ph = '?';
    if (fast(&s, out) == 0)
        goto ok;
    s.p = text;
    s.why = NULL;
    memset(out, 0, sizeof *out);
    out->ph = '?';
    if (general(&s, out) < 0) {
        *why = s.why ? s.why : "not JSON";
        return -1;
    }
ok:
    if (mode == DFT_PARSE_STRICT && !utf8_valid((const unsigned char *)text, n)) {
        *why = "invalid UTF-8";
        return -1;
    }
    if (!out->name.p || out->ph == '?') {
        *why = "a JSON object but not a trace event (no \"name\" or \"ph\")";
        return -1;
    }
    return 0;
}

int dft_hash_token(dft_sv t, uint64_t *out)
{
    uint64_t v = 0;
    if (t.n == 16) {
        for (size_t i = 0; i < 16; i++) {
            char c = t.p[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                goto decimal;
            v = v << 4 | (uint64_t)d;
        }
        *out = v;
        return 0;
    }
decimal:
    if (t.n == 0 || t.n > 20)
        return -1;
    v = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (t.p[i] < '0' || t.p[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(t.p[i] - '0');
    }
    *out = v ^ 0x8000000000000000ull; /* keep decimal and hex forms apart */
    return 0;
}

int dft_json_scan_string_as(const char **p, const char *end, dft_sv *body, dft_parse_mode mode,
                            const char **why)
{
    pstate s = {*p, end, mode, NULL};
    if (s.p >= end || *s.p != '"' || string(&s, body) < 0) {
        if (why)
            *why = s.why;
        return -1;
    }
    *p = s.p;
    return 0;
}

int dft_json_scan_string(const char **p, const char *end, dft_sv *body)
{
    return dft_json_scan_string_as(p, end, body, DFT_PARSE_LENIENT, NULL);
}

int dft_json_scan_value(const char **p, const char *end)
{
    pstate s = {*p, end, DFT_PARSE_LENIENT, NULL};
    if (skip_value(&s, 1) < 0)
        return -1;
    *p = s.p;
    return 0;
}
