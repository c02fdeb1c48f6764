/* core/stacks.c: the Python stacks of every thread, written on request
 * (`dftracer stacks`, `dftracer top`: docs/hang.md) and at SIGTERM.
 *
 * No signal carries a request: the asker creates or replaces a small file
 * next to the trace, "<trace name less -app.pfw[.gz]>-stacks.req"
 * (dft_trace_name_request, core/trace_name.c), and the flusher, at each wake (every half
 * DFTRACER_FLUSH_INTERVAL), stat()s it and answers when it changed.  Only a
 * process tracing into that folder under that name ever looks at it, so
 * nothing is sent to any process: a program's own signal handlers, a pid
 * reused by another program, an untraced process are never touched.  A file
 * there before the trace began (an earlier process with the same pid) is no
 * request.  SIGTERM asks too, from the tracer's own handler.
 *
 * The flusher then calls the dumper the stacks integration registered
 * (src/hang/stacks.c), which walks the interpreter's threads without the GIL
 * through copies that cannot fault, and writes `stack` events straight to
 * the file (dft_write_meta_now).  Until asked this costs one stat() per
 * flusher wake. */
#include "core/stacks.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/state.h"
#include "core/trace_name.h"


/* Set at import (hang/stacks.c), read by the flusher: a trace a C API user
 * started may already run. */
static _Atomic(void (*)(const char *why, unsigned req)) dumper;
static _Atomic unsigned requests, served;
static _Atomic int at_term; /* the pending request comes from SIGTERM */

/* The request file and what it was when last looked at: written while the
 * flusher does not run (dft_stacks_arm), then by the flusher only. */
typedef struct {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} req_state;
static char armed_for[PATH_MAX]; /* the trace path as the writer gave it */
static char req_path[PATH_MAX];  /* absolute: the program may chdir() later */
static req_state req_seen;

void dft_set_stack_dumper(void (*dump)(const char *why, unsigned req))
{
    atomic_store(&dumper, dump);
}

/* The flusher thread (or its starter), no GIL. */
static req_state look(const char *path)
{
    req_state s;
    memset(&s, 0, sizeof s);
    struct stat st;
    if (path[0] && stat(path, &st) == 0) {
        s.exists = 1;
        s.dev = st.st_dev;
        s.ino = st.st_ino;
        s.size = st.st_size;
        s.mtime = st.st_mtim;
        s.ctime = st.st_ctim;
    }
    return s;
}

static int same(const req_state *a, const req_state *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* Under life_lock, before the flusher starts; no GIL. */
void dft_stacks_arm(const char *trace_path)
{
    if (trace_path && strcmp(trace_path, armed_for) == 0 && req_path[0])
        return; /* the same trace (the flusher back after a fork): a request made meanwhile counts */
    char p[PATH_MAX], cwd[PATH_MAX];
    armed_for[0] = req_path[0] = 0;
    if (!trace_path || strlen(trace_path) >= sizeof armed_for ||
        dft_trace_name_request(trace_path, p, sizeof p) != 0)
        return;
    if (p[0] == '/') {
        memcpy(req_path, p, strlen(p) + 1);
    } else {
        int w = getcwd(cwd, sizeof cwd) ? snprintf(req_path, sizeof req_path, "%s/%s", cwd, p) : -1;
        if (w < 0 || (size_t)w >= sizeof req_path) {
            req_path[0] = 0;
            return;
        }
    }
    memcpy(armed_for, trace_path, strlen(trace_path) + 1);
    req_seen = look(req_path); /* what is there already is no request */
}

/* Async-signal-safe. */
void dft_stacks_request_from_signal(void)
{
    atomic_store(&at_term, 1);
    atomic_fetch_add(&requests, 1);
}

/* The flusher thread, no GIL. */
void dft_stacks_serve(void)
{
    req_state now = look(req_path);
    if (!same(&now, &req_seen)) {
        if (now.exists) /* created or replaced; a removal asks nothing */
            atomic_fetch_add(&requests, 1);
        req_seen = now;
    }
    unsigned r = atomic_load(&requests);
    if (r == atomic_load(&served))
        return;
    int term = atomic_exchange(&at_term, 0);
    void (*dump)(const char *, unsigned) = atomic_load(&dumper);
    if (dump && atomic_load(&dft_trace.active))
        dump(term ? "SIGTERM" : "request", r);
    atomic_store(&served, r);
}
