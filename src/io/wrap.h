/* io/wrap.h: what the POSIX and stdio wrappers share.
 *
 * A wrapper first decides, as cheaply as it can, whether the call concerns a
 * traced file (one fd-table lookup, or a prefix match for path arguments).
 * If not, it tail-calls the real function.  If so, it takes the per-thread
 * busy flag (so that calls made while recording, or from a signal handler
 * that interrupted a wrapper, pass through untraced), times the real call,
 * saves errno, records one complete event and restores errno.  No wrapper
 * takes the GIL. */
#ifndef DFT_IO_WRAP_H
#define DFT_IO_WRAP_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "core/clock.h"
#include "core/core.h"
#include "dftracer.h"
#include "io/filter.h"
#include "io/got.h"

extern __thread int dft_io_busy __attribute__((tls_model("initial-exec")));

/* 1 when this call may be recorded (and marks the thread busy). */
static inline int dft_io_enter(void)
{
    if (dft_io_busy || !dft_active())
        return 0;
    dft_io_busy = 1;
    return 1;
}

static inline void dft_io_leave(void) { dft_io_busy = 0; }

#define DFT_IO_MAXARGS 10

/* One event being built.  Only the args in use are written: the array is
 * deliberately left uninitialised (it is 400 bytes). */
typedef struct dft_io_ev {
    const char *name;
    const char *cat;
    size_t name_len, cat_len;
    int64_t t0, t1;
    uint64_t gen; /* the trace file it began in: its hashes are defined there */
    void *open_h; /* the call's open span (core/open_spans.c) */
    dft_arg a[DFT_IO_MAXARGS];
    unsigned n;
} dft_io_ev;

#define DFT_IO_INLINE static inline __attribute__((always_inline))

/* Starts an event now, marked open on the thread (with its file's hash
 * when known, else 0) so that a call that blocks shows in the trace.  With
 * literal name and cat (nearly every wrapper), the strlen calls are folded at
 * compile time. */
DFT_IO_INLINE void dft_io_begin_on(dft_io_ev *e, const char *name, const char *cat,
                                   uint64_t fhash)
{
    e->name = name;
    e->name_len = strlen(name);
    e->cat = cat;
    e->cat_len = strlen(cat);
    e->n = 0;
    e->gen = dft_trace_gen();
    e->t0 = dft_clock_us();
    e->open_h = dft_open_io_begin(name, e->name_len, cat, e->cat_len, e->t0, fhash);
}

DFT_IO_INLINE void dft_io_begin(dft_io_ev *e, const char *name, const char *cat)
{
    dft_io_begin_on(e, name, cat, 0);
}

/* Keys are literals, so their lengths are compile-time constants too. */
DFT_IO_INLINE void dft_io_int(dft_io_ev *e, const char *key, int64_t v)
{
    if (e->n < DFT_IO_MAXARGS)
        e->a[e->n++] =
            (dft_arg){.key = key, .key_len = strlen(key), .type = DFT_ARG_INT, .v.i = v};
}

DFT_IO_INLINE void dft_io_hash(dft_io_ev *e, const char *key, uint64_t h)
{
    if (h && e->n < DFT_IO_MAXARGS)
        e->a[e->n++] =
            (dft_arg){.key = key, .key_len = strlen(key), .type = DFT_ARG_HASH, .v.hash = h};
}

DFT_IO_INLINE void dft_io_str(dft_io_ev *e, const char *key, const char *s)
{
    if (s && e->n < DFT_IO_MAXARGS)
        e->a[e->n++] = (dft_arg){
            .key = key, .key_len = strlen(key), .type = DFT_ARG_STR, .v.s = {s, strlen(s)}};
}

/* The body of a descriptor wrapper, shared by io/posix.c and io/stdio.c (CAT is
 * the including file's category).  FD_BEGIN returns PASS (the real call) at
 * once for an untraced descriptor or a busy thread, else starts event ev_;
 * CALL runs the real call, then reads errno and the end time; FD_ARGS adds
 * the descriptor's fhash and fd. */
#define FD_BEGIN(NAME, FD, PASS)                                                    \
    dft_fd_slot *slot_ = dft_io_fd_slot(FD);                                       \
    if (__builtin_expect(!slot_, 1) || !dft_io_enter())                             \
        return PASS;                                                                \
    dft_io_ev ev_;                                                                  \
    dft_io_begin_on(&ev_, NAME, CAT, dft_io_fd_hash(slot_, FD))

#define CALL(TYPE, EXPR)                                                            \
    TYPE r_ = EXPR;                                                                 \
    int e_ = errno;                                                                 \
    ev_.t1 = dft_clock_us()

#define FD_ARGS(FD)                                                                 \
    dft_io_hash(&ev_, "fhash", dft_io_fd_hash(slot_, FD));                          \
    dft_io_int(&ev_, "fd", FD)

/* The body of a path wrapper: PATH_BEGIN returns PASS at once for a busy
 * thread or an untraced path, else starts event ev_ with the normalised path
 * in abs_ (n_ bytes); PATH_HASH interns it. */
#define PATH_BEGIN(NAME, DIRFD, PATH, PASS)                                         \
    if (!dft_io_enter())                                                            \
        return PASS;                                                                \
    char abs_[PATH_MAX];                                                            \
    size_t n_ = dft_io_path_traced(DIRFD, PATH, abs_, sizeof abs_);                 \
    if (!n_) {                                                                      \
        dft_io_leave();                                                             \
        return PASS;                                                                \
    }                                                                               \
    dft_io_ev ev_;                                                                  \
    dft_io_begin(&ev_, NAME, CAT)

#define PATH_HASH() dft_intern(DFT_INTERN_FILE, abs_, n_)

/* PATH_BEGIN for a call that can block on its path (open of a FIFO, of a
 * file on a dead filesystem): the path is interned first, so that its open
 * span names the file (docs/trace-format.md, "Open spans"); H gets the hash
 * (PATH_HASH's, read once). */
#define PATH_BEGIN_HASHED(NAME, DIRFD, PATH, PASS, H)                               \
    if (!dft_io_enter())                                                            \
        return PASS;                                                                \
    char abs_[PATH_MAX];                                                            \
    size_t n_ = dft_io_path_traced(DIRFD, PATH, abs_, sizeof abs_);                 \
    if (!n_) {                                                                      \
        dft_io_leave();                                                             \
        return PASS;                                                                \
    }                                                                               \
    uint64_t H = PATH_HASH();                                                       \
    dft_io_ev ev_;                                                                  \
    dft_io_begin_on(&ev_, NAME, CAT, H)

/* Records e (adding errno when failed), clears the busy flag and restores
 * err as errno.  Any thread, no GIL. */
void dft_io_finish(dft_io_ev *e, int failed, int err);

/* The hook tables of io/posix.c, io/posix_data.c, io/stdio.c and io/process.c (module.c
 * installs them and lists them in _core.io_calls()). */
extern const dft_io_hook dft_io_posix_hooks[];
extern const size_t dft_io_posix_nhooks;
extern const dft_io_hook dft_io_posix_data_hooks[];
extern const size_t dft_io_posix_data_nhooks;
extern const dft_io_hook dft_io_stdio_hooks[];
extern const size_t dft_io_stdio_nhooks;
/* io/process.c: fork, exec, posix_spawn, wait (cat POSIX, on no file);
 * dft_io_process_start, under life_lock as I/O tracing starts, notes which
 * process owns the tracer (a vfork child does not). */
extern const dft_io_hook dft_io_process_hooks[];
extern const size_t dft_io_process_nhooks;
void dft_io_process_start(void);

#endif
