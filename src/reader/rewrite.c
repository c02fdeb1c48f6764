/* reader/rewrite.c: _core._rewrite_file(), the per-file step of
 * `dftracer merge` and `dftracer convert`.
 *
 * Pass 1 collects the file's hash definitions (HH/FH/SH, anywhere in the
 * file).  Pass 2 writes every other event back out as strict JSON: hash
 * arguments replaced by their strings (hhash -> host, fhash -> file,
 * cmd_hash -> cmd, exec_hash -> exec, x_hash -> x, cwd stays cwd), the
 * process renumbered, ids and p_idx renumbered as (id + 1) * nfiles + index
 * so they stay unique across the merged files, and the older tools'
 * unescaped strings escaped, and with ts_offset every `ts` moved by that many
 * microseconds (merge's clock alignment).  dftracer 2.x's lines get dftracer's shape: a
 * string "ph" for its numeric one, and an id for its metadata, which has
 * none.  Output goes to `part` as gzip members of about 1 MiB.  Memory: one
 * member, and the hash definitions' strings, packed one after another in one
 * buffer (a definition costs its string and about 40 bytes of map, never a
 * block of its own).  Runs without the GIL except to build the result. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "format/json.h"
#include "reader/reader.h"
#include "reader/tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MEMBER_BYTES (1u << 20)

typedef struct rewriter {
    dft_u64map names; /* hash -> offset + 1 in strs of its JSON string */
    dft_sbuf strs;    /* the strings, with quotes, each ending in a NUL */
    int64_t old_pid, new_pid, nfiles, index;
    int64_t ts_shift; /* added to every ts: merge's clock alignment */
    int chrome;
    dft_sbuf buf;
    FILE *out;
    uint64_t events;
    uint64_t no_id; /* dftracer 2.x events without an id so far */
    dft_rd_bad bad;
    char err[256];
} rewriter;

/* ---- JSON output ------------------------------------------------------- */

static int utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = *p;
    int k = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
    if (k < 0 || end - p <= k)
        return -1;
    uint32_t cp = c & (0x3f >> k);
    for (int j = 1; j <= k; j++) {
        if ((p[j] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (p[j] & 0x3f);
    }
    if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
        return -1;
    return k + 1;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The length of a valid JSON escape at p (a backslash), or 0. */
static int escape_len(const unsigned char *p, const unsigned char *end)
{
    char n = p + 1 < end ? (char)p[1] : 0;
    if (n && strchr("\"\\/bfnrt", n))
        return 2;
    if (n == 'u' && end - p >= 6 && is_hex((char)p[2]) && is_hex((char)p[3]) &&
        is_hex((char)p[4]) && is_hex((char)p[5]))
        return 6;
    return 0;
}

/* A string body as read (possibly the older tools' unescaped text) written
 * as a valid JSON string: escapes kept, quotes inside escaped, control
 * characters as \u00XX, invalid UTF-8 as U+FFFD.  A body holding a backslash
 * that starts no valid escape was written unescaped (C:\data\file): all its
 * backslashes are then literal. */
static void put_string(dft_sbuf *b, dft_sv v)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)v.p, *end = p + v.n;
    int raw = 0;
    for (const unsigned char *q = memchr(p, '\\', v.n); q && q < end;
         q = memchr(q, '\\', (size_t)(end - q))) {
        int k = escape_len(q, end);
        if (!k) {
            raw = 1;
            break;
        }
        q += k;
    }
    DFT_SBUF_LIT(b, "\"");
    while (p < end) {
        const unsigned char *run = p;
        while (p < end && *p >= 0x20 && *p < 0x7f && *p != '\\' && *p != '"')
            p++;
        dft_sbuf_put(b, (const char *)run, (size_t)(p - run));
        if (p >= end)
            break;
        unsigned char c = *p;
        if (c == '\\') {
            int k = raw ? 0 : escape_len(p, end);
            if (k) {
                dft_sbuf_put(b, (const char *)p, (size_t)k);
                p += k;
            } else {
                DFT_SBUF_LIT(b, "\\\\");
                p++;
            }
        } else if (c == '"') {
            DFT_SBUF_LIT(b, "\\\"");
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            dft_sbuf_put(b, u, 6);
            p++;
        } else {
            int k = utf8_len(p, end);
            if (k < 0) {
                DFT_SBUF_LIT(b, "\xef\xbf\xbd");
                p++;
            } else {
                dft_sbuf_put(b, (const char *)p, (size_t)k);
                p += k;
            }
        }
    }
    DFT_SBUF_LIT(b, "\"");
}

