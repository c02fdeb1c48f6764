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

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/state.h"
#include "core/trace_name.h"


/* Set at import (hang/stacks.c), read by the flusher: a trace a C API user
 * started may already run. */
static _Atomic(void (*)(const char *why, unsigned req)) dumper;
static _Atomic unsigned requests, served;
static _Atomic int at_term; /* the pending request comes from SIGTERM */
static _Atomic int at_stall; /* the pending request comes from a stall (watch) */
static _Atomic(void (*)(int steps)) capture_hook;   /* torch/windows.c's */
static _Atomic(int (*)(int64_t now_us)) watch_hook; /* its stall check */

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

void dft_set_window_hooks(void (*capture)(int steps), int (*watch)(int64_t now_us))
{
    atomic_store(&capture_hook, capture);
    atomic_store(&watch_hook, watch);
}

/* A request file's first line when it asks for a window ("capture" or
 * "capture STEPS"): its steps (0: the default), else -1 (the stacks).  One
 * open and read of at most 63 bytes, only when the file changed.  The
 * flusher, no GIL. */
static int capture_steps(const char *path)
{
    char buf[64];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 7)
        return -1;
    buf[n] = 0;
    if (strncmp(buf, "capture", 7) != 0 || (buf[7] != ' ' && buf[7] != '\n' && buf[7] != 0))
        return -1;
    char *end;
    long steps = buf[7] == ' ' ? strtol(buf + 8, &end, 10) : 0;
    return steps > 0 && steps < 1000000 ? (int)steps : 0;
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
        void (*capture)(int) = atomic_load(&capture_hook);
        int steps = now.exists && capture ? capture_steps(req_path) : -1;
        if (steps >= 0 && atomic_load(&dft_trace.active))
            capture(steps); /* a window asked for, not the stacks */
        else if (now.exists) /* created or replaced; a removal asks nothing */
            atomic_fetch_add(&requests, 1);
        req_seen = now;
    }
    int (*watch)(int64_t) = atomic_load(&watch_hook);
    if (watch && atomic_load(&dft_trace.active) && watch(dft_clock_us())) {
        atomic_store(&at_stall, 1);
        atomic_fetch_add(&requests, 1);
    }
    unsigned r = atomic_load(&requests);
    if (r == atomic_load(&served))
        return;
    int term = atomic_exchange(&at_term, 0);
    int stall = atomic_exchange(&at_stall, 0);
    void (*dump)(const char *, unsigned) = atomic_load(&dumper);
    if (dump && atomic_load(&dft_trace.active))
        dump(term ? "SIGTERM" : stall ? "stall" : "request", r);
    atomic_store(&served, r);
}
