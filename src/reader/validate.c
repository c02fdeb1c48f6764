/* reader/validate.c: _core._validate_file(path) -> dict.
 *
 * Checks a trace against docs/trace-format.md ("Valid files") in one
 * streaming pass: every gzip member decodes, the first one holds "[" and a
 * whole event line (the member layout rule that lets Perfetto recognise the
 * file), every line is strict JSON with the keys of its kind, ids are unique,
 * the header metadata (HH, process_name, start) is present once, every hash
 * used is defined, and end (when present) is last and counts the lines
 * before it.  A merged file (no hash left: `dftracer merge`) is checked per
 * process instead: one process_name and one start per pid, and at most one
 * end, its last event.
 * The hashes used but not defined in the file are handed back
 * (undefined_hashes) with who wrote it (host, pid, ppid, the start's ts):
 * whether an ancestor's file defines them, as dftracer 2.x's fork children
 * need, is decided across files (dftracer/tools/validate.py, with
 * reader/validate_parent.c reading the ancestors).
 * A file written by dftracer 2.x (pydftracer 2.0.6 over dftracer 2.2.0:
 * numeric "ph", no "[" line, metadata without ids, strings not escaped) is
 * recognised by its first event line and checked against that format's
 * rules.  Every problem names the rule it breaks (docs/trace-format.md,
 * "Valid files").
 * A torn last member is reported as a truncated tail with the number of
 * readable events.  Memory: the set of ids seen (reader/idset.c: a bit per id
 * when they are dense, at most about 100 bytes per id when they are not) and
 * sets of hash values, never the events themselves. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/identity.h"
#include "reader/reader.h"
#include "reader/tools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_PROBLEMS 20

/* The formats told apart (docs/trace-format.md, "Valid files"). */
enum format { FMT_UNKNOWN, FMT_DFTRACER, FMT_REFERENCE };

/* The rules, by number, as docs/trace-format.md lists them. */
static const char *const rule_names[] = {
    NULL,
    "one JSON event per line",
    "unique ids >= 1",
    "one HH, process_name and start",
    "every hash defined once",
    "end last, counting the events before it",
    "'[' and an event line in the first gzip member",
};

/* What one process (pid) of the file has: the rules of a merged file. */
typedef struct vproc {
    int64_t pid;
    uint64_t process_name, start, end, after_end;
} vproc;

typedef struct vstate {
    dft_idset ids;
    dft_u64map defined, used, procs;
    dft_ident who;    /* host, pid, ppid: to find a fork child's parent */
    int64_t start_ts; /* the first start event's ts, or -1 */
    uint64_t lines, events, bad_lines, dup_ids, hh, process_name, start, end;
    uint64_t id_events; /* dftracer 2.x: events with an id (not metadata) before end */
    uint64_t events_before_end, lines_after_end;
    int64_t num_events;
    int end_signal; /* the signal the last `end` names (0: none) */
    int header_seen, oom;
    enum format format;
    uint64_t numeric_ph_lines, string_ph_lines;
    char problems[MAX_PROBLEMS][200];
    unsigned nproblems;
    uint64_t problem_count;
} vstate;

/* Records a problem breaking rule (1..6), its message followed by the rule. */
static void problem(vstate *v, int rule, const char *fmt, ...)
{
    v->problem_count++;
    if (v->nproblems >= MAX_PROBLEMS)
        return;
    char *out = v->problems[v->nproblems++];
    size_t cap = sizeof v->problems[0];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " (rule %d: %s)", rule, rule_names[rule]);
}

#define NAME_IS(l, lit) ((l).name.n == sizeof(lit) - 1 && memcmp((l).name.p, lit, sizeof(lit) - 1) == 0)

