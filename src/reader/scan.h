/* reader/scan.h: the JSON grammar reader/scan.c holds for the line parser
 * (reader/parse.c), private to reader/.  A scan state walks [p, end) in a
 * mode; a failure keeps its first reason in why.  Pure; no GIL. */
#ifndef DFT_READER_SCAN_H
#define DFT_READER_SCAN_H

#include "reader/reader.h"

typedef struct dft_pstate {
    const char *p, *end;
    dft_parse_mode mode;
    const char *why;
} dft_pstate;

static inline void dft_ws(dft_pstate *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
        s->p++;
}

/* -1, keeping why as the first reason. */
int dft_scan_fail(dft_pstate *s, const char *why);
/* The next member of the object walked by *it (reader/members.c, started in
 * s->mode), from s->p: 1 with its key and s->p at its value; 0 at the
 * object's end; -1 with the reason (in_args: the args object's). */
int dft_scan_next_member(dft_pstate *s, dft_members *it, dft_sv *key, int in_args);
/* A string at s->p (which is '"'): its body in *out. */
int dft_scan_string(dft_pstate *s, dft_sv *out);
/* A number; *is_int tells whether it is an integer fitting int64. */
int dft_scan_number(dft_pstate *s, int64_t *iv, int *is_int, dft_sv *text);
/* Any value, skipped (depth: of nesting so far, at most 64). */
int dft_scan_skip(dft_pstate *s, int depth);
/* 1 when p[0, n) is valid UTF-8 (no surrogates, no overlong forms). */
int dft_utf8_valid(const unsigned char *p, size_t n);

#endif
