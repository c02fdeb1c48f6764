/* core/trace_name.h: the trace file's name, built and taken apart in one
 * place (core/trace_name.c): "<stem>-<host>-<pid>[.<k>]-app.pfw[.gz]"
 * (docs/trace-format.md, "Files").  Its Python twin, which the readers use,
 * is dftracer/tools/trace_name.py. */
#ifndef DFT_CORE_TRACE_NAME_H
#define DFT_CORE_TRACE_NAME_H

#include <stddef.h>
#include <stdint.h>

/* The name "<stem>-<host>-<pid>-app.pfw[.gz]", malloc'd, or NULL when out
 * of memory.  Pure; any thread, no GIL. */
char *dft_trace_name_build(const char *stem, const char *host, int64_t pid, int compressed);

/* The k-th numbered name of path: "<stem>-<host>-<pid>.<k>-app.pfw[.gz]" (or
 * the path with ".<k>" appended if it does not end that way), malloc'd, or
 * NULL when out of memory.  Pure; any thread, no GIL. */
char *dft_trace_name_numbered(const char *path, int k);

/* 1 when path is a trace name ending "-<pid>-app.pfw[.gz]" (the plain name
 * of the process pid), else 0.  Pure; any thread, no GIL. */
int dft_trace_name_has_pid(const char *path, long pid);

/* The `dftracer stacks` request file of the trace file path into out (cap
 * bytes): "<...>-stacks.req" for "<...>-app.pfw[.gz]".  0, or -1 when path
 * is not a trace file's name or out is too short.  Pure: any thread. */
int dft_trace_name_request(const char *path, char *out, size_t cap);

#endif
