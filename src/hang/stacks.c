/* hang/stacks.c: the stacks integration.  The core calls dump_stacks on its
 * flusher thread when `dftracer stacks` (or `top`, or SIGTERM) asks
 * (core/stacks.c).
 *
 * It holds no GIL and never takes it: the thread that holds the GIL may be
 * the one blocked in C (a collective, a read) without releasing it.  The
 * walker (hang/walk.c) reads the interpreter's thread states and frames
 * through copies that cannot fault, so a thread that exits or returns while
 * it is read gives a stale or shorter stack, never a crash.  One `stack`
 * event per thread, the main thread first.  A thread running Python code
 * while it is read may show a frame it has just left; a blocked thread, the
 * case this is for, shows where it waits. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/core.h"
#include "hang/parts.h"
#include "hang/walk.h"

#if PY_VERSION_HEX < 0x030B0000
/* 3.10's thread states keep no kernel tid: the main thread is told by the
 * runtime's main_thread ident (set again in a forked child). */
#define Py_BUILD_CORE 1
#include <internal/pycore_runtime.h>
#undef Py_BUILD_CORE
#endif

#define MAX_THREADS 1024 /* threads written per answer (the main thread first) */

/* One thread's `stack` event: frames innermost first as the walker gives
 * them, written "file:line function" per line, innermost last.  The flusher
 * thread, no GIL. */
static void write_stack(const dft_walk_thread *t, const dft_walk_frame *frames, int nf,
                        const char *why, unsigned req, int k, int nthreads, int64_t now)
{
    size_t len = 1;
    for (int i = 0; i < nf; i++)
        len += strlen(frames[i].file) + strlen(frames[i].func) + 16;
    char *text = malloc(len);
    if (!text)
        return;
    size_t at = 0;
    for (int i = nf - 1; i >= 0; i--) {
        int w = snprintf(text + at, len - at, "%s:%d %s%s", frames[i].file, frames[i].line,
                         frames[i].func, i > 0 ? "\n" : "");
        if (w < 0 || (size_t)w >= len - at)
            break;
        at += (size_t)w;
    }
    text[at] = 0;
    int64_t tid = t->native;
#if PY_VERSION_HEX < 0x030B0000
    if (tid <= 0 && t->ident == _PyRuntime.main_thread)
        tid = getpid();
#endif
    char name[128];
    if (!dft_thread_name(&tid, t->ident, name, sizeof name)) {
        if (tid > 0 && tid == (int64_t)getpid())
            snprintf(name, sizeof name, "MainThread");
        else
            snprintf(name, sizeof name, "Thread 0x%lx", t->ident);
    }
    char id_text[24];
    snprintf(id_text, sizeof id_text, "0x%lx", t->ident);
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

/* The core's dumper (dft_set_stack_dumper): the flusher thread, no GIL.  The
 * walker is opened per answer (a pipe at most, and two allocations): a
 * forked child's flusher starts with a walker of its own pid. */
static void dump_stacks(const char *why, unsigned req)
{
    if (!Py_IsInitialized())
        return;
    PyInterpreterState *interp = PyInterpreterState_Main();
    if (!interp)
        return;
    dft_walker w;
    if (dft_walk_open(&w, 0) != 0) {
        dft_log(DFT_LOG_ERROR, "stacks: no safe way to read memory here; no stacks written");
        return;
    }
    dft_walk_thread *threads = malloc(MAX_THREADS * sizeof *threads);
    dft_walk_frame *frames = malloc(DFT_WALK_MAX_FRAMES * sizeof *frames);
    if (threads && frames) {
        int n = dft_walk_threads(&w, interp, threads, MAX_THREADS);
        int64_t now = dft_clock_us();
        for (int k = 0; k < n; k++) {
            int nf = dft_walk_stack(&w, threads[k].tstate, frames, DFT_WALK_MAX_FRAMES);
            write_stack(&threads[k], frames, nf, why, req, k, n, now);
        }
    } else {
        dft_log(DFT_LOG_ERROR, "stacks: out of memory; no stacks written");
    }
    free(frames);
    free(threads);
    dft_walk_close(&w);
}

/* GIL held (PyInit__core). */
int dft_hang_stacks_register(PyObject *module)
{
    dft_set_stack_dumper(dump_stacks);
    return PyModule_AddIntConstant(module, "_STACKS", 1);
}
