/* hang/walk.h: the Python stacks of the interpreter's threads, read from
 * another thread without the GIL and without ever faulting (hang/walk.c).
 *
 * Every interpreter structure (the thread states, their frames, the code
 * objects, the file and function names, the line tables) is read through a
 * copy that cannot fault: process_vm_readv on this process (an address that
 * is no longer mapped gives EFAULT, not SIGSEGV), or where that syscall is
 * refused (seccomp: EPERM/ENOSYS) a write of the address into a pipe, which
 * fails the same way.  What is copied is checked before it is used (types by
 * their type object's address, lengths bounded, at most DFT_WALK_MAX_FRAMES
 * frames kept, DFT_WALK_MAX_DEPTH followed and DFT_WALK_MAX_THREADS threads,
 * so a cycle cannot loop): a thread
 * that exits, or a frame that is popped, while it is read gives a shorter
 * or a stale stack, never a crash.  CPython 3.10 to 3.13.
 *
 * Use: one dft_walker per reading thread (not shared), opened once, then
 * dft_walk_threads for the thread states and dft_walk_stack for each (a
 * sampler would keep the walker open and walk one thread state a tick: the
 * per-code-object cache makes a known frame cost two small copies).  All
 * calls: any thread that is not a Python thread (the flusher), no GIL. */
#ifndef DFT_HANG_WALK_H
#define DFT_HANG_WALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <sys/types.h>

#define DFT_WALK_FILE 512      /* bytes of a file name kept, with its NUL */
#define DFT_WALK_FUNC 128      /* bytes of a function name kept */
#define DFT_WALK_MAX_FRAMES 100  /* frames a walk keeps (the innermost) */
#define DFT_WALK_MAX_DEPTH 2048  /* frames it follows to the bottom (twice the
                                  * default recursion limit) */
#define DFT_WALK_MAX_THREADS 4096 /* thread states followed in the list */
#define DFT_WALK_CACHE 64      /* code objects remembered (direct-mapped) */

/* One Python frame: UTF-8 names, cut at the sizes above; line 0 unknown. */
typedef struct {
    char file[DFT_WALK_FILE];
    char func[DFT_WALK_FUNC];
    int line;
} dft_walk_frame;

/* One thread state of the interpreter. */
typedef struct {
    const void *tstate;  /* its address: what dft_walk_stack takes */
    unsigned long ident; /* threading.get_ident() */
    long native;         /* the kernel's thread id; 0 where unknown (3.10) */
} dft_walk_thread;

typedef struct dft_walk_code dft_walk_code; /* a cache entry (walk.c) */

typedef struct {
    pid_t pid;            /* this process, for process_vm_readv */
    int use_pipe;         /* process_vm_readv refused: copy through pipe_fd */
    int pipe_fd[2];       /* -1 until needed */
    dft_walk_code *cache; /* DFT_WALK_CACHE entries, or NULL */
    char *table;          /* a line table's copy (DFT_WALK_TABLE bytes) */
    char *page;           /* 3.11+: a copy of the page of the frame last read, up
                           * to its header's end (the frames below it in the
                           * thread's data stack come from it); NULL: none */
    uintptr_t page_at;    /* the address page[0] was copied from */
    size_t page_len;      /* bytes of it valid (0: none, this walk) */
    int no_lines;         /* 1: frames get line 0 (the sampler: no table copied) */
    /* when set, dft_walk_stack ends after a frame for which it is nonzero
     * (the sampler: a frame of code the events time ends the sample) */
    int (*stop)(const dft_walk_frame *f);
    /* set by dft_walk_stack: the address of the stack's bottom frame (the
     * one with no previous frame) when the walk reached it, else NULL (a
     * stop frame, a failed copy, DFT_WALK_MAX_DEPTH or the cycle bound
     * ended it) */
    const void *bottom;
    /* set by dft_walk_stack: the frames it went through, kept or not (more
     * than it returned: the walk was cut, the innermost kept; past the cap
     * incomplete frames count too where no stop needs their names) */
    int depth;
    /* set by dft_walk_stack: 1 when a stop frame ended it (kept as the last
     * frame returned, or past the cap and not returned) */
    int stopped;
} dft_walker;

/* Prepares w (probes process_vm_readv unless pipe_only; allocates the
 * cache).  0, or -1 when no safe copy works here (then nothing can be
 * walked).  pipe_only: always the pipe (the tests' way to check it).  Call
 * again after fork() in the child (the pid changed) once the old one is
 * closed. */
int dft_walk_open(dft_walker *w, int pipe_only);
void dft_walk_close(dft_walker *w);

/* Copies n bytes at src (any address, mapped or not) to dst: 0, or -1 when
 * some of it cannot be read. */
int dft_walk_copy(dft_walker *w, void *dst, const void *src, size_t n);

/* The thread states of interp, oldest first (the main thread first), at
 * most cap; one per thread id (a state made for a thread that has not
 * started yet still has its creator's ids: left out).  Returns how many. */
int dft_walk_threads(dft_walker *w, PyInterpreterState *interp, dft_walk_thread *out, int cap);

/* The complete Python frames of the thread state at tstate (an address
 * dft_walk_threads gave; it may have exited since), innermost first, at most
 * cap (and DFT_WALK_MAX_FRAMES) kept.  A deeper stack is cut: its innermost
 * cap frames are returned and the walk follows the links on (reading only
 * what the stop needs) to the bottom, so w->bottom and w->stopped say the
 * same of it as of a shallow one, up to DFT_WALK_MAX_DEPTH frames.  Returns
 * how many were kept (0: none, or the thread is gone). */
int dft_walk_stack(dft_walker *w, const void *tstate, dft_walk_frame *out, int cap);

/* The address of the calling thread's bottom frame (what dft_walk_stack
 * sets as bottom when it reaches it), or NULL when it runs no Python frame.
 * A walk of a thread that moved while it was read may follow a popped
 * frame's stale links and end early: one that ends at this frame did not.
 * The GIL held, in that thread. */
const void *dft_walk_bottom_here(void);

#endif
