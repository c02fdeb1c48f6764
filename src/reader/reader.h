/* reader/reader.h: reading trace files back (the `dftracer` command line).
 *
 * dft_rd_*: a streaming line reader over plain or gzip files (any number of
 * concatenated members), with memory bounded by the longest line.
 * dft_line_parse: one trace line into a dft_line (fast path for the lines
 * dftracer writes, a general JSON parser for anything else).
 * None of these functions touches Python objects; callers run them without
 * the GIL. */
#ifndef DFT_READER_H
#define DFT_READER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <zlib.h>

/* ---- streaming line reader ------------------------------------------- */

/* The longest line the reader holds (docs/trace-format.md, "Reading"): a line
 * of this many bytes or more is skipped and counted (long_lines), so memory
 * stays below about this bound plus the input buffer whatever the input. */
#define DFT_RD_LINE_MAX ((size_t)16 << 20)
#define DFT_RD_LINE_MAX_TEXT "16 MiB"

typedef enum dft_rd_status {
    DFT_RD_OK = 0,        /* a line was returned */
    DFT_RD_EOF = 1,       /* clean end of file */
    DFT_RD_TRUNCATED = 2, /* the last gzip member ends early (torn tail) */
    DFT_RD_CORRUPT = 3,   /* undecodable data (message in err) */
    DFT_RD_IOERR = 4,     /* read() failed or out of memory (message in err) */
} dft_rd_status;

typedef struct dft_rd {
    FILE *fp;
    int gzip;           /* 1: gzip members, 0: plain text */
    int in_member;      /* inside a gzip member that has not ended */
    struct dft_inflater *inf; /* reader/inflate.h; NULL for plain text */
    unsigned char *in;  /* compressed input buffer */
    const unsigned char *next_in; /* compressed bytes not yet inflated: [next_in, +avail_in) */
    size_t avail_in;
    size_t in_cap;
    char *out;          /* decompressed text: [pos, len) not yet returned */
    size_t out_cap, pos, len;
    uint64_t members;   /* gzip members completed */
    uint64_t in_offset; /* compressed bytes consumed (for messages) */
    int eof;            /* no more input */
    int zero_tail;      /* only zero bytes seen since the last member */
    int done;           /* no more output will come */
    int not_regular;    /* dft_rd_open refused a FIFO, socket or device (err says which) */
    int skipping;       /* inside a line of DFT_RD_LINE_MAX bytes or more */
    uint64_t line_no;   /* the number of the line last returned (1-based) */
    uint64_t long_lines, first_long_line, last_long_line; /* lines skipped as too long */
    dft_rd_status end;  /* why the stream ended */
    char err[256];
} dft_rd;

/* Opens path; returns 0, or -1 with errno set (err filled).  Only regular
 * files are read: a FIFO, socket or device (a symlink to /dev/zero) is refused
 * without blocking, with not_regular set and errno EINVAL.  A path ending in
 * ".gz" whose bytes are not gzip reads as DFT_RD_CORRUPT ("not gzip ..."). */
int dft_rd_open(dft_rd *r, const char *path);
/* dft_rd_open from byte offset on (a gzip member's start, or a line's, for
 * a reader of what was appended since: `dftracer stacks`). */
int dft_rd_open_at(dft_rd *r, const char *path, uint64_t offset);
/* The next line without its '\n' (a last line without '\n' is returned too).
 * The pointer stays valid until the next call; r->line_no is its number.
 * Lines of DFT_RD_LINE_MAX bytes or more are skipped (and counted in
 * r->long_lines).  Returns DFT_RD_OK or the status that ended the stream. */
dft_rd_status dft_rd_next(dft_rd *r, const char **line, size_t *len);
void dft_rd_close(dft_rd *r);

/* "a FIFO", "a socket", ... for a file mode that is not a regular file. */
const char *dft_file_kind(unsigned mode);

/* ---- durations --------------------------------------------------------- */

/* The longest duration the readers use (docs/cli.md, "Bad durations"): 365
 * days in microseconds.  A complete event whose dur is negative, longer, or
 * whose ts + dur does not fit in 64 bits is counted and reported, and left
 * out of every sum, percentile and time range. */
#define DFT_DUR_MAX_US ((int64_t)365 * 24 * 3600 * 1000000)
#define DFT_DUR_MAX_TEXT "365 days"