/* Reports the lines the reader skipped as too long since the last call. */
static void long_lines(vstate *v, const dft_rd *r, uint64_t *seen)
{
    if (r->long_lines == *seen)
        return;
    uint64_t k = r->long_lines - *seen;
    *seen = r->long_lines;
    v->bad_lines += k;
    if (k == 1)
        problem(v, 1, "line %llu: longer than the %s line limit; skipped",
                (unsigned long long)r->last_long_line, DFT_RD_LINE_MAX_TEXT);
    else {
        problem(v, 1, "%llu lines up to line %llu: longer than the %s line limit; skipped",
                (unsigned long long)k, (unsigned long long)r->last_long_line,
                DFT_RD_LINE_MAX_TEXT);
        v->problem_count += k - 1;
    }
}

/* Runs without the GIL. */
static int validate(dft_rd *r, vstate *v)
{
    const char *text;
    size_t n;
    dft_rd_status st;
    dft_line l;
    size_t slot;
    uint64_t long_seen = 0;
    while ((st = dft_rd_next(r, &text, &n)) == DFT_RD_OK) {
        long_lines(v, r, &long_seen);
        v->lines = r->line_no;
        if (v->lines == 1 && n == 1 && text[0] == '[')
            v->header_seen = 1;
        if (dft_line_is_bracket(text, n))
            continue;
        const char *why, *lenient_why;
        if (dft_line_parse(text, n, DFT_PARSE_STRICT, &l, &why) < 0) {
            /* dftracer 2.x writes strings as they are, unescaped: the
             * readers take them as the older dialect (docs/cli.md) */
            int ok = v->format != FMT_DFTRACER &&
                     dft_line_parse(text, n, DFT_PARSE_LENIENT, &l, &lenient_why) == 0 &&
                     (v->format == FMT_REFERENCE || (l.have & DFT_HAVE_NUMERIC_PH));
            if (!ok) {
                v->bad_lines++;
                problem(v, 1, "line %llu: %s", (unsigned long long)v->lines, why);
                continue;
            }
        }
        if (v->format == FMT_UNKNOWN) {
            /* the first event line tells the format */
            v->format = (l.have & DFT_HAVE_NUMERIC_PH) ? FMT_REFERENCE : FMT_DFTRACER;
            if (v->format == FMT_DFTRACER && !v->header_seen)
                problem(v, 1, "line 1: the file does not start with '['");
        }
        int ref = v->format == FMT_REFERENCE;
        if (l.have & DFT_HAVE_NUMERIC_PH)
            v->numeric_ph_lines++;
        else
            v->string_ph_lines++;
        if (ref != ((l.have & DFT_HAVE_NUMERIC_PH) != 0))
            problem(v, 1, "line %llu: a %s \"ph\" in a file whose first event has a %s one",
                    (unsigned long long)v->lines, ref ? "string" : "numeric",
                    ref ? "numeric" : "string");
        v->events++;
        dft_ident_line(&v->who, &l);
        /* dftracer 2.x: metadata has no id, and may follow end */
        int counted = !(ref && l.ph == 'M');
        if (v->end && counted)
            v->lines_after_end++;
        unsigned need = DFT_HAVE_PID | DFT_HAVE_TID | (counted ? DFT_HAVE_ID : 0);
        if (l.ph == 'X' || l.ph == 'i' || l.ph == 'C')
            need |= DFT_HAVE_TS;
        if (l.ph == 'X')
            need |= DFT_HAVE_DUR;
        if ((l.have & need) != need || !l.name.p || !l.cat.p || l.ph == '?')
            problem(v, 1, "line %llu: missing keys (%sname, cat, pid, tid, %sph)",
                    (unsigned long long)v->lines, counted ? "id, " : "",
                    l.ph == 'X' ? "ts, dur, " : l.ph == 'M' ? "" : "ts, ");
        if ((l.have & DFT_HAVE_DUR) && l.dur < 0)
            problem(v, 1, "line %llu: negative dur", (unsigned long long)v->lines);
        else if ((l.have & DFT_HAVE_DUR) && l.dur > DFT_DUR_MAX_US)
            problem(v, 1, "line %llu: dur %lld is longer than " DFT_DUR_MAX_TEXT,
                    (unsigned long long)v->lines, (long long)l.dur);
        else if ((l.have & DFT_HAVE_DUR) && !dft_dur_ok((l.have & DFT_HAVE_TS) ? l.ts : 0, l.dur))
            problem(v, 1, "line %llu: ts + dur is past the end of 64-bit time",
                    (unsigned long long)v->lines);
        if (l.have & DFT_HAVE_ID) {
            if (l.id < 1)
                problem(v, 2, "line %llu: id %lld is not >= 1", (unsigned long long)v->lines,
                        (long long)l.id);
            int seen = dft_idset_add(&v->ids, (uint64_t)l.id);
            if (seen < 0)
                return -1;
            if (seen && v->dup_ids++ < 5)
                problem(v, 2, "line %llu: duplicate id %lld", (unsigned long long)v->lines,
                        (long long)l.id);
            else if (seen)
                v->problem_count++;
        }
        vproc *pr = NULL;
        if (l.have & DFT_HAVE_PID) {
            int f = dft_u64map_get(&v->procs, (uint64_t)l.pid, 1, &slot);
            if (f < 0)
                return -1;
            if (!f && !(v->procs.vals[slot] = calloc(1, sizeof(vproc))))
                return -1;
            pr = v->procs.vals[slot];
            pr->pid = l.pid;
            if (pr->end)
                pr->after_end++;
        }
        int is_end = 0;
        if (l.ph == 'M') {
            if (NAME_IS(l, "HH") || NAME_IS(l, "FH") || NAME_IS(l, "SH")) {
                uint64_t h;
                if (dft_hash_token(l.a_value, &h) < 0 || !l.a_name.p) {
                    problem(v, 4, "line %llu: %.2s without a hash value and name",
                            (unsigned long long)v->lines, l.name.p);
                } else {
                    int f = dft_u64map_get(&v->defined, h, 1, &slot);
                    if (f < 0)
                        return -1;
                    if (f && !NAME_IS(l, "HH"))
                        problem(v, 4, "line %llu: %.2s %.*s defined twice",
                                (unsigned long long)v->lines, l.name.p, (int)l.a_value.n,
                                l.a_value.p);
                }
                if (NAME_IS(l, "HH"))
                    v->hh++;
            } else if (NAME_IS(l, "process_name")) {
                v->process_name++;
                if (pr)
                    pr->process_name++;
            }
        } else if (l.ph == 'X' && l.cat.n == 8 && memcmp(l.cat.p, "dftracer", 8) == 0) {
            if (NAME_IS(l, "start")) {
                if (!v->start++ && (l.have & DFT_HAVE_TS))
                    v->start_ts = l.ts;
                if (pr)
                    pr->start++;
            } else if (NAME_IS(l, "end")) {
                is_end = 1;
                v->end++;
                if (pr) {
                    pr->end++;
                    pr->after_end = 0;
                }
                v->events_before_end = ref ? v->id_events : v->events - 1;
                v->lines_after_end = 0;
                v->num_events = (l.have & DFT_HAVE_NUM_EVENTS) ? l.num_events : -1;
                v->end_signal = dft_end_signal(&l); /* a complete file all the same */
            }
        }
        if (counted && !is_end)
            v->id_events++;
        for (unsigned i = 0; i < l.nrefs; i++) {
            uint64_t h;
            if (dft_hash_token(l.refs[i], &h) == 0 && dft_u64map_get(&v->used, h, 1, &slot) < 0)
                return -1;
        }
    }
    long_lines(v, r, &long_seen);
    v->lines = r->line_no;
    return (int)st;
}

