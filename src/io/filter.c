/* io/filter.c: DFTRACER_DATA_DIR prefixes and the descriptor/mapping tables.
 *
 * Everything called from a wrapper runs without the GIL, takes no lock and
 * never calls malloc: table pages come from mmap and are installed with a
 * compare-and-swap, so a wrapper stays usable wherever libc's own function
 * is.  Prefixes are parsed under life_lock (io_start) before any wrapper is
 * installed and freed only after every wrapper has been removed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/core.h"
#include "io/filter.h"

_Atomic(dft_fd_slot *) dft_fd_pages[DFT_FD_PAGES];

typedef struct prefix {
    char *s;
    size_t len;
} prefix;

static void maps_reset(void);

static prefix *prefixes;
static size_t nprefixes;
static int trace_all;

/* Entries that did not exist when the trace started (as written, and
 * absolute): a program that makes its data folder after starting the tracer
 * is right, so they are warned about only if still missing at the end. */
typedef struct missing_entry {
    char *written, *absolute;
} missing_entry;
static missing_entry *missing;
static size_t nmissing;

/* One process of a job warns about them (docs/io-tracing.md, "Turning it
 * on"): the one whose trace found them missing (a forked child inherits
 * the list and stays quiet), unless it is a rank other than 0 or a process
 * started by a traced one (that one warns); and once, however many traces
 * it writes. */
static pid_t missing_owner;
static int missing_quiet;
static pid_t warned_pid;

/* Remembers a missing entry; 0, or -1 out of memory. */
static int remember_missing(const char *s, size_t len, const char *absolute)
{
    missing_entry *grown = realloc(missing, (nmissing + 1) * sizeof *grown);
    if (!grown)
        return -1;
    missing = grown;
    char *written = strndup(s, len), *abs_copy = strdup(absolute);
    if (!written || !abs_copy) {
        free(written);
        free(abs_copy);
        return -1;
    }
    missing[nmissing++] = (missing_entry){written, abs_copy};
    return 0;
}

static void missing_reset(void)
{
    for (size_t i = 0; i < nmissing; i++) {
        free(missing[i].written);
        free(missing[i].absolute);
    }
    free(missing);
    missing = NULL;
    nmissing = 0;
}

/* ---- paths ------------------------------------------------------------- */

/* Lexically normalises the absolute path in buf (length n) in place: removes
 * empty and "." components and resolves ".." without following links.
 * Returns the new length (>= 1). */