static inline int dft_dur_ok(int64_t ts, int64_t dur)
{
    return dur >= 0 && dur <= DFT_DUR_MAX_US && ts <= INT64_MAX - dur;
}

/* ---- line parser ------------------------------------------------------ */

typedef struct dft_sv {
    const char *p;
    size_t n;
} dft_sv;

/* n bytes of a and b equal: an inline loop, for the short keys and names a
 * pass compares on each line (a library memcmp's call costs more).  No GIL. */
static inline int dft_bytes_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The closing quote of a string body starting at b with no backslash before
 * it, or NULL (a backslash, or no quote): one pass, no call, since the
 * strings of a line are short.  No GIL. */
static inline const char *dft_plain_quote(const char *b, const char *end)
{
    const char *q = b;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* eight bytes at a time: a byte equal to '"' or '\\' is a zero byte of
     * w ^ pattern, found by the borrow trick (the lowest hit of either is
     * exact: a false one only lies above a true one) */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    for (; end - q >= 8; q += 8) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t xq = w ^ (ones * '"'), xb = w ^ (ones * '\\');
        uint64_t hq = (xq - ones) & ~xq & highs, hit = hq | ((xb - ones) & ~xb & highs);
        if (hit) {
            /* the lowest hit is a quote when hq has it: no load of the byte */
            uint64_t first = hit & (0 - hit);
            return (hq & first) ? q + (__builtin_ctzll(hit) >> 3) : NULL;
        }
    }
#endif
    for (; q < end; q++) {
        if (*q == '"')
            return q;
        if (*q == '\\')
            return NULL;
    }
    return NULL;
}

/* dft_line.have bits */
#define DFT_HAVE_ID 0x1
#define DFT_HAVE_PID 0x2
#define DFT_HAVE_TID 0x4
#define DFT_HAVE_TS 0x8
#define DFT_HAVE_DUR 0x10
#define DFT_HAVE_IO 0x20
#define DFT_HAVE_NUM_EVENTS 0x40
#define DFT_HAVE_NUMERIC_PH 0x80 /* "ph":1 ... (dftracer 2.x) */
#define DFT_HAVE_STEP_KEY 0x100  /* args has a "step" member (the ranks pass reads it) */
#define DFT_HAVE_PLAIN_ARGS 0x200 /* args as the writer writes it (parse.c checked): no spaces, no escapes */

#define DFT_LINE_REFS 8

/* A new field must also be reset in parse.c's line_reset. */
typedef struct dft_line {
    unsigned have;
    int64_t id, pid, tid, ts, dur;
    char ph;          /* first letter of "ph" (or '?'; numeric ph of the dev dialect: '1'..) */
    dft_sv name, cat; /* raw string contents (escapes left as written) */
    dft_sv hhash;     /* args.hhash token contents (hex string or digits) */
    dft_sv a_name;    /* args.name, metadata events */
    dft_sv a_value;   /* args.value token contents, metadata events */
    dft_sv a_module;  /* args.module: the module a torch forward/backward ran (dftracer run) */
    dft_sv args;      /* the args object's text, '{' to '}' (p NULL: none, or not an object) */
    int64_t io_bytes; /* see DFT_HAVE_IO and reader/iobytes.c */
    int64_t num_events;
    unsigned nrefs;   /* hash-valued args (keys ending in "hash", and cwd) */
    dft_sv refs[DFT_LINE_REFS];
} dft_line;

/* The byte arguments of one event (reader/iobytes.c). */
#define DFT_IO_SIZE 0x1
#define DFT_IO_COUNT 0x2
#define DFT_IO_RET 0x4
#define DFT_IO_IMAGE_SIZE 0x8

typedef struct dft_io_args {
    unsigned have; /* DFT_IO_* bits */
    int64_t size, count, ret, image_size;
} dft_io_args;

/* The bytes an event with this cat, name and args moved (docs/cli.md, "I/O
 * bytes"): returns 1 with *bytes set for an event that moves data, else 0. */
int dft_io_bytes(dft_sv cat, dft_sv name, const dft_io_args *a, int64_t *bytes);

