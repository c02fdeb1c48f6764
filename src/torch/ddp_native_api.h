/* torch/ddp_native_api.h: what the native DDP hook (src/libtorch/ddp_native.cpp,
 * built against the program's libtorch on the user's machine) asks of
 * dftracer._core, and nothing more.  _core exports one of these in the capsule
 * `dftracer._core._ddp_native_api`; the hook checks `version` and `size`
 * before using it.  Plain C, so that the C++ side needs no other header of
 * ours.  `hook` is always a _core._DdpHook (src/torch/ddp_hook.c). */
#ifndef DFT_DDP_NATIVE_API_H
#define DFT_DDP_NATIVE_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DFT_DDP_NATIVE_API_VERSION 2

/* mode() bits */
#define DFT_DDP_SLOW 1   /* a program's hook or a Join context: call the _DdpHook (GIL) */
#define DFT_DDP_DIVIDE 2 /* torch's built-in ALLREDUCE arithmetic: bucket / size */

typedef struct {
    int version;  /* DFT_DDP_NATIVE_API_VERSION */
    size_t size;  /* sizeof(dft_ddp_native_api) */
    /* DFT_DDP_* bits of the hook now.  Any thread, no GIL. */
    int (*mode)(void *hook);
    /* The group size the hook scales by.  Any thread, no GIL. */
    int64_t (*group_size)(void *hook);
    /* The trace clock (µs).  Any thread, no GIL. */
    int64_t (*now_us)(void);
    /* Bucket `index`'s all-reduce, issued at `start`: sets *seq (the next of
     * the hook's group's collectives) and marks it in flight on the calling
     * thread; returns the token `landed` takes.  Any thread, no GIL. */
    int64_t (*launch)(void *hook, int64_t start, int64_t index, int64_t *seq);
    /* The all-reduce of `token` completed (or failed): no longer in flight.
     * Any thread, no GIL. */
    void (*landed)(int64_t token);
    /* A bucket's all-reduce, issued at `start`, completed now: its
     * comm/all_reduce event.  Any thread, no GIL. */
    void (*done)(void *hook, int64_t start, int64_t bytes, int64_t index, int64_t seq);
} dft_ddp_native_api;

#ifdef __cplusplus
}
#endif

#endif