/* The member layout rule of docs/trace-format.md: a compressed file's first
 * gzip member starts with the "[" line and holds at least one whole line
 * after it.  Returns 1 when the rule holds or does not apply (an uncompressed
 * or empty file, or a first member that does not decode: the streaming pass
 * reports that), 0 when it is broken.  Reads only the start of the first
 * member.  Runs without the GIL. */
static int first_member_ok(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(fd); /* replaced by a FIFO or a device since the pass: never wait on it */
        return 1;
    }
    if (fd < 0)
        return 1;
    unsigned char in[16384];
    char out[16384];
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK) {
        close(fd);
        return 1;
    }
    int ok = 1, first = 1, newlines = 0, zr = Z_OK;
    size_t seen = 0; /* decompressed bytes so far */
    char head[2] = {0, 0};
    while (zr != Z_STREAM_END && newlines < 2) {
        ssize_t n = read(fd, in, sizeof in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (first) {
            first = 0;
            if (n < 2 || in[0] != 0x1f || in[1] != 0x8b)
                break; /* not gzip: the rule is about gzip members */
        }
        z.next_in = in;
        z.avail_in = (uInt)n;
        while (z.avail_in > 0 && zr != Z_STREAM_END && newlines < 2) {
            z.next_out = (Bytef *)out;
            z.avail_out = sizeof out;
            zr = inflate(&z, Z_NO_FLUSH);
            if (zr != Z_OK && zr != Z_STREAM_END) {
                inflateEnd(&z);
                close(fd);
                return 1;
            }
            size_t got = sizeof out - z.avail_out;
            for (size_t i = 0; i < got && newlines < 2; i++, seen++) {
                if (seen < 2)
                    head[seen] = out[i];
                if (out[i] == '\n')
                    newlines++;
            }
        }
    }
    if (!first && seen > 0)
        ok = head[0] == '[' && head[1] == '\n' && newlines >= 2;
    inflateEnd(&z);
    close(fd);
    return ok;
}