typedef enum dft_parse_mode {
    DFT_PARSE_LENIENT = 0, /* accept the older tools' unescaped strings */
    DFT_PARSE_STRICT = 1,  /* RFC 8259 JSON only (validate) */
} dft_parse_mode;

/* Parses one line holding one JSON object.  Returns 0, or -1 with a short
 * reason in *why (a static string). */
int dft_line_parse(const char *s, size_t n, dft_parse_mode mode, dft_line *out,
                   const char **why);

/* 1 for the lines that are not events: "[", "]", blank. */
int dft_line_is_bracket(const char *s, size_t n);

/* How every pass reads a trace: the next line of r that is not a JSON
 * array's bracket, its text trimmed of a trailing ',', CR and spaces, parsed
 * leniently into *l.  Returns r's status; with DFT_RD_OK, *why is NULL when
 * the line parsed, else the parser's reason (a bad line, *l unset).  No GIL. */
dft_rd_status dft_rd_next_event(dft_rd *r, const char **text, size_t *n, dft_line *l,
                                const char **why);

/* A pass's lines that are not events, counted one way by every pass: the
 * lines the parser refused and, once the pass ends, the lines the reader
 * skipped as too long; the first refused line's number and reason.
 * Zero-initialised is none. */
typedef struct dft_rd_bad {
    uint64_t lines;      /* bad_lines */
    uint64_t first_line; /* first_bad_line: 0 when no line was refused */
    const char *first;   /* first_bad: the parser's reason (static), or NULL */
} dft_rd_bad;

/* Counts the line r returned last as refused for why.  No GIL. */
static inline void dft_rd_bad_line(dft_rd_bad *b, const dft_rd *r, const char *why)
{
    if (!b->first) {
        b->first_line = r->line_no;
        b->first = why;
    }
    b->lines++;
}

/* The line loop of a pass: dft_rd_next_event, the refused lines counted in
 * *bad and skipped.  Returns r's status; with DFT_RD_OK, *l is the next line
 * that parsed; otherwise the pass is over, and r's over-long lines are
 * counted in *bad too.  No GIL. */
dft_rd_status dft_rd_next_parsed(dft_rd *r, const char **text, size_t *n, dft_line *l,
                                 dft_rd_bad *bad);

/* Lenient scanners for the rewriter: a string at *p (its body in *body) or
 * any value; advance *p past it.  Return 0, or -1 when malformed. */
int dft_json_scan_string(const char **p, const char *end, dft_sv *body);
/* The same in mode; on -1 *why says what was wrong (or stays NULL). */
int dft_json_scan_string_as(const char **p, const char *end, dft_sv *body, dft_parse_mode mode,
                            const char **why);
int dft_json_scan_value(const char **p, const char *end);

/* ---- walking a JSON object's members (reader/members.c) ----------------- */

/* Why a walk failed (dft_members.fault). */
typedef enum dft_members_fault {
    DFT_MEMBERS_OK = 0,
    DFT_MEMBERS_BAD_KEY,  /* no key string where one belongs (why: the string's fault, if any) */
    DFT_MEMBERS_NO_COLON, /* no ':' after a key */
    DFT_MEMBERS_NO_SEP,   /* neither ',' nor '}' after a value */
} dft_members_fault;

typedef struct dft_members {
    const char *p, *end;   /* p: after the last thing read */
    int first;
    dft_parse_mode mode;   /* keys as the line parser reads strings in this mode */
    dft_members_fault fault;
    const char *why;       /* with DFT_MEMBERS_BAD_KEY: what was wrong with the string, or NULL */
} dft_members;

/* p (after whitespace) is at '{': starts a lenient walk past it.  0, or -1
 * when it is not an object. */
int dft_members_open(dft_members *it, const char *p, const char *end);
/* Starts a walk at p, just past an object's '{', reading keys in mode. */
void dft_members_start(dft_members *it, const char *p, const char *end, dft_parse_mode mode);
/* The next member: 1 with its key (the string's body) and it->p at its
 * value, which the caller then takes (dft_json_scan_value, or its own
 * reading) by advancing it->p; 0 at the object's end (it->p past the '}');
 * -1 when malformed (it->fault, it->why say why).  The one walk over an
 * object's members: the line parser's (reader/parse.c) and the passes'.
 * No GIL. */
int dft_members_next(dft_members *it, dft_sv *key);

