/* reader/scan.c: the JSON grammar under the line parser (reader/parse.c):
 * strings (lenient: the older tools' unescaped quotes; strict: RFC 8259),
 * numbers, any value skipped, UTF-8 checked; the one walk over a JSON
 * object's members (dft_members_*: whitespace anywhere, keys read as strings
 * in the walk's mode, a failure says why; the caller takes each value
 * itself: skips it, scans it, or copies it changed, so the parser, the
 * passes' args readers and the rewriter share it); and the scanners the
 * passes call on a value (dft_json_scan_*, dft_hash_token).  The parser's fast path needs none of it but for what
 * it hands over.  Pure; no GIL. */
#include "reader/scan.h"

#include <stdlib.h>
#include <string.h>

int dft_scan_fail(dft_pstate *s, const char *why)
{
    if (!s->why)
        s->why = why;
    return -1;
}

/* After a member of an array: 1 when a ',' follows (another member), 0
 * after the closing bracket, -1 (why) when neither does. */
static int after_member(dft_pstate *s, char close, const char *why)
{
    dft_ws(s);
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        return 1;
    }
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    return dft_scan_fail(s, why);
}

/* The next member of the object walked by *it (reader/members.c, started in
 * s->mode), from s->p: 1 with its key and s->p at its value; 0 at the
 * object's end; -1 with the reason (in_args: the args object's). */
int dft_scan_next_member(dft_pstate *s, dft_members *it, dft_sv *key, int in_args)
{
    static const char *const why[2][4] = {
        {"", "bad key", "missing ':'", "missing ',' or '}'"},
        {"", "bad key in args", "missing ':' in args", "missing ',' or '}' in args"},
    };
    it->p = s->p;
    int rc = dft_members_next(it, key);
    s->p = it->p;
    if (rc < 0)
        return dft_scan_fail(s, it->why ? it->why : why[in_args][it->fault]);
    return rc;
}

/* Strict checks of a string body: escapes and control characters. */
static int check_string_body(dft_pstate *s, const char *b, const char *e)
{
    for (const char *q = b; q < e; q++) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20)
            return dft_scan_fail(s, "control character inside a string");
        if (c == '\\') {
            q++;
            if (q >= e)
                return dft_scan_fail(s, "bad escape in a string");
            switch (*q) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                break;
            case 'u':
                for (int k = 1; k <= 4; k++) {
                    char h = q + k < e ? q[k] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
                          (h >= 'A' && h <= 'F')))
                        return dft_scan_fail(s, "bad \\u escape in a string");
                }
                q += 4;
                break;
            default:
                return dft_scan_fail(s, "bad escape in a string");
            }
        }
    }
    return 0;
}

/* A string at s->p (which is '"'): its body in *out. */
int dft_scan_string(dft_pstate *s, dft_sv *out)
{
    const char *b = s->p + 1, *q = b;
    for (;;) {
        q = memchr(q, '"', (size_t)(s->end - q));
        if (!q)
            return dft_scan_fail(s, "unterminated string");
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
int dft_scan_number(dft_pstate *s, int64_t *iv, int *is_int, dft_sv *text)
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
        return dft_scan_fail(s, "bad value");
    if (s->mode == DFT_PARSE_STRICT && *d == '0' && q - d > 1)
        return dft_scan_fail(s, "number with a leading zero");
    int frac = 0;
    if (q < s->end && *q == '.') {
        frac = 1;
        const char *f = ++q;
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
        if (q == f)
            return dft_scan_fail(s, "bad number");
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
            return dft_scan_fail(s, "bad number");
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

static int literal(dft_pstate *s, const char *lit, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return dft_scan_fail(s, "bad value");
    s->p += n;
    return 0;
}

int dft_scan_skip(dft_pstate *s, int depth)
{
    if (depth > 64)
        return dft_scan_fail(s, "nested too deeply");
    dft_ws(s);
    if (s->p >= s->end)
        return dft_scan_fail(s, "line ends inside a value");
    dft_sv sv;
    int64_t iv;
    int is_int;
    switch (*s->p) {
    case '"':
        return dft_scan_string(s, &sv);
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
        while ((rc = dft_scan_next_member(s, &it, &sv, 0)) == 1)
            if (dft_scan_skip(s, depth + 1) < 0)
                return -1;
        return rc;
    }
    case '[':
        s->p++;
        dft_ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 0;
        }
        for (;;) {
            if (dft_scan_skip(s, depth + 1) < 0)
                return -1;
            int more = after_member(s, ']', "missing ',' or ']'");
            if (more <= 0)
                return more;
        }
    default:
        return dft_scan_number(s, &iv, &is_int, &sv);
    }
}

int dft_utf8_valid(const unsigned char *p, size_t n)
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
    dft_pstate s = {*p, end, mode, NULL};
    if (s.p >= end || *s.p != '"' || dft_scan_string(&s, body) < 0) {
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
    dft_pstate s = {*p, end, DFT_PARSE_LENIENT, NULL};
    if (dft_scan_skip(&s, 1) < 0)
        return -1;
    *p = s.p;
    return 0;
}

/* ---- an object's members ------------------------------------------------ */

static void ws_at(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r' || **p == '\n'))
        (*p)++;
}

int dft_members_open(dft_members *it, const char *p, const char *end)
{
    ws_at(&p, end);
    if (p >= end || *p != '{')
        return -1;
    dft_members_start(it, p + 1, end, DFT_PARSE_LENIENT);
    return 0;
}

void dft_members_start(dft_members *it, const char *p, const char *end, dft_parse_mode mode)
{
    it->p = p;
    it->end = end;
    it->first = 1;
    it->mode = mode;
    it->fault = DFT_MEMBERS_OK;
    it->why = NULL;
}

static int fault(dft_members *it, dft_members_fault f)
{
    it->fault = f;
    return -1;
}

int dft_members_next(dft_members *it, dft_sv *key)
{
    ws_at(&it->p, it->end);
    if (it->first) {
        it->first = 0;
        if (it->p < it->end && *it->p == '}') {
            it->p++;
            return 0;
        }
    } else if (it->p < it->end && *it->p == ',') {
        it->p++;
        ws_at(&it->p, it->end);
    } else if (it->p < it->end && *it->p == '}') {
        it->p++;
        return 0;
    } else {
        return fault(it, DFT_MEMBERS_NO_SEP);
    }
    if (it->p >= it->end || *it->p != '"' ||
        dft_json_scan_string_as(&it->p, it->end, key, it->mode, &it->why) < 0)
        return fault(it, DFT_MEMBERS_BAD_KEY);
    ws_at(&it->p, it->end);
    if (it->p >= it->end || *it->p != ':')
        return fault(it, DFT_MEMBERS_NO_COLON);
    it->p++;
    ws_at(&it->p, it->end);
    return 1;
}