static size_t normalize(char *buf, size_t n)
{
    size_t o = 0; /* output length; buf[0] is '/' */
    size_t i = 0;
    while (i < n) {
        while (i < n && buf[i] == '/')
            i++;
        size_t start = i;
        while (i < n && buf[i] != '/')
            i++;
        size_t len = i - start;
        if (len == 0 || (len == 1 && buf[start] == '.'))
            continue;
        if (len == 2 && buf[start] == '.' && buf[start + 1] == '.') {
            while (o > 0 && buf[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* drop the separator too */
            continue;
        }
        buf[o++] = '/';
        memmove(buf + o, buf + start, len);
        o += len;
    }
    if (o == 0)
        buf[o++] = '/';
    buf[o] = '\0';
    return o;
}

/* The directory of dirfd (AT_FDCWD: the working directory) into out.
 * Returns its length, or 0 when unknown.  Async-signal-safe syscalls only
 * for a real descriptor; getcwd() for the working directory. */
static size_t dir_of(int dirfd, char *out, size_t cap)
{
    if (dirfd == AT_FDCWD) {
        if (!getcwd(out, cap))
            return 0;
        return strlen(out);
    }
    char link[32] = "/proc/self/fd/";
    char digits[12];
    int nd = 0;
    unsigned v = (unsigned)dirfd;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && nd < (int)sizeof digits);
    size_t l = strlen(link);
    while (nd > 0)
        link[l++] = digits[--nd];
    link[l] = '\0';
    ssize_t r = readlink(link, out, cap - 1);
    if (r <= 0 || out[0] != '/')
        return 0;
    out[r] = '\0';
    return (size_t)r;
}

/* Any thread, no GIL. */
size_t dft_io_path_traced(int dirfd, const char *path, char *out, size_t cap)
{
    if (!path || !nprefixes)
        return 0;
    size_t n;
    size_t plen = strlen(path);
    if (path[0] == '/') {
        if (plen + 1 > cap)
            return 0;
        memcpy(out, path, plen + 1);
        n = plen;
    } else {
        n = dir_of(dirfd, out, cap);
        if (n == 0 || n + 1 + plen + 1 > cap)
            return 0;
        out[n++] = '/';
        memcpy(out + n, path, plen + 1);
        n += plen;
    }
    n = normalize(out, n);
    if (trace_all)
        return n;
    for (size_t i = 0; i < nprefixes; i++) {
        const prefix *p = &prefixes[i];
        if (p->len == 1 || (n >= p->len && memcmp(out, p->s, p->len) == 0 &&
                            (out[p->len] == '\0' || out[p->len] == '/')))
            return n;
    }
    return 0;
}

static int add_prefix(const char *s, size_t len)
{
    char buf[PATH_MAX];
    size_t n = 0;
    if (s[0] != '/') {
        if (!getcwd(buf, sizeof buf))
            return 0; /* cannot resolve: skipped */
        n = strlen(buf);
        if (n + 1 + len + 1 > sizeof buf)
            return 0;
        buf[n++] = '/';
    } else if (len + 1 > sizeof buf) {
        return 0;
    }
    memcpy(buf + n, s, len);
    n = normalize(buf, n + len);
    char *resolved = realpath(buf, NULL); /* also match through a symlinked dir */
    if (!resolved && (errno == ENOENT || errno == ENOTDIR) && remember_missing(s, len, buf) != 0)
        return -1;
    const char *forms[2] = {buf, resolved && strcmp(resolved, buf) ? resolved : NULL};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!forms[k])
            continue;
        prefix *grown = realloc(prefixes, (nprefixes + 1) * sizeof *grown);
        char *copy = grown ? strdup(forms[k]) : NULL;
        if (grown)
            prefixes = grown;
        if (!copy) {
            rc = -1;
            break;
        }
        prefixes[nprefixes].s = copy;
        prefixes[nprefixes].len = strlen(copy);
        nprefixes++;
    }
    free(resolved);
    return rc;
}

/* ---- who warns about missing entries ---------------------------------- */

/* The parent of pid, from /proc/<pid>/stat, or -1. */
static pid_t parent_of(pid_t pid)
{
    char path[40], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold ") " itself */
    int ppid;
    if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

static int ends_with(const char *s, size_t n, const char *tail)
{
    size_t t = strlen(tail);
    return n >= t && memcmp(s + n - t, tail, t) == 0;
}

/* 1 when process pid holds a trace file open (docs/trace-format.md,
 * "Files": "...-app.pfw[.gz]"): it is traced.  0 when it holds none or its
 * descriptors cannot be read (another user's process). */
static int holds_trace(pid_t pid)
{
    char dir[40], target[PATH_MAX];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    const struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (n <= 0)
            continue;
        found = ends_with(target, (size_t)n, "-app.pfw") || ends_with(target, (size_t)n, "-app.pfw.gz");
    }
    closedir(d);
    return found;
}

/* 1 when a process above this one (its parent, theirs, ... up to 64) is
 * traced: a worker spawned by a traced program, a rank under a traced
 * launcher, a forkserver's child.  Read while they still run: at start. */
static int traced_ancestor(void)
{
    pid_t p = getppid();
    for (int depth = 0; p > 1 && depth < 64; depth++) {
        if (holds_trace(p))
            return 1;
        p = parent_of(p);
    }
    return 0;
}

