/* reader/summary.c: _core._summarize_file(path) -> dict.
 *
 * One streaming pass over a trace file aggregating complete events per
 * (cat, name, pid, tid): count, total/min/max duration, I/O bytes and a
 * log-linear duration histogram (exact below 16 us, 16 bins per power of two
 * above: percentiles within about 3%; reader/hist.c).  The caller merges these
 * partial results across files and groups them as asked, so memory depends on
 * the number of distinct keys, never on the number of events.  Complete events
 * with a bad duration (reader.h, dft_dur_ok) are counted apart and left out of
 * the groups and the time range.  Who wrote the file (host, pid, process
 * name, rank) is read through reader/identity.c, as every pass reads it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/identity.h"
#include "reader/reader.h"
#include "reader/tools.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct agg {
    uint64_t hash; /* 0: empty slot */
    char *cat, *name, *module; /* module: args.module (NULL: none), a row of its own */
    size_t cat_len, name_len, module_len;
    int64_t pid, tid;
    uint64_t count, io_events;
    uint64_t total, total_hi; /* sum of durations: 128 bits, hi:lo (it cannot wrap) */
    int64_t min, max, io_bytes;
    dft_hist hist;
} agg;

typedef struct summary {
    agg *slots;
    size_t cap, used;
    /* file facts */
    uint64_t lines, events, ph_x, ph_i, ph_c, ph_m, other;
    int64_t ts_min, end_max, num_events;
    int have_ts, finalized;
    int end_signal; /* the signal its `end` names (0: none): killed after it */
    dft_ident who; /* host, pid, process name, rank: reader/identity.c */
    dft_rd_bad bad;
    uint64_t bad_dur, first_bad_dur_line; /* complete events with a bad duration */
    int64_t first_bad_dur;
} summary;

/* Bytes into a running hash, eight at a time (a byte-at-a-time hash was a
 * tenth of the pass); the length goes in too, so "ab","c" and "a","bc"
 * differ.  Equal keys are still compared in full. */
static uint64_t mix_bytes(uint64_t h, const char *p, size_t n)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    h = (h ^ n) * k;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    if (n) {
        uint64_t w = 0;
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)(unsigned char)p[i] << (8 * i);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    return h;
}

static uint64_t key_hash(const dft_line *l)
{
    uint64_t h = mix_bytes(1469598103934665603ull, l->cat.p, l->cat.n);
    h = mix_bytes(h, l->name.p, l->name.n);
    if (l->a_module.p) /* no module and an empty one differ in the compare */
        h = mix_bytes(h, l->a_module.p, l->a_module.n);
    h ^= (uint64_t)l->pid * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)l->tid * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return h ? h : 1;
}

static int grow(summary *s)
{
    size_t ncap = s->cap ? s->cap * 2 : 256;
    agg *n = calloc(ncap, sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].hash)
            continue;
        size_t j = s->slots[i].hash & (ncap - 1);
        while (n[j].hash)
            j = (j + 1) & (ncap - 1);
        n[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = n;
    s->cap = ncap;
    return 0;
}

/* a is the group of line l. */
static inline int same_key(const agg *a, const dft_line *l)
{
    return a->pid == l->pid && a->tid == l->tid && a->cat_len == l->cat.n &&
           a->name_len == l->name.n && dft_bytes_eq(a->cat, l->cat.p, l->cat.n) &&
           dft_bytes_eq(a->name, l->name.p, l->name.n) &&
           (a->module != NULL) == (l->a_module.p != NULL) && a->module_len == l->a_module.n &&
           dft_bytes_eq(a->module, l->a_module.p, l->a_module.n);
}

static agg *lookup(summary *s, const dft_line *l)
{
    if ((s->used + 1) * 2 > s->cap && grow(s) < 0)
        return NULL;
    uint64_t h = key_hash(l);
    size_t j = h & (s->cap - 1);
    for (;; j = (j + 1) & (s->cap - 1)) {
        agg *a = &s->slots[j];
        if (!a->hash)
            break;
        if (a->hash == h && same_key(a, l))
            return a;
    }
    agg *a = &s->slots[j];
    a->cat = malloc(l->cat.n + 1);
    a->name = malloc(l->name.n + 1);
    a->module = l->a_module.p ? malloc(l->a_module.n + 1) : NULL;
    if (!a->cat || !a->name || (l->a_module.p && !a->module)) {
        free(a->cat);
        free(a->name);
        free(a->module);
        memset(a, 0, sizeof *a);
        return NULL;
    }
    if (l->cat.n)
        memcpy(a->cat, l->cat.p, l->cat.n);
    if (l->name.n)
        memcpy(a->name, l->name.p, l->name.n);
    if (a->module && l->a_module.n)
        memcpy(a->module, l->a_module.p, l->a_module.n);
    a->cat_len = l->cat.n;
    a->name_len = l->name.n;
    a->module_len = l->a_module.n;
    a->pid = l->pid;
    a->tid = l->tid;
    a->min = INT64_MAX;
    a->max = INT64_MIN;
    a->hash = h;
    s->used++;
    return a;
}