static void ws(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
}

static int is_int_token(const char *p, const char *end, int64_t *v)
{
    const char *q = p;
    if (q < end && *q == '-')
        q++;
    const char *d = q;
    int64_t x = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - d < 18)
        x = x * 10 + (*q++ - '0');
    if (q == d || (q < end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9'))))
        return 0;
    *v = *p == '-' ? -x : x;
    return (int)(q - p);
}

/* Any value, re-emitted with strings made valid. */
static int put_value(dft_sbuf *b, const char **p, const char *end, int depth)
{
    ws(p, end);
    if (*p >= end || depth > 64)
        return -1;
    if (**p == '"') {
        dft_sv s;
        if (dft_json_scan_string(p, end, &s) < 0)
            return -1;
        put_string(b, s);
        return 0;
    }
    if (**p == '{' || **p == '[') {
        char close = **p == '{' ? '}' : ']';
        dft_sbuf_put(b, *p, 1);
        (*p)++;
        ws(p, end);
        if (*p < end && **p == close) {
            dft_sbuf_put(b, &close, 1);
            (*p)++;
            return 0;
        }
        for (;;) {
            if (close == '}') {
                ws(p, end);
                dft_sv k;
                if (dft_json_scan_string(p, end, &k) < 0)
                    return -1;
                put_string(b, k);
                ws(p, end);
                if (*p >= end || **p != ':')
                    return -1;
                (*p)++;
                DFT_SBUF_LIT(b, ":");
            }
            if (put_value(b, p, end, depth + 1) < 0)
                return -1;
            ws(p, end);
            if (*p < end && **p == ',') {
                DFT_SBUF_LIT(b, ",");
                (*p)++;
                continue;
            }
            if (*p < end && **p == close) {
                dft_sbuf_put(b, &close, 1);
                (*p)++;
                return 0;
            }
            return -1;
        }
    }
    const char *start = *p;
    if (dft_json_scan_value(p, end) < 0)
        return -1;
    dft_sbuf_put(b, start, (size_t)(*p - start));
    return 0;
}

static int key_is(dft_sv k, const char *lit)
{
    size_t n = strlen(lit);
    return k.n == n && memcmp(k.p, lit, n) == 0;
}

/* The key a resolved hash argument gets (built in buf when it is new). */
static dft_sv resolved_key(dft_sv k, char *buf, size_t cap)
{
    static const struct {
        const char *from, *to;
    } renames[] = {{"hhash", "host"}, {"fhash", "file"}, {"cmd_hash", "cmd"}, {"exec_hash", "exec"}};
    for (size_t i = 0; i < sizeof renames / sizeof *renames; i++)
        if (key_is(k, renames[i].from))
            return (dft_sv){renames[i].to, strlen(renames[i].to)};
    if (k.n > 5 && memcmp(k.p + k.n - 5, "_hash", 5) == 0)
        return (dft_sv){k.p, k.n - 5};
    /* a second file of one event (rename's new_fhash, sendfile's out_fhash) */
    if (k.n > 6 && memcmp(k.p + k.n - 6, "_fhash", 6) == 0 && k.n - 1 <= cap) {
        size_t n = k.n - 5; /* keeps the '_' */
        memcpy(buf, k.p, n);
        memcpy(buf + n, "file", 4);
        return (dft_sv){buf, n + 4};
    }
    return k;
}

static int64_t new_id(const rewriter *w, int64_t id)
{
    return (id + 1) * w->nfiles + w->index;
}

static int put_args(rewriter *w, const char **p, const char *end)
{
    dft_sbuf *b = &w->buf;
    dft_members it;
    if (dft_members_open(&it, *p, end) < 0) {
        ws(p, end);
        return put_value(b, p, end, 1);
    }
    DFT_SBUF_LIT(b, "{");
    dft_sv k;
    int rc;
    for (int first = 1; (rc = dft_members_next(&it, &k)) == 1; first = 0) {
        *p = it.p;
        if (!first)
            DFT_SBUF_LIT(b, ",");
        int done = 0;
        int64_t iv;
        int n;
        if ((k.n >= 4 && memcmp(k.p + k.n - 4, "hash", 4) == 0) || key_is(k, "cwd")) {
            const char *save = *p;
            dft_sv tok = {NULL, 0};
            if (*p < end && **p == '"') {
                if (dft_json_scan_string(p, end, &tok) < 0)
                    return -1;
            } else if ((n = is_int_token(*p, end, &iv)) > 0) {
                tok = (dft_sv){*p, (size_t)n};
                *p += n;
            }
            uint64_t h;
            size_t slot;
            if (tok.p && dft_hash_token(tok, &h) == 0 &&
                dft_u64map_get(&w->names, h, 0, &slot) == 1) {
                char key[256];
                put_string(b, resolved_key(k, key, sizeof key));
                DFT_SBUF_LIT(b, ":");
                const char *s = w->strs.data + ((uintptr_t)w->names.vals[slot] - 1);
                dft_sbuf_put(b, s, strlen(s));
                done = 1;
            } else
                *p = save;
        } else if (key_is(k, "p_idx") && (n = is_int_token(*p, end, &iv)) > 0 && iv >= 0) {
            DFT_SBUF_LIT(b, "\"p_idx\":");
            dft_json_int(b, new_id(w, iv));
            *p += n;
            done = 1;
        }
        if (!done) {
            put_string(b, k);
            DFT_SBUF_LIT(b, ":");
            if (put_value(b, p, end, 1) < 0)
                return -1;
        }
        it.p = *p;
    }
    if (rc < 0)
        return -1;
    *p = it.p;
    DFT_SBUF_LIT(b, "}");
    return 0;
}

/* Ids given to the events that have none (dftracer 2.x's metadata): above
 * any id a tracer writes, renumbered like the others. */
#define NO_ID_BASE ((int64_t)1 << 40)

/* One event line; returns 0, or -1 when it does not parse (nothing kept).
 * add_id >= 0: the line has no id; it gets this one. */
static int put_event(rewriter *w, const char *p, const char *end, int64_t add_id)
{
    dft_sbuf *b = &w->buf;
    size_t mark = b->len;
    if (w->chrome)
        DFT_SBUF_LIT(b, ",\n");
    dft_members it;
    if (dft_members_open(&it, p, end) < 0)
        goto bad;
    DFT_SBUF_LIT(b, "{");
    int first = 1;
    if (add_id >= 0) {
        DFT_SBUF_LIT(b, "\"id\":");
        dft_json_int(b, new_id(w, add_id));
        first = 0;
    }
    dft_sv k;
    int rc;
    for (; (rc = dft_members_next(&it, &k)) == 1; first = 0) {
        p = it.p;
        if (!first)
            DFT_SBUF_LIT(b, ",");
        put_string(b, k);
        DFT_SBUF_LIT(b, ":");
        int64_t iv;
        int n;
        if (key_is(k, "id") && (n = is_int_token(p, end, &iv)) > 0) {
            dft_json_int(b, new_id(w, iv));
            p += n;
        } else if (key_is(k, "ts") && w->ts_shift && (n = is_int_token(p, end, &iv)) > 0) {
            dft_json_int(b, iv + w->ts_shift);
            p += n;
        } else if (key_is(k, "pid") && (n = is_int_token(p, end, &iv)) > 0) {
            dft_json_int(b, iv == w->old_pid ? w->new_pid : iv);
            p += n;
        } else if (key_is(k, "ph") && (n = is_int_token(p, end, &iv)) > 0) {
            /* dftracer 2.x's numeric phases */
            const char *ph = iv == 2 ? "\"C\"" : iv == 4 ? "\"M\"" : "\"X\"";
            dft_sbuf_put(b, ph, 3);
            p += n;
        } else if (key_is(k, "args")) {
            if (put_args(w, &p, end) < 0)
                goto bad;
        } else if (put_value(b, &p, end, 1) < 0)
            goto bad;
        it.p = p;
    }
    if (rc < 0)
        goto bad;
    DFT_SBUF_LIT(b, "}");
    if (!w->chrome)
        DFT_SBUF_LIT(b, "\n");
    return 0;
bad:
    b->len = mark;
    return -1;
}

/* Deflates the buffer as one gzip member and appends it to the part file. */
static int flush_member(rewriter *w)
{
    if (w->buf.len == 0)
        return 0;
    if (w->buf.failed) {
        snprintf(w->err, sizeof w->err, "out of memory");
        return -1;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        snprintf(w->err, sizeof w->err, "deflateInit2 failed");
        return -1;
    }
    uLong bound = deflateBound(&zs, (uLong)w->buf.len) + 32;
    unsigned char *gz = malloc(bound);
    if (!gz) {
        deflateEnd(&zs);
        snprintf(w->err, sizeof w->err, "out of memory");
        return -1;
    }
    zs.next_in = (Bytef *)w->buf.data;
    zs.avail_in = (uInt)w->buf.len;
    zs.next_out = gz;
    zs.avail_out = (uInt)bound;
    int rc = deflate(&zs, Z_FINISH);
    size_t n = bound - zs.avail_out;
    deflateEnd(&zs);
    if (rc != Z_STREAM_END || fwrite(gz, 1, n, w->out) != n) {
        snprintf(w->err, sizeof w->err, "%s", rc != Z_STREAM_END ? "deflate failed" : strerror(errno));
        free(gz);
        return -1;
    }
    free(gz);
    w->buf.len = 0;
    return 0;
}

#define NAME_IS(l, lit) ((l).name.n == sizeof(lit) - 1 && memcmp((l).name.p, lit, sizeof(lit) - 1) == 0)

static int hash_def(const dft_line *l)
{
    return l->ph == 'M' && (NAME_IS(*l, "HH") || NAME_IS(*l, "FH") || NAME_IS(*l, "SH"));
}

/* Pass 1.  Returns the reader status, or -1 (w->err set). */
static int collect_names(rewriter *w, dft_rd *r)
{
    const char *text, *why;
    size_t n, slot;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next(r, &text, &n)) == DFT_RD_OK) {
        /* HH, FH and SH all hold an 'H' */
        if (dft_line_is_bracket(text, n) || !memchr(text, 'H', n) ||
            dft_line_parse(text, n, DFT_PARSE_LENIENT, &l, &why) < 0 || !hash_def(&l))
            continue;
        uint64_t h;
        if (!l.a_name.p || dft_hash_token(l.a_value, &h) < 0)
            continue;
        int f = dft_u64map_get(&w->names, h, 1, &slot);
        if (f < 0)
            goto oom;
        if (f)
            continue;
        size_t off = w->strs.len;
        put_string(&w->strs, l.a_name);
        dft_sbuf_put(&w->strs, "", 1); /* its NUL */
        if (w->strs.failed)
            goto oom;
        w->names.vals[slot] = (void *)(uintptr_t)(off + 1);
    }
    return (int)st;