/* Under life_lock, before the wrappers are installed. */
int dft_io_filter_init(const char *data_dir)
{
    dft_io_filter_reset();
    if (!data_dir || !*data_dir)
        return 0;
    if (strcmp(data_dir, "all") == 0) {
        trace_all = 1;
        nprefixes = 1;
        return 1;
    }
    const char *p = data_dir;
    while (*p) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && add_prefix(p, len) < 0) {
            dft_io_filter_reset();
            return -1;
        }
        p += len;
        if (*p == ':')
            p++;
    }
    missing_owner = getpid();
    missing_quiet = nmissing && (dft_identity_env_rank() > 0 || traced_ancestor());
    return (int)nprefixes;
}

/* Under life_lock, when the trace is finalized: one warning line naming the
 * entries that never came to exist (a typo: nothing under them was traced),
 * from one process of the job (see missing_owner). */
void dft_io_filter_warn_missing(void)
{
    pid_t self = getpid();
    if (!nmissing || self != missing_owner || missing_quiet || warned_pid == self) {
        missing_reset();
        return;
    }
    char names[640];
    size_t len = 0;
    unsigned named = 0, more = 0;
    for (size_t i = 0; i < nmissing; i++) {
        if (access(missing[i].absolute, F_OK) == 0)
            continue;
        /* the first always fits (cut at 600 bytes); the rest while they do */
        int n = snprintf(names + len, sizeof names - len, "%s'%.600s'", named ? ", " : "",
                         missing[i].written);
        if (n < 0 || (size_t)n >= sizeof names - len) {
            names[len] = '\0';
            more++;
            continue;
        }
        len += (size_t)n;
        named++;
    }
    if (named == 1 && !more)
        dft_warn_config("DFTRACER_DATA_DIR entry %s does not exist; nothing under it was traced",
                        names);
    else if (more)
        dft_warn_config("DFTRACER_DATA_DIR entries %s and %u more do not exist; nothing under "
                        "them was traced", names, more);
    else if (named)
        dft_warn_config("DFTRACER_DATA_DIR entries %s do not exist; nothing under them was "
                        "traced", names);
    if (named + more)
        warned_pid = self;
    missing_reset();
}

/* Under life_lock, after the wrappers are removed. */
void dft_io_filter_reset(void)
{
    missing_reset();
    if (!trace_all)
        for (size_t i = 0; i < nprefixes; i++)
            free(prefixes[i].s);
    free(prefixes);
    prefixes = NULL;
    nprefixes = 0;
    trace_all = 0;
    for (size_t i = 0; i < DFT_FD_PAGES; i++) {
        dft_fd_slot *page = atomic_load(&dft_fd_pages[i]);
        if (page)
            memset(page, 0, DFT_FD_PAGE * sizeof *page);
    }
    maps_reset();
}

/* ---- descriptors ------------------------------------------------------- */