/* Calls fn for each member of the args object of a line dft_line_parse read
 * (the parser found the object, so the line is not walked twice): its key,
 * its value's text [v, vend), and for a string its body.  0 (also for a
 * line without args), or -1 when the object is malformed (fn may have been
 * called for some members).  No GIL. */
typedef void (*dft_arg_fn)(void *ctx, dft_sv key, const char *v, const char *vend, dft_sv str,
                           int is_str);
int dft_line_args(const dft_line *l, dft_arg_fn fn, void *ctx);

/* The signal an `end` event's args name (`"signal":N`, docs/trace-format.md:
 * the process was ended by signal N after writing it): N, or 0 when it names
 * none (a normal end) or no signal number (1 to DFT_SIGNAL_MAX).  No GIL. */
#define DFT_SIGNAL_MAX 64
int dft_end_signal(const dft_line *l);

/* A JSON integer value (at most 18 digits, optional '-') spanning exactly
 * [p, end) into *v: 0, or -1 (nothing changed).  Pure; no GIL. */
int dft_members_int(const char *p, const char *end, int64_t *v);

/* One arg a pass reads into a struct of its own: its key, the bit it sets
 * in the struct's set of args seen, where it goes (off) and its kind. */
enum {
    DFT_ARG_FIELD_INT,      /* a JSON integer, into an int64_t */
    DFT_ARG_FIELD_INT_TEXT, /* the same, or a string holding one (the older tools') */
    DFT_ARG_FIELD_STR,      /* a string's body, into a dft_sv */
};
typedef struct dft_arg_field {
    const char *key;
    size_t key_len; /* strlen(key): DFT_ARG_FIELD fills it in */
    unsigned bit;
    size_t off;
    int kind;
} dft_arg_field;
/* A table entry: the key's length from the literal, none counted per line. */
#define DFT_ARG_FIELD(key, bit, off, kind) {key, sizeof(key) - 1, bit, off, kind}

/* A pass's table of fields, with a signature of its keys' lengths and first
 * and last bytes that turns most other keys away before any compare (the
 * writer's own args: hhash, level, p_idx, ...).  The signature is filled in
 * at first use; every thread computes the same value, stored atomically. */
typedef struct dft_arg_table {
    const dft_arg_field *fields;
    size_t n;
    _Atomic uint64_t keys; /* 0: not computed yet */
} dft_arg_table;
#define DFT_ARG_TABLE(fields) {fields, sizeof fields / sizeof *fields, 0}

/* Reads one member of args, as a dft_arg_fn gets it, into the field of obj
 * that t names for key, and sets its bit in *have; a value of the wrong kind
 * leaves both as they were.  1 when a field is named key, else 0.  No GIL. */
int dft_arg_table_read(dft_arg_table *t, void *obj, unsigned *have, dft_sv key, const char *v,
                       const char *vend, dft_sv str, int is_str);

/* ---- a set of uint64 keys with a pointer each (reader/set.c) ------------ */

typedef struct dft_u64map {
    uint64_t *keys; /* key + 1; 0 marks an empty slot */
    void **vals;
    size_t cap, used;
} dft_u64map;

/* Finds key; with create, inserts it (value NULL).  *slot gets its index.
 * Returns 1 found, 0 inserted or absent, -1 out of memory. */
int dft_u64map_get(dft_u64map *m, uint64_t key, int create, size_t *slot);
/* Frees the map, and each value with free() when free_vals. */
void dft_u64map_free(dft_u64map *m, int free_vals);

/* ---- a set of event ids (reader/idset.c) ------------------------------- */

/* Ids grouped in ranges of 65,536: a range holds a sorted array of the
 * offsets seen, or a bitmap (8 KiB) once that is smaller.  Memory: one bit per
 * id where ids are dense, at most about 100 bytes per id where they are
 * scattered, whatever their values. */
typedef struct dft_idset {
    dft_u64map ranges;
} dft_idset;

/* Adds id: 1 when it was there already, 0 when new, -1 out of memory. */
int dft_idset_add(dft_idset *s, uint64_t id);
void dft_idset_free(dft_idset *s);

/* A hash token (16 hex digits, or the older tools' decimal integer) as a
 * number; returns 0, or -1 when the token is neither. */
int dft_hash_token(dft_sv t, uint64_t *out);

#endif
