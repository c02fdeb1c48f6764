/* dftracer.h: the C API through which every part of dftracer writes events.
 *
 * Every function here may be called from any thread, with or without the GIL,
 * including threads Python never saw (CUPTI callbacks, I/O wrappers inside libc
 * calls).  None of them calls into Python.  Events go into a per-thread buffer
 * without taking a lock; formatting, compression and writing happen on the
 * writer threads.  Calls made while tracing is not active return at once.
 */
#ifndef DFTRACER_H
#define DFTRACER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Argument value types. */
typedef enum dft_arg_type {
    DFT_ARG_INT = 1,   /* int64 */
    DFT_ARG_FLOAT = 2, /* double */
    DFT_ARG_STR = 3,   /* UTF-8 bytes (invalid UTF-8 is replaced when written) */
    DFT_ARG_HASH = 4,  /* a dft_intern() hash, written as 16 hex digits */
} dft_arg_type;

typedef struct dft_arg {
    const char *key; /* at most 255 bytes used */
    dft_arg_type type;
    size_t key_len;  /* 0: key is NUL-terminated */
    union {
        int64_t i;
        double f;
        uint64_t hash;
        struct {
            const char *ptr;
            size_t len;
        } s;
    } v;
} dft_arg;

/* Event phases (the Chrome trace "ph" letter). */
#define DFT_PH_COMPLETE 'X'
#define DFT_PH_INSTANT 'i'
#define DFT_PH_COUNTER 'C'

/* Flags for dft_event.flags. */
#define DFT_EV_NO_NESTING 0x1 /* no level/p_idx: device lanes, counters */

typedef struct dft_event {
    const char *name;
    size_t name_len; /* bytes; names longer than 4 KiB are truncated */
    const char *cat;
    size_t cat_len;
    int64_t ts;  /* microseconds on the tracer clock (dft_now_us) */
    int64_t dur; /* microseconds, complete events only */
    char ph;     /* DFT_PH_* */
    unsigned flags;
    int64_t tid; /* 0: the calling thread's id; else a lane id */
    int64_t pid; /* 0: this process; else a lane id (e.g. a GPU) */
    const dft_arg *args;
    unsigned nargs; /* at most 64 */
} dft_event;

/* Interning kinds for dft_intern(). */
typedef enum dft_intern_kind {
    DFT_INTERN_FILE = 0,   /* "FH": file paths */
    DFT_INTERN_STRING = 1, /* "SH": other strings */
} dft_intern_kind;

/* 1 when tracing is active and events are being recorded.  One relaxed load. */
int dft_active(void);

/* Microseconds since the Unix epoch: the wall clock read once at start-up,
 * advanced by CLOCK_MONOTONIC.  Never goes backwards. */
int64_t dft_now_us(void);

/* Records one event.  Returns 0 when recorded, 1 when tracing is inactive
 * (nothing recorded), -1 when the event could not be recorded (the reason is
 * reported once on stderr).  Never blocks unless the writer is behind, in which
 * case it waits for buffer space (releasing the GIL if the caller holds it). */
int dft_emit(const dft_event *ev);
/* Arguments an event could not hold (more than its integration keeps) were
 * left out: counted for the end event's num_args_dropped.  Any thread. */
void dft_note_args_dropped(uint64_t n);

/* Convenience wrapper for a complete event on the calling thread. */
int dft_emit_complete(const char *name, const char *cat, int64_t ts, int64_t dur,
                      const dft_arg *args, unsigned nargs);

/* A "CM" (or other kind, e.g. "process_name") metadata event. */
int dft_emit_metadata(const char *kind, const char *key, size_t key_len, const char *value,
                      size_t value_len);

/* A thread_name metadata event for a lane (pid, tid as in dft_event). */
int dft_name_lane(int64_t pid, int64_t tid, const char *name);

/* Returns the XXH64 hash of s and, the first time it is seen in the current
 * trace file, records the FH/SH metadata event defining it.  Returns 0 when
 * tracing is inactive. */
uint64_t dft_intern(dft_intern_kind kind, const char *s, size_t len);

/* Scopes for level/p_idx nesting on the calling thread. */
void dft_enter_scope(void);
void dft_exit_scope(void);

/* Hands every buffered event to the writer and waits until it is written.
 * Takes locks: not for signal handlers. */
void dft_flush(void);

/* The XXH64 hash (seed 0) used for hhash/fhash/SH values. */
uint64_t dft_hash64(const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DFTRACER_H */
