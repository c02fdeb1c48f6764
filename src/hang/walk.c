/* hang/walk.c: the interpreter's thread states and frames, read without the
 * GIL through copies that cannot fault (hang/walk.h says why and how).
 *
 * Nothing here dereferences an interpreter pointer: each structure is copied
 * into a local first (dft_walk_copy), checked, and only the copy is used.
 * The layouts are this build's CPython's: the public cpython/ headers for the
 * thread state, the code object, strings and bytes; the frame is
 * PyFrameObject on 3.10 and the internal _PyInterpreterFrame (its header,
 * with Py_BUILD_CORE) on 3.11+.  Line numbers come from CPython's own
 * PyCode_Addr2Line called on a local copy of the code object whose line
 * table points at a local, bounded copy of the table's bytes: the function
 * only reads those two (on 3.11 its line array cache is cleared first).
 * All functions: a thread that is not a Python thread, no GIL. */
#include "hang/walk.h"

#if PY_VERSION_HEX >= 0x030B0000
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#include <frameobject.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define DFT_WALK_TABLE (256 * 1024) /* the longest line table read (bytes) */
#define MAX_NAME_CHARS 4096         /* a longer name is not a code object's */
#define CHUNK 4096                  /* one pipe write: at most PIPE_BUF, atomic */
#define TABLE_SLACK 16              /* zeros after a table: a torn varint stops there */
#define FRAME_PAGE 4096             /* what one frame read copies at most: the 4 KiB
                                     * around a frame lie in the pages that hold it */

struct dft_walk_code {
    const void *code;  /* the code object's address; NULL: empty */
    const void *names[3]; /* co_filename, co_name, co_linetable when cached */
    int firstlineno;
    char file[DFT_WALK_FILE];
    char func[DFT_WALK_FUNC];
};

/* ---- copies that cannot fault ------------------------------------------- */

static int copy_vm(pid_t pid, void *dst, const void *src, size_t n)
{
    struct iovec local = {.iov_base = dst, .iov_len = n};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)src, .iov_len = n};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

/* Reads back what a write put into the pipe (it is non-blocking and was
 * empty, so all of it is there). */
static int drain(int fd, char *dst, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, dst, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        dst += r;
        n -= (size_t)r;
    }
    return 0;
}

/* write(2) from an unmapped address fails with EFAULT, where a load would
 * fault: the address is copied by the kernel into the pipe, then read back. */
static int copy_pipe(dft_walker *w, void *dst, const void *src, size_t n)
{
    char scratch[CHUNK];
    char *out = dst;
    const char *in = src;
    while (n > 0) {
        size_t c = n < CHUNK ? n : CHUNK;
        ssize_t wr = write(w->pipe_fd[1], in, c);
        if (wr < 0 && errno == EINTR)
            continue;
        if (wr <= 0)
            return -1;
        /* a short write (a fault part way) leaves the pipe to be emptied */
        if (drain(w->pipe_fd[0], (size_t)wr == c ? out : scratch, (size_t)wr) != 0 ||
            (size_t)wr != c)
            return -1;
        out += c;
        in += c;
        n -= c;
    }
    return 0;
}

int dft_walk_copy(dft_walker *w, void *dst, const void *src, size_t n)
{
    if (!src)
        return -1;
    if (n == 0)
        return 0;
    return w->use_pipe ? copy_pipe(w, dst, src, n) : copy_vm(w->pid, dst, src, n);
}

