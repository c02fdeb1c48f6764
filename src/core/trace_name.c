/* core/trace_name.c: the trace file's name "<stem>-<host>-<pid>[.<k>]-app.pfw[.gz]"
 * (docs/trace-format.md, "Files"), built and taken apart here only
 * (config.c's dft_config_stem makes the stem of a log file), the process's name,
 * the numbered names of later traces, and whether a name is a process's.
 * dftracer/tools/trace_name.py is the same rule in Python.  All pure: any thread,
 * no GIL. */
#include "core/trace_name.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL "-app.pfw"
#define GZ ".gz"

char *dft_trace_name_build(const char *stem, const char *host, int64_t pid, int compressed)
{
    size_t n = strlen(stem) + strlen(host) + 64;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s-%s-%lld" TAIL "%s", stem, host, (long long)pid, compressed ? GZ : "");
    return p;
}

/* Where the name's "-app.pfw[.gz]" tail starts, or NULL. */
static const char *name_tail(const char *path)
{
    const char *tail = NULL;
    for (const char *t = strstr(path, TAIL); t; t = strstr(t + 1, TAIL))
        if (strcmp(t, TAIL) == 0 || strcmp(t, TAIL GZ) == 0)
            tail = t;
    return tail;
}

char *dft_trace_name_numbered(const char *path, int k)
{
    size_t n = strlen(path);
    const char *tail = name_tail(path);
    size_t head = tail ? (size_t)(tail - path) : n;
    char *p = malloc(n + 16);
    if (p)
        snprintf(p, n + 16, "%.*s.%d%s", (int)head, path, k, tail ? tail : "");
    return p;
}

int dft_trace_name_has_pid(const char *path, long pid)
{
    char want[32];
    int w = snprintf(want, sizeof want, "-%ld", pid);
    const char *tail = name_tail(path);
    return tail && w > 0 && (size_t)(tail - path) >= (size_t)w &&
           memcmp(tail - w, want, (size_t)w) == 0;
}

int dft_trace_name_request(const char *path, char *out, size_t cap)
{
    const char *tail = name_tail(path);
    if (!tail || tail == path)
        return -1;
    int w = snprintf(out, cap, "%.*s-stacks.req", (int)(tail - path), path);
    return w > 0 && (size_t)w < cap ? 0 : -1;
}