/* Any thread, no GIL; mmap only. */
static dft_fd_slot *slot_for(int fd)
{
    if (fd < 0 || (unsigned)fd >= DFT_FD_PAGES * DFT_FD_PAGE)
        return NULL;
    _Atomic(dft_fd_slot *) *pp = &dft_fd_pages[(unsigned)fd >> DFT_FD_PAGE_BITS];
    dft_fd_slot *page = atomic_load_explicit(pp, memory_order_acquire);
    if (!page) {
        void *m = mmap(NULL, DFT_FD_PAGE * sizeof *page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        dft_fd_slot *expected = NULL;
        if (atomic_compare_exchange_strong(pp, &expected, (dft_fd_slot *)m)) {
            page = m;
        } else {
            munmap(m, DFT_FD_PAGE * sizeof *page);
            page = expected;
        }
    }
    return &page[(unsigned)fd & (DFT_FD_PAGE - 1)];
}

/* Any thread, no GIL. */
void dft_io_fd_track(int fd, uint64_t hash)
{
    dft_fd_slot *s = slot_for(fd);
    if (!s || !hash)
        return;
    atomic_store_explicit(&s->gen, dft_trace_gen(), memory_order_relaxed);
    atomic_store_explicit(&s->hash, hash, memory_order_release);
}

/* Any thread, no GIL. */
void dft_io_fd_untrack(int fd)
{
    dft_fd_slot *s = dft_io_fd_slot(fd);
    if (s)
        atomic_store_explicit(&s->hash, 0, memory_order_relaxed);
}

/* Any thread, no GIL. */
uint64_t dft_io_fd_hash(dft_fd_slot *s, int fd)
{
    uint64_t h = atomic_load_explicit(&s->hash, memory_order_relaxed);
    uint64_t gen = dft_trace_gen();
    if (__builtin_expect(atomic_load_explicit(&s->gen, memory_order_relaxed) == gen, 1))
        return h;
    /* Opened before fork(): define the path in this process's file. */
    char path[PATH_MAX];
    size_t n = dir_of(fd, path, sizeof path);
    if (n) {
        uint64_t nh = dft_intern(DFT_INTERN_FILE, path, n);
        if (nh)
            h = nh;
        atomic_store_explicit(&s->hash, h, memory_order_relaxed);
    }
    atomic_store_explicit(&s->gen, gen, memory_order_relaxed);
    return h;
}

/* ---- memory maps ------------------------------------------------------- */

#define MAP_SLOTS 1024

static struct {
    _Atomic(uintptr_t) addr;
    _Atomic(size_t) len;
    _Atomic uint64_t hash;
    _Atomic uint64_t gen;
} maps[MAP_SLOTS];
static _Atomic int nmaps;

/* Any thread, no GIL.  A full table only loses the munmap event. */
void dft_io_map_track(void *addr, size_t len, uint64_t hash)
{
    for (size_t i = 0; i < MAP_SLOTS; i++) {
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong(&maps[i].addr, &expected, (uintptr_t)addr)) {
            atomic_store(&maps[i].len, len);
            atomic_store(&maps[i].gen, dft_trace_gen());
            atomic_store(&maps[i].hash, hash);
            atomic_fetch_add(&nmaps, 1);
            return;
        }
    }
}

/* Any thread, no GIL. */
uint64_t dft_io_map_untrack(void *addr)
{
    if (atomic_load_explicit(&nmaps, memory_order_relaxed) == 0)
        return 0;
    for (size_t i = 0; i < MAP_SLOTS; i++) {
        if (atomic_load_explicit(&maps[i].addr, memory_order_relaxed) != (uintptr_t)addr)
            continue;
        uint64_t h = atomic_load(&maps[i].hash);
        if (atomic_load(&maps[i].gen) != dft_trace_gen())
            h = 0; /* mapped before fork(): its FH line is in the parent's file */
        uintptr_t expected = (uintptr_t)addr;
        if (atomic_compare_exchange_strong(&maps[i].addr, &expected, 0)) {
            atomic_fetch_sub(&nmaps, 1);
            return h;
        }
    }
    return 0;
}

/* Any thread, no GIL.  A slot being filled in may read as another map's
 * length for an instant: at worst one msync is traced or not by mistake. */
uint64_t dft_io_map_find(const void *addr)
{
    if (atomic_load_explicit(&nmaps, memory_order_relaxed) == 0)
        return 0;
    uintptr_t a = (uintptr_t)addr;
    for (size_t i = 0; i < MAP_SLOTS; i++) {
        uintptr_t start = atomic_load_explicit(&maps[i].addr, memory_order_relaxed);
        if (!start || a < start || a - start >= atomic_load(&maps[i].len))
            continue;
        if (atomic_load(&maps[i].gen) != dft_trace_gen())
            return 0; /* mapped before fork(): its FH line is in the parent's file */
        return atomic_load(&maps[i].hash);
    }
    return 0;
}

static void maps_reset(void)
{
    for (size_t i = 0; i < MAP_SLOTS; i++)
        atomic_store(&maps[i].addr, 0);
    atomic_store(&nmaps, 0);
}
