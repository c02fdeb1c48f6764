/* hang/stacks.c: the stacks integration.  The core calls dump_stacks on its
 * flusher thread when `dftracer stacks` (or SIGTERM) asks (core/stacks.c).
 *
 * It holds no GIL and never takes it: the thread that holds the GIL may be
 * the one blocked in C (a collective, a read) without releasing it.  Like
 * faulthandler's watchdog (faulthandler.dump_traceback_later), it walks the
 * interpreter's thread states and their frames without the GIL through
 * CPython's _Py_DumpTracebackThreads, which only reads (at most 100 threads,
 * 100 frames each) and writes text to a file descriptor: here a memfd, read
 * back and turned into one `stack` event per thread.  A thread running
 * Python code while it is read may show a frame it has just left; a blocked
 * thread, the case this is for, shows where it waits. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>
#include <dlfcn.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/core.h"
#include "integrations.h"

/* CPython's _Py_DumpTracebackThreads (Include/internal/pycore_traceback.h),
 * looked up in the running interpreter at start: 3.13 does not export it,
 * nor does an executable that keeps libpython's symbols (then no stacks:
 * docs/hang.md). */
typedef const char *(*dump_threads_fn)(int fd, PyInterpreterState *interp,
                                       PyThreadState *current_tstate);
static dump_threads_fn dump_threads;

#define MAX_TEXT (1 << 20)
#define MAX_THREADS 128

typedef struct {
    unsigned long ident; /* threading.get_ident() */
    long native;         /* gettid() */
} thread_ids;

/* The interpreter's threads: their ids, without the GIL (PyThreadState_Next
 * is meant for debuggers).  The flusher thread. */
static int list_threads(PyInterpreterState *interp, thread_ids *out, int cap)
{
    int n = 0;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(interp); t && n < cap;
         t = PyThreadState_Next(t)) {
        out[n].ident = t->thread_id;
#if PY_VERSION_HEX >= 0x030B0000
        out[n].native = (long)t->native_thread_id;
#else
        out[n].native = 0;
#endif
        n++;
    }
    return n;
}

/* The flusher thread, no GIL. */
static long native_of(const thread_ids *ids, int n, unsigned long ident)
{
    for (int k = 0; k < n; k++)
        if (ids[k].ident == ident)
            return ids[k].native;
    return 0;
}

/* One thread's `stack` event: frames holds "file:line function" lines,
 * innermost first as faulthandler gives them; written innermost last.
 * The flusher thread, no GIL. */
static void write_stack(long tid, unsigned long ident, char **frames, int nf, const char *why,
                        unsigned req, int k, int nthreads, int64_t now)
{
    size_t len = 0;
    for (int i = 0; i < nf; i++)
        len += strlen(frames[i]) + 1;
    char *text = malloc(len + 1);
    if (!text)
        return;
    size_t at = 0;
    for (int i = nf - 1; i >= 0; i--) {
        size_t l = strlen(frames[i]);
        memcpy(text + at, frames[i], l);
        at += l;
        if (i > 0)
            text[at++] = '\n';
    }
    text[at] = 0;
    char name[128];
    if (!(tid > 0 && dft_open_thread_name(tid, name, sizeof name))) {
        if (tid > 0 && tid == (long)getpid())
            snprintf(name, sizeof name, "MainThread");
        else
            snprintf(name, sizeof name, "Thread 0x%lx", ident);
    }
    char id_text[24];
    snprintf(id_text, sizeof id_text, "0x%lx", ident);
    dft_arg a[9] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {"stack", 5}},
        {.key = "value", .type = DFT_ARG_STR, .v.s = {name, strlen(name)}},
        {.key = "at", .type = DFT_ARG_INT, .v.i = now},
        {.key = "req", .type = DFT_ARG_INT, .v.i = req},
        {.key = "why", .type = DFT_ARG_STR, .v.s = {why, strlen(why)}},
        {.key = "k", .type = DFT_ARG_INT, .v.i = k},
        {.key = "n", .type = DFT_ARG_INT, .v.i = nthreads},
        {.key = "ident", .type = DFT_ARG_STR, .v.s = {id_text, strlen(id_text)}},
        {.key = "frames", .type = DFT_ARG_STR, .v.s = {text, at}},
    };
    dft_event ev = {.name = "stack", .name_len = 5, .cat = "dftracer", .cat_len = 8,
                    .ph = 'M', .tid = tid > 0 ? tid : 0, .args = a, .nargs = 9};
    dft_write_meta_now(&ev);
    free(text);
}