static void summary_free(summary *s)
{
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].hash)
            continue;
        free(s->slots[i].cat);
        free(s->slots[i].name);
        free(s->slots[i].module);
        dft_hist_free(&s->slots[i].hist);
    }
    free(s->slots);
}

/* The pass itself; runs without the GIL.  Returns the reader's end status,
 * or -1 when out of memory. */
static int summarize(dft_rd *r, summary *s)
{
    const char *text;
    size_t n;
    dft_rd_status st;
    dft_line l;
    /* the group of the last event: runs of one call skip the hash (only a
     * lookup moves the groups, and it sets this) */
    agg *last = NULL;
    while ((st = dft_rd_next_parsed(r, &text, &n, &l, &s->bad)) == DFT_RD_OK) {
        s->lines = r->line_no;
        s->events++;
        if (dft_ident_line(&s->who, &l)) {
            s->ph_m++; /* a metadata event: nothing else to read in it */
            continue;
        }
        switch (l.ph) {
        case 'X':
            s->ph_x++;
            break;
        case 'i':
        case 'I':
            s->ph_i++;
            break;
        case 'C':
            s->ph_c++;
            break;
        default:
            s->other++;
            break;
        }
        /* A bad duration is counted, and the event is left out of the time
         * range and the groups (docs/cli.md, "Bad durations"). */
        int dur_ok = !(l.have & DFT_HAVE_DUR) ||
                     dft_dur_ok((l.have & DFT_HAVE_TS) ? l.ts : 0, l.dur);
        if (!dur_ok && l.ph == 'X' && s->bad_dur++ == 0) {
            s->first_bad_dur_line = s->lines;
            s->first_bad_dur = l.dur;
        }
        if ((l.have & DFT_HAVE_TS) && dur_ok) {
            int64_t end = l.ts + ((l.have & DFT_HAVE_DUR) ? l.dur : 0);
            if (!s->have_ts || l.ts < s->ts_min)
                s->ts_min = l.ts;
            if (!s->have_ts || end > s->end_max)
                s->end_max = end;
            s->have_ts = 1;
        }
        if (l.ph != 'X' || !(l.have & DFT_HAVE_DUR))
            continue;
        if (l.cat.n == 8 && memcmp(l.cat.p, "dftracer", 8) == 0) {
            if (l.name.n == 3 && memcmp(l.name.p, "end", 3) == 0) {
                s->finalized = 1;
                s->num_events = (l.have & DFT_HAVE_NUM_EVENTS) ? l.num_events : -1;
                s->end_signal = dft_end_signal(&l);
            }
            continue;
        }
        if (!dur_ok)
            continue;
        agg *a = last && same_key(last, &l) ? last : (last = lookup(s, &l));
        if (!a || dft_hist_add(&a->hist, l.dur) < 0)
            return -1;
        a->count++;
        a->total += (uint64_t)l.dur;
        a->total_hi += a->total < (uint64_t)l.dur; /* the carry */
        if (l.dur < a->min)
            a->min = l.dur;
        if (l.dur > a->max)
            a->max = l.dur;
        if (l.have & DFT_HAVE_IO) {
            a->io_bytes += l.io_bytes;
            a->io_events++;
        }
    }
    s->lines = r->line_no;
    return (int)st;
}

/* hi * 2^64 + lo as a Python int (a new reference), or NULL. */
static PyObject *u128_long(uint64_t hi, uint64_t lo)
{
    if (!hi)
        return PyLong_FromUnsignedLongLong(lo);
    PyObject *h = PyLong_FromUnsignedLongLong(hi), *l = PyLong_FromUnsignedLongLong(lo);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *hs = (h && shift) ? PyNumber_Lshift(h, shift) : NULL;
    PyObject *sum = (hs && l) ? PyNumber_Or(hs, l) : NULL;
    Py_XDECREF(h);
    Py_XDECREF(l);
    Py_XDECREF(shift);
    Py_XDECREF(hs);
    return sum;
}