int dft_walk_open(dft_walker *w, int pipe_only)
{
    memset(w, 0, sizeof *w);
    w->pipe_fd[0] = w->pipe_fd[1] = -1;
    w->pid = getpid();
    long probe = 42, got = 0;
    if (pipe_only || copy_vm(w->pid, &got, &probe, sizeof probe) != 0 || got != probe) {
        /* refused (seccomp, an old kernel): the pipe */
        if (pipe2(w->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0)
            return -1;
        w->use_pipe = 1;
    }
    w->table = malloc(offsetof(PyBytesObject, ob_sval) + DFT_WALK_TABLE + TABLE_SLACK);
    if (!w->table) {
        dft_walk_close(w);
        return -1;
    }
    w->cache = calloc(DFT_WALK_CACHE, sizeof *w->cache); /* NULL: no cache */
#if PY_VERSION_HEX >= 0x030B0000
    w->page = malloc(FRAME_PAGE + sizeof(_PyInterpreterFrame)); /* NULL: one copy a frame */
#endif
    return 0;
}

void dft_walk_close(dft_walker *w)
{
    for (int i = 0; i < 2; i++)
        if (w->pipe_fd[i] >= 0)
            close(w->pipe_fd[i]);
    w->pipe_fd[0] = w->pipe_fd[1] = -1;
    free(w->cache);
    free(w->table);
    free(w->page);
    w->cache = NULL;
    w->table = NULL;
    w->page = NULL;
}

/* ---- objects ------------------------------------------------------------ */

/* Appends code point c as UTF-8 when it fits (with the NUL); 0 when not. */
static int put_utf8(char *out, size_t cap, size_t *at, uint32_t c)
{
    char b[4];
    size_t n;
    if ((c >= 0xD800 && c <= 0xDFFF) || c < 0x20) /* a lone surrogate; a control character */
        c = '?';
    if (c < 0x80) {
        b[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (char)(0xC0 | c >> 6);
        b[1] = (char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12);
        b[1] = (char)(0x80 | (c >> 6 & 0x3F));
        b[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else if (c < 0x110000) {
        b[0] = (char)(0xF0 | c >> 18);
        b[1] = (char)(0x80 | (c >> 12 & 0x3F));
        b[2] = (char)(0x80 | (c >> 6 & 0x3F));
        b[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    } else {
        b[0] = '?';
        n = 1;
    }
    if (*at + n >= cap)
        return 0;
    memcpy(out + *at, b, n);
    *at += n;
    return 1;
}

/* The str at addr as UTF-8 into out (cut to cap): 0, or -1 when it is not a
 * compact str (code objects' names always are). */
static int copy_str(dft_walker *w, const void *addr, char *out, size_t cap)
{
    PyASCIIObject a;
    out[0] = 0;
    if (dft_walk_copy(w, &a, addr, sizeof a) != 0 || Py_TYPE((PyObject *)&a) != &PyUnicode_Type ||
        !a.state.compact || a.length < 0 || a.length > MAX_NAME_CHARS)
        return -1;
    size_t len = (size_t)a.length, at = 0;
    if (a.state.ascii) {
        size_t n = len < cap - 1 ? len : cap - 1;
        if (dft_walk_copy(w, out, (const char *)addr + sizeof(PyASCIIObject), n) != 0)
            return -1;
        out[n] = 0;
        for (size_t i = 0; i < n; i++) /* not ASCII after all (a torn copy), or a
                                         * control character that would break the
                                         * "file:line function" lines */
            if ((unsigned char)out[i] >= 0x80 || (unsigned char)out[i] < 0x20)
                out[i] = '?';
        return 0;
    }
    unsigned kind = a.state.kind;
    if (kind != 1 && kind != 2 && kind != 4)
        return -1;
    size_t n = len < cap - 1 ? len : cap - 1; /* at least one byte per code point */
    unsigned char raw[(DFT_WALK_FILE - 1) * 4];
    if (n * kind > sizeof raw)
        n = sizeof raw / kind;
    if (dft_walk_copy(w, raw, (const char *)addr + sizeof(PyCompactUnicodeObject), n * kind) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        if (kind == 1)
            c = raw[i];
        else if (kind == 2) {
            uint16_t v;
            memcpy(&v, raw + 2 * i, 2);
            c = v;
        } else
            memcpy(&c, raw + 4 * i, 4);
        if (!put_utf8(out, cap, &at, c))
            break;
    }
    out[at] = 0;
    return 0;
}

/* The line of byte offset addrq in the code object co (a local copy): its
 * line table copied into w->table, CPython's decoder run on the copies. */
static int line_of(dft_walker *w, PyCodeObject *co, int addrq)
{
    if (addrq < 0)
        return co->co_firstlineno;
    const size_t head = offsetof(PyBytesObject, ob_sval);
    PyBytesObject *b = (PyBytesObject *)w->table;
    if (dft_walk_copy(w, b, co->co_linetable, head) != 0 ||
        Py_TYPE((PyObject *)b) != &PyBytes_Type)
        return 0;
    Py_ssize_t n = Py_SIZE(b);
    if (n < 0 || n > DFT_WALK_TABLE ||
        dft_walk_copy(w, w->table + head, (const char *)co->co_linetable + head, (size_t)n) != 0)
        return 0;
    memset(w->table + head + n, 0, TABLE_SLACK);
    co->co_linetable = (PyObject *)b;
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    co->_co_linearray = NULL; /* its own line cache: not copied */
#endif
    int line = PyCode_Addr2Line(co, addrq);
    return line > 0 ? line : 0;
}

/* The names of the code object at addr (its header copied into co), from
 * the cache when the same object is still there. */
static int code_names(dft_walker *w, const void *addr, const PyCodeObject *co, dft_walk_frame *f)
{
    dft_walk_code *e = NULL;
    if (w->cache) {
        e = &w->cache[((uintptr_t)addr >> 4) % DFT_WALK_CACHE];
        if (e->code == addr && e->names[0] == co->co_filename && e->names[1] == co->co_name &&
            e->names[2] == co->co_linetable && e->firstlineno == co->co_firstlineno) {
            memcpy(f->file, e->file, sizeof f->file);
            memcpy(f->func, e->func, sizeof f->func);
            return 0;
        }
    }
    if (copy_str(w, co->co_filename, f->file, sizeof f->file) != 0)
        snprintf(f->file, sizeof f->file, "?");
    if (copy_str(w, co->co_name, f->func, sizeof f->func) != 0)
        snprintf(f->func, sizeof f->func, "?");
    if (e) {
        e->code = addr;
        e->names[0] = co->co_filename;
        e->names[1] = co->co_name;
        e->names[2] = co->co_linetable;
        e->firstlineno = co->co_firstlineno;
        memcpy(e->file, f->file, sizeof e->file);
        memcpy(e->func, f->func, sizeof e->func);
    }
    return 0;
}

/* Copies the code object at addr into co: 0 when it is one. */
static int copy_code(dft_walker *w, const void *addr, PyCodeObject *co)
{
    return dft_walk_copy(w, co, addr, sizeof *co) == 0 &&
                   Py_TYPE((PyObject *)co) == &PyCode_Type && co->co_firstlineno >= 0
               ? 0
               : -1;
}

/* ---- threads and frames ------------------------------------------------- */

int dft_walk_threads(dft_walker *w, PyInterpreterState *interp, dft_walk_thread *out, int cap)
{
    /* the head is read from the interpreter (which lives as long as the
     * process); every thread state through copies */
    const PyThreadState *t = PyInterpreterState_ThreadHead(interp);
    const void *seen[DFT_WALK_MAX_THREADS];
    int n = 0, kept = 0;
    while (t && n < DFT_WALK_MAX_THREADS) {
        PyThreadState ts;
        if (dft_walk_copy(w, &ts, t, sizeof ts) != 0 || ts.interp != interp)
            break; /* freed under us: the list ends here */
        seen[n++] = t;
        t = ts.next;
    }
    /* newest first in the list: out gets the oldest first (the main thread) */
    for (int i = n - 1; i >= 0 && kept < cap; i--) {
        PyThreadState ts;
        if (dft_walk_copy(w, &ts, seen[i], sizeof ts) != 0 || ts.interp != interp)
            continue;
        long native = 0;
#if PY_VERSION_HEX >= 0x030B0000
        native = (long)ts.native_thread_id;
#endif
        /* a thread state made for a thread not started yet still carries
         * its creator's ids (the new thread sets its ident, then its native
         * id): the creator, older, is listed already */
        int dup = 0;
        for (int j = 0; j < kept && !dup; j++)
            dup = out[j].ident == ts.thread_id || (native > 0 && out[j].native == native);
        if (dup)
            continue;
        out[kept].tstate = seen[i];
        out[kept].ident = ts.thread_id;
        out[kept].native = native;
        kept++;
    }
    return kept;
}

#if PY_VERSION_HEX >= 0x030B0000
/* The frame header (n bytes) at at into dst.  A thread's frames lie in a row
 * in its data stack, each below the one it called: one copy of the page up
 * to a header's end serves the frames below it in that page (a stack 100
 * frames deep is a few copies, not 100).  The top frame (first) is copied
 * alone: most walks of the sampler end there. */
static int copy_frame(dft_walker *w, void *dst, const void *at, size_t n, int first)
{
    uintptr_t a = (uintptr_t)at;
    if (!w->page || first)
        return dft_walk_copy(w, dst, at, n);
    if (!(w->page_len && a >= w->page_at && a - w->page_at + n <= w->page_len)) {
        uintptr_t from = a & ~(uintptr_t)(FRAME_PAGE - 1);
        w->page_len = 0;
        if (dft_walk_copy(w, w->page, (const void *)from, a - from + n) != 0)
            return -1;
        w->page_at = from;
        w->page_len = a - from + n;
    }
    memcpy(dst, w->page + (a - w->page_at), n);
    return 0;
}
#endif

/* The newest frame of the thread state at tstate, or NULL. */
static const void *top_frame(dft_walker *w, const void *tstate)
{
    PyThreadState ts;
    if (dft_walk_copy(w, &ts, tstate, sizeof ts) != 0)
        return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    return ts.current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
    _PyCFrame cf;
    if (dft_walk_copy(w, &cf, ts.cframe, sizeof cf) != 0)
        return NULL;
    return cf.current_frame;
#else
    return ts.frame;
#endif
}

int dft_walk_stack(dft_walker *w, const void *tstate, dft_walk_frame *out, int cap)
{
    if (cap > DFT_WALK_MAX_FRAMES)
        cap = DFT_WALK_MAX_FRAMES;
    const void *at = top_frame(w, tstate), *last = NULL;
    int n = 0;
    dft_walk_frame past; /* a frame beyond the kept ones: its names for the stop */
    PyCodeObject co;
    const void *co_at = NULL; /* the code object co holds (a recursion's frames share it) */
    w->bottom = NULL;
    w->page_len = 0;
    w->depth = 0;
    w->stopped = 0;
    /* past the cap the links are followed on (the bottom is what tells a
     * sound walk from one that followed stale links), the frames not kept;
     * at most twice as many frames visited as counted (incomplete ones are
     * skipped): a cycle ends there */
    for (int visited = 0; at && w->depth < DFT_WALK_MAX_DEPTH && visited < 2 * DFT_WALK_MAX_DEPTH;
         visited++) {
        const void *code;
        int addrq;
        /* not kept and no stop to check: only the link is needed */
        int link_only = n >= cap && !w->stop;
#if PY_VERSION_HEX >= 0x030B0000
        _PyInterpreterFrame fr;
        if (copy_frame(w, &fr, at, offsetof(_PyInterpreterFrame, localsplus), visited == 0) != 0)
            break;
        last = at;
        const void *next = fr.previous;
#if PY_VERSION_HEX >= 0x030D0000
        code = fr.f_executable;
        const _Py_CODEUNIT *instr = fr.instr_ptr;
#else
        code = fr.f_code;
        const _Py_CODEUNIT *instr = fr.prev_instr;
#endif
#if PY_VERSION_HEX >= 0x030C0000
        if (fr.owner == FRAME_OWNED_BY_CSTACK) { /* the C stack's shim frame */
            at = next;
            continue;
        }
#endif
        if (link_only) {
            w->depth++;
            at = next;
            continue;
        }
        if (code != co_at && (co_at = copy_code(w, code, &co) == 0 ? code : NULL) == NULL) {
            at = next; /* 3.13: None for a frame without code */
            continue;
        }
        const _Py_CODEUNIT *first =
            (const _Py_CODEUNIT *)((const char *)code + offsetof(PyCodeObject, co_code_adaptive));
        /* not yet a complete frame (as CPython's _PyFrame_IsIncomplete) */
        if (fr.owner != FRAME_OWNED_BY_GENERATOR && instr < first + co._co_firsttraceable) {
            at = next;
            continue;
        }
        ptrdiff_t lasti = instr - first;
        addrq = lasti < 0 || lasti > Py_SIZE((PyObject *)&co) ? -1
                                                               : (int)lasti * (int)sizeof(_Py_CODEUNIT);
#else
        PyFrameObject fr;
        if (dft_walk_copy(w, &fr, at, sizeof fr) != 0 || Py_TYPE((PyObject *)&fr) != &PyFrame_Type)
            break;
        last = at;
        const void *next = fr.f_back;
        code = fr.f_code;
        if (link_only) {
            w->depth++;
            at = next;
            continue;
        }
        if (code != co_at && (co_at = copy_code(w, code, &co) == 0 ? code : NULL) == NULL) {
            at = next;
            continue;
        }
        addrq = fr.f_lasti < 0 || fr.f_lasti > INT32_MAX / 2 ? -1 : fr.f_lasti * 2;
#endif
        w->depth++;
        dft_walk_frame *f = n < cap ? &out[n] : &past;
        code_names(w, code, &co, f);
        if (w->no_lines || f == &past)
            f->line = 0;
#if PY_VERSION_HEX < 0x030B0000
        else if (fr.f_lineno > 0) /* set while tracing: CPython's own answer */
            f->line = fr.f_lineno;
#endif
        else {
            PyCodeObject lines = co; /* line_of points its table at the walker's copy */
            f->line = line_of(w, &lines, addrq);
        }
        if (f != &past)
            n++;
        if (w->stop && w->stop(f)) {
            w->stopped = 1;
            return n;
        }
        at = next;
    }
    if (!at)
        w->bottom = last;
    return n;
}

/* The GIL held: the frames are read in place (this thread cannot move). */
const void *dft_walk_bottom_here(void)
{
    PyThreadState *ts = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
    const _PyInterpreterFrame *f = ts->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
    const _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#else
    const PyFrameObject *f = ts->frame;
#endif
    if (!f)
        return NULL;
#if PY_VERSION_HEX >= 0x030B0000
    while (f->previous)
        f = f->previous;
#else
    while (f->f_back)
        f = f->f_back;
#endif
    return f;
}