static const char *status_name(int st)
{
    return st == DFT_RD_EOF ? "ok" : st == DFT_RD_TRUNCATED ? "truncated"
                                 : st == DFT_RD_CORRUPT     ? "corrupt"
                                                            : "error";
}

PyObject *dft_tools_validate_file(PyObject *module, PyObject *arg)
{
    (void)module;
    PyObject *bytes;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    dft_rd r;
    vstate *v = calloc(1, sizeof *v);
    if (!v) {
        Py_DECREF(bytes);
        return PyErr_NoMemory();
    }
    dft_ident_init(&v->who);
    v->start_ts = -1;
    int rc = 0, open_rc, layout_ok = 1;
    Py_BEGIN_ALLOW_THREADS
    open_rc = dft_rd_open(&r, PyBytes_AS_STRING(bytes));
    if (open_rc == 0) {
        rc = validate(&r, v);
        layout_ok = first_member_ok(PyBytes_AS_STRING(bytes));
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    PyObject *result = NULL;
    if (open_rc < 0) {
        dft_rd_raise_open_error(arg, &r, errno);
        free(v);
        return NULL;
    }
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* File-level checks, once everything is read (docs/trace-format.md,
     * "Valid files"). */
    int torn = rc != DFT_RD_EOF;
    if (v->events > 0 && v->header_seen && !layout_ok && v->format == FMT_DFTRACER)
        problem(v, 6, "the first gzip member does not hold '[' and a whole event line: "
                   "Perfetto refuses this file (dftracer merge rewrites it)");
    int ref = v->format == FMT_REFERENCE;
    int merged = !ref && v->events > 0 && v->hh == 0 && v->defined.used == 0 &&
                 v->used.used == 0;
    if (merged) {
        /* A merged file: hashes resolved, the rules hold per process. */
        for (size_t i = 0; i < v->procs.cap; i++) {
            const vproc *pr = v->procs.keys[i] ? v->procs.vals[i] : NULL;
            if (!pr)
                continue;
            if (pr->process_name != 1)
                problem(v, 3, "pid %lld: %llu process_name events (expected 1)",
                        (long long)pr->pid, (unsigned long long)pr->process_name);
            if (pr->start != 1)
                problem(v, 3, "pid %lld: %llu start events (expected 1)", (long long)pr->pid,
                        (unsigned long long)pr->start);
            if (pr->end > 1)
                problem(v, 5, "pid %lld: %llu end events", (long long)pr->pid,
                        (unsigned long long)pr->end);
            if (pr->end == 1 && pr->after_end)
                problem(v, 5, "pid %lld: %llu events after its end", (long long)pr->pid,
                        (unsigned long long)pr->after_end);
        }
    } else if (v->events > 0) {
        if (v->hh != 1)
            problem(v, 3, "%llu HH events (expected 1)", (unsigned long long)v->hh);
        /* dftracer 2.x writes no process_name */
        if (ref ? v->process_name > 1 : v->process_name != 1)
            problem(v, 3, v->process_name ? "%llu process_name events (expected 1)"
                                          : "no process_name event",
                    (unsigned long long)v->process_name);
        if (v->start != 1)
            problem(v, 3, "%llu start events (expected 1)", (unsigned long long)v->start);
        if (v->end > 1)
            problem(v, 5, "%llu end events", (unsigned long long)v->end);
        if (v->end == 1 && v->lines_after_end)
            problem(v, 5, "%llu events after end", (unsigned long long)v->lines_after_end);
        /* dftracer 2.x leaves num_events out without DFTRACER_INC_METADATA=1 */
        if (v->end == 1 && v->num_events != (int64_t)v->events_before_end &&
            !(ref && v->num_events < 0))
            problem(v, 5, "end.num_events is %lld but %llu events%s precede it",
                    (long long)v->num_events, (unsigned long long)v->events_before_end,
                    ref ? " with an id" : "");
    }
    /* Rule 4's "every hash used is defined" is judged by the caller, which
     * may find the definitions in an ancestor's file (dftracer 2.x's fork
     * children: docs/trace-format.md, "Valid files"). */
    PyObject *undefined = PyList_New(0);
    if (!undefined)
        goto done;
    for (size_t i = 0; !merged && v->events > 0 && i < v->used.cap; i++) {
        size_t slot;
        if (!v->used.keys[i] || dft_u64map_get(&v->defined, v->used.keys[i] - 1, 0, &slot) == 1)
            continue;
        PyObject *h = PyLong_FromUnsignedLongLong(v->used.keys[i] - 1);
        if (!h || PyList_Append(undefined, h) < 0) {
            Py_XDECREF(h);
            Py_DECREF(undefined);
            goto done;
        }
        Py_DECREF(h);
    }
    PyObject *problems = PyList_New(0);
    if (!problems) {
        Py_DECREF(undefined);
        goto done;
    }
    for (unsigned i = 0; i < v->nproblems; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(v->problems[i], (Py_ssize_t)strlen(v->problems[i]),
                                           "replace");
        if (!s || PyList_Append(problems, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(problems);
            Py_DECREF(undefined);
            goto done;
        }
        Py_DECREF(s);
    }
    const char *format = v->events == 0 ? NULL
                         : ref          ? "dftracer-2.x"
                         : merged       ? "dftracer-merged"
                                        : "dftracer";
    result = Py_BuildValue("{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:O,s:i,s:O,s:O,s:z,s:K,s:N,s:N,"
                           "s:N,s:L,s:L,s:L}", "path", arg,
                           "status", status_name(rc), "message", torn ? r.err : "", "members",
                           (unsigned long long)r.members, "lines", (unsigned long long)v->lines,
                           "events", (unsigned long long)v->events, "bad_lines",
                           (unsigned long long)v->bad_lines, "duplicate_ids",
                           (unsigned long long)v->dup_ids, "finalized",
                           v->end ? Py_True : Py_False, "end_signal", v->end_signal, "header", v->header_seen ? Py_True : Py_False,
                           "merged", merged ? Py_True : Py_False, "format", format, "problem_count",
                           (unsigned long long)v->problem_count, "problems",
                           problems, "undefined_hashes", undefined, "host",
                           dft_rd_text(v->who.host, strlen(v->who.host)), "pid",
                           (long long)v->who.pid, "ppid", (long long)v->who.ppid, "start_ts",
                           (long long)v->start_ts);
done:
    dft_idset_free(&v->ids);
    dft_u64map_free(&v->defined, 0);
    dft_u64map_free(&v->used, 0);
    dft_u64map_free(&v->procs, 1);
    free(v);
    dft_rd_close(&r);
    return result;
}