static PyObject *groups_list(const summary *s)
{
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (size_t i = 0; i < s->cap; i++) {
        const agg *a = &s->slots[i];
        if (!a->hash)
            continue;
        PyObject *h = dft_hist_dict(&a->hist);
        PyObject *total = u128_long(a->total_hi, a->total);
        if (!h || !total) {
            Py_XDECREF(h);
            Py_XDECREF(total);
            goto fail;
        }
        PyObject *t = Py_BuildValue(
            "(s#s#LLKOLLLKNz#)", a->cat, (Py_ssize_t)a->cat_len, a->name, (Py_ssize_t)a->name_len,
            (long long)a->pid, (long long)a->tid, (unsigned long long)a->count, total,
            (long long)a->min, (long long)a->max, (long long)a->io_bytes,
            (unsigned long long)a->io_events, h, a->module, (Py_ssize_t)a->module_len);
        if (!t) {
            /* names that are not UTF-8 (older tools): decode with replacement */
            PyErr_Clear();
            PyObject *c = PyUnicode_DecodeUTF8(a->cat, (Py_ssize_t)a->cat_len, "replace");
            PyObject *nm = PyUnicode_DecodeUTF8(a->name, (Py_ssize_t)a->name_len, "replace");
            PyObject *md = a->module ? PyUnicode_DecodeUTF8(a->module, (Py_ssize_t)a->module_len,
                                                            "replace")
                                     : Py_NewRef(Py_None);
            h = dft_hist_dict(&a->hist);
            if (c && nm && md && h)
                t = Py_BuildValue("(NNLLKOLLLKNN)", c, nm, (long long)a->pid, (long long)a->tid,
                                  (unsigned long long)a->count, total, (long long)a->min,
                                  (long long)a->max, (long long)a->io_bytes,
                                  (unsigned long long)a->io_events, h, md);
            else {
                Py_XDECREF(c);
                Py_XDECREF(nm);
                Py_XDECREF(md);
                Py_XDECREF(h);
            }
        }
        Py_DECREF(total);
        if (!t || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static const char *status_name(int st)
{
    switch (st) {
    case DFT_RD_EOF:
        return "ok";
    case DFT_RD_TRUNCATED:
        return "truncated";
    case DFT_RD_CORRUPT:
        return "corrupt";
    default:
        return "error";
    }
}

PyObject *dft_tools_summarize_file(PyObject *module, PyObject *arg)
{
    (void)module;
    PyObject *bytes;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    const char *path = PyBytes_AS_STRING(bytes);
    dft_rd r;
    summary s;
    memset(&s, 0, sizeof s);
    dft_ident_init(&s.who);
    s.num_events = -1;
    int rc, open_rc;
    Py_BEGIN_ALLOW_THREADS
    open_rc = dft_rd_open(&r, path);
    rc = open_rc < 0 ? 0 : summarize(&r, &s);
    Py_END_ALLOW_THREADS
    if (open_rc < 0) {
        dft_rd_raise_open_error(arg, &r, errno);
        Py_DECREF(bytes);
        return NULL;
    }
    PyObject *result = NULL;
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *groups = groups_list(&s);
    if (!groups)
        goto done;
    /* host and process names from the older tools may not be UTF-8 */
    PyObject *host = dft_rd_text(s.who.host, strlen(s.who.host));
    PyObject *pname = dft_rd_text(s.who.process_name, strlen(s.who.process_name));
    if (!host || !pname) {
        Py_XDECREF(host);
        Py_XDECREF(pname);
        Py_DECREF(groups);
        goto done;
    }
    result = Py_BuildValue(
        "{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:z,s:K,s:N,s:N,s:L,s:L,s:O,s:L,s:L,"
        "s:O,s:i,s:L,s:K,s:K,s:K,s:K,s:L,s:N,s:L,s:L}",
        "path", arg, "status", status_name(rc), "message", r.err, "members",
        (unsigned long long)r.members, "lines", (unsigned long long)s.lines, "events",
        (unsigned long long)s.events, "bad_lines", (unsigned long long)s.bad.lines, "complete",
        (unsigned long long)s.ph_x, "instant", (unsigned long long)s.ph_i, "counter",
        (unsigned long long)s.ph_c, "metadata", (unsigned long long)s.ph_m, "first_bad",
        s.bad.first, "first_bad_line", (unsigned long long)s.bad.first_line, "host", host, "process_name", pname,
        "pid", (long long)s.who.pid, "rank", (long long)dft_ident_own_rank(&s.who), "has_ts",
        s.have_ts ? Py_True : Py_False, "ts_min", (long long)s.ts_min, "end_max",
        (long long)s.end_max, "finalized", s.finalized ? Py_True : Py_False, "end_signal",
        s.end_signal, "num_events",
        (long long)s.num_events, "long_lines", (unsigned long long)r.long_lines,
        "first_long_line", (unsigned long long)r.first_long_line, "bad_durations",
        (unsigned long long)s.bad_dur, "first_bad_duration_line",
        (unsigned long long)s.first_bad_dur_line, "first_bad_duration",
        (long long)s.first_bad_dur, "groups", groups, "ppid", (long long)s.who.ppid, "worker",
        (long long)s.who.worker);
done:
    summary_free(&s);
    dft_rd_close(&r);
    Py_DECREF(bytes);
    return result;
}