oom:
    snprintf(w->err, sizeof w->err, "out of memory");
    return -1;
}

/* Pass 2. */
static int write_events(rewriter *w, dft_rd *r)
{
    const char *text;
    size_t n;
    dft_line l;
    dft_rd_status st;
    while ((st = dft_rd_next_parsed(r, &text, &n, &l, &w->bad)) == DFT_RD_OK) {
        if (hash_def(&l) || (l.ph == 'M' && NAME_IS(l, "process_name")))
            continue;
        int64_t add_id = (l.have & DFT_HAVE_ID) ? -1 : NO_ID_BASE + (int64_t)w->no_id++;
        if (put_event(w, text, text + n, add_id) < 0) {
            dft_rd_bad_line(&w->bad, r, "not JSON");
            continue;
        }
        w->events++;
        if (w->buf.len >= MEMBER_BYTES && flush_member(w) < 0)
            return -1;
    }
    if (flush_member(w) < 0)
        return -1;
    return (int)st;
}

PyObject *dft_tools_rewrite_file(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *kwlist[] = {"path",   "part",  "fmt",       "old_pid", "new_pid",
                             "nfiles", "index", "ts_offset", NULL};
    PyObject *path, *part, *pb = NULL, *partb = NULL;
    const char *fmt;
    long long old_pid, new_pid, nfiles, index, ts_offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOsLLLL|L:_rewrite_file", kwlist, &path,
                                     &part, &fmt, &old_pid, &new_pid, &nfiles, &index, &ts_offset))
        return NULL;
    if (strcmp(fmt, "pfw") != 0 && strcmp(fmt, "chrome") != 0)
        return PyErr_Format(PyExc_ValueError, "fmt must be 'pfw' or 'chrome', not %R",
                            PyTuple_GET_ITEM(args, 2));
    if (nfiles < 1 || index < 0 || index >= nfiles)
        return PyErr_Format(PyExc_ValueError, "index must be in [0, nfiles)");
    if (!PyUnicode_FSConverter(path, &pb))
        return NULL;
    if (!PyUnicode_FSConverter(part, &partb)) {
        Py_DECREF(pb);
        return NULL;
    }
    rewriter w;
    memset(&w, 0, sizeof w);
    w.old_pid = old_pid;
    w.new_pid = new_pid;
    w.nfiles = nfiles;
    w.index = index;
    w.ts_shift = ts_offset;
    w.chrome = fmt[0] == 'c';
    dft_rd r1, r2;
    memset(&r2, 0, sizeof r2);
    int st = 0, open_err = 0, out_err = 0;
    const dft_rd *open_rd = NULL; /* the reader whose open failed */
    Py_BEGIN_ALLOW_THREADS
    if (dft_rd_open(&r1, PyBytes_AS_STRING(pb)) < 0) {
        open_err = errno;
        open_rd = &r1;
    } else {
        st = collect_names(&w, &r1);
        dft_rd_close(&r1);
        if (st >= 0 && dft_rd_open(&r2, PyBytes_AS_STRING(pb)) < 0) {
            open_err = errno;
            open_rd = &r2;
        } else if (st >= 0) {
            w.out = fopen(PyBytes_AS_STRING(partb), "wb");
            if (!w.out)
                out_err = errno;
            else {
                st = write_events(&w, &r2);
                if (fclose(w.out) != 0 && st >= 0) {
                    snprintf(w.err, sizeof w.err, "%s", strerror(errno));
                    st = -1;
                }
            }
            dft_rd_close(&r2);
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (open_err) {
        dft_rd_raise_open_error(path, open_rd, open_err);
    } else if (out_err) {
        errno = out_err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, part);
    } else if (st < 0) {
        PyErr_Format(PyExc_OSError, "%s: %s", PyBytes_AS_STRING(partb), w.err);
    } else {
        const char *status = st == DFT_RD_EOF ? "ok" : st == DFT_RD_TRUNCATED ? "truncated"
                                                   : st == DFT_RD_CORRUPT     ? "corrupt"
                                                                              : "error";
        result = Py_BuildValue("{s:O,s:s,s:s,s:K,s:K,s:K,s:K}", "path", path, "status",
                               status, "message", st == DFT_RD_EOF ? "" : r2.err, "events",
                               (unsigned long long)w.events, "members",
                               (unsigned long long)r2.members, "long_lines",
                               (unsigned long long)r2.long_lines, "first_long_line",
                               (unsigned long long)r2.first_long_line);
        if (result && dft_rd_bad_add_to(result, &w.bad) < 0)
            Py_CLEAR(result);
    }
    dft_u64map_free(&w.names, 0);
    dft_sbuf_free(&w.strs);
    dft_sbuf_free(&w.buf);
    Py_DECREF(pb);
    Py_DECREF(partb);
    return result;
}