/* Parses faulthandler's text (one "Thread 0x... (most recent call first):"
 * or "Current thread 0x..." header per thread, then `  File "f", line N in
 * fn` lines) and writes the events.  The flusher thread, no GIL. */
static void write_stacks(char *text, const thread_ids *ids, int nids, const char *why,
                         unsigned req)
{
    int64_t now = dft_clock_us();
    int nthreads = 0;
    for (char *p = strstr(text, "hread 0x"); p; p = strstr(p + 1, "hread 0x"))
        nthreads++;
    static char *frames[128];
    int nf = 0, k = 0;
    unsigned long ident = 0;
    int in_thread = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *h = strstr(line, "hread 0x");
        if (h && line[0] != ' ') {
            if (in_thread)
                write_stack(native_of(ids, nids, ident), ident, frames, nf, why, req, k++,
                            nthreads, now);
            ident = strtoul(h + 6, NULL, 16);
            nf = 0;
            in_thread = 1;
            continue;
        }
        const char *f = strstr(line, "File \"");
        if (!in_thread || !f || nf >= (int)(sizeof frames / sizeof *frames))
            continue;
        f += 6;
        const char *q = strstr(f, "\", line ");
        if (!q)
            continue;
        long lineno = strtol(q + 8, NULL, 10);
        const char *fn = strstr(q, " in ");
        fn = fn ? fn + 4 : "?";
        /* rewritten in place: "file:line function" fits in the line */
        char buf[1200];
        int w = snprintf(buf, sizeof buf, "%.*s:%ld %s", (int)(q - f), f, lineno, fn);
        if (w < 0)
            continue;
        size_t l = strlen(buf);
        char *dst = (char *)f - 6; /* the line's own bytes, from "File" on */
        if (l > strlen(dst))
            continue;
        memcpy(dst, buf, l + 1);
        frames[nf++] = dst;
    }
    if (in_thread)
        write_stack(native_of(ids, nids, ident), ident, frames, nf, why, req, k, nthreads, now);
}

/* The core's dumper (dft_set_stack_dumper): the flusher thread, no GIL. */
static void dump_stacks(const char *why, unsigned req)
{
    if (!Py_IsInitialized())
        return;
    PyInterpreterState *interp = PyInterpreterState_Main();
    if (!interp)
        return;
    int fd = memfd_create("dftracer-stacks", MFD_CLOEXEC);
    if (fd < 0) {
        dft_log(DFT_LOG_ERROR, "stacks: memfd_create failed; no stacks written");
        return;
    }
    thread_ids ids[MAX_THREADS];
    int nids = list_threads(interp, ids, MAX_THREADS);
    const char *err = dump_threads(fd, interp, NULL);
    off_t size = lseek(fd, 0, SEEK_END);
    if (err || size <= 0) {
        close(fd);
        return;
    }
    if (size > MAX_TEXT)
        size = MAX_TEXT;
    char *text = malloc((size_t)size + 1);
    if (text) {
        ssize_t got = pread(fd, text, (size_t)size, 0);
        if (got > 0) {
            text[got] = 0;
            write_stacks(text, ids, nids, why, req);
        }
        free(text);
    }
    close(fd);
}

/* GIL held (PyInit__core). */
int dft_hang_stacks_register(PyObject *module)
{
    void *sym = dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads");
    memcpy(&dump_threads, &sym, sizeof dump_threads); /* (object to function pointer) */
    if (dump_threads)
        dft_set_stack_dumper(dump_stacks);
    return PyModule_AddIntConstant(module, "_STACKS", dump_threads != NULL);
}
