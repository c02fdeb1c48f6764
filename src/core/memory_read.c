/* core/memory_read.c: resident memory and the memory limit of this process, read
 * from /proc and the cgroup files.  Every function runs on any thread,
 * without the GIL, and allocates nothing. */
#include "core/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/owned_fd.h"

/* The statm descriptor, kept out of the program's way and checked before
 * each read (core/owned_fd.c: a program that closes its descriptors may
 * reuse the number), and the pid that opened it: /proc/self resolves at
 * open, so a forked child opens its own.  Lock-free: a forked child must not
 * inherit a lock held by a thread it does not have. */
static _Atomic int statm_fd = -1;
static _Atomic pid_t statm_pid;
static _Atomic dev_t statm_dev;
static _Atomic ino_t statm_ino;
static _Atomic long page_size;

/* Reads up to cap - 1 bytes of path at offset 0 into buf, NUL-terminated;
 * the length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, cap - 1, 0);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

/* The statm descriptor of this process, opened (again) when there is none
 * or the one kept is not statm any more; -1 when it cannot be opened.  The
 * parent's, inherited by a forked child, is left open there (it may still be
 * the parent's to use: the child never closes it). */
static int statm_get(void)
{
    pid_t me = getpid();
    int fd = atomic_load(&statm_fd);
    if (fd >= 0 && atomic_load(&statm_pid) == me) {
        dft_owned_fd kept = {.fd = fd, .dev = atomic_load(&statm_dev),
                             .ino = atomic_load(&statm_ino)};
        if (dft_owned_fd_check(&kept))
            return fd;
        /* the number is the program's now: forgotten, never closed */
        atomic_compare_exchange_strong(&statm_fd, &fd, -1);
        fd = -1;
    }
    dft_owned_fd mine;
    int nfd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (nfd < 0 || dft_owned_fd_adopt(&mine, nfd) != 0)
        return -1;
    atomic_store(&statm_dev, mine.dev); /* the same for every thread of this process */
    atomic_store(&statm_ino, mine.ino);
    /* Two threads racing here both open; one keeps its descriptor, the
     * other closes its own. */
    if (atomic_compare_exchange_strong(&statm_fd, &fd, mine.fd)) {
        atomic_store(&statm_pid, me);
        return mine.fd;
    }
    close(mine.fd);
    return atomic_load(&statm_pid) == me ? atomic_load(&statm_fd) : -1;
}

/* Any thread, no GIL (core/memory.h). */
void dft_mem_statm_close(void)
{
    int fd = atomic_load(&statm_fd);
    if (fd < 0 || atomic_load(&statm_pid) != getpid())
        return; /* none, or the parent's (a forked child never closes it) */
    dft_owned_fd kept = {.fd = fd, .dev = atomic_load(&statm_dev), .ino = atomic_load(&statm_ino)};
    /* the number may be the program's by now: then it is only forgotten */
    if (atomic_compare_exchange_strong(&statm_fd, &fd, -1) && dft_owned_fd_check(&kept))
        close(fd);
}

int64_t dft_mem_rss(void)
{
    long ps = atomic_load(&page_size);
    if (ps <= 0) {
        long p = sysconf(_SC_PAGESIZE);
        ps = p > 0 ? p : 4096;
        atomic_store(&page_size, ps);
    }
    int fd = statm_get();
    if (fd < 0)
        return -1;
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *end;
    strtoull(buf, &end, 10); /* size */
    if (end == buf)
        return -1;
    char *p = end;
    unsigned long long pages = strtoull(p, &end, 10);
    if (end == p)
        return -1;
    return (int64_t)pages * ps;
}

int64_t dft_mem_hwm(void)
{
    char buf[4096];
    if (read_small("/proc/self/status", buf, sizeof buf) < 0)
        return -1;
    const char *p = strstr(buf, "\nVmHWM:");
    if (!p)
        return -1;
    char *end;
    unsigned long long kb = strtoull(p + 7, &end, 10);
    return end == p + 7 ? -1 : (int64_t)kb * 1024;
}

/* "max" or a number of bytes in buf: 0 for none, the bytes, or -1. */
static int64_t parse_limit(const char *buf)
{
    while (*buf == ' ')
        buf++;
    if (strncmp(buf, "max", 3) == 0)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || errno)
        return -1;
    /* cgroup v1 says "no limit" with a page-rounded LONG_MAX */
    return v >= (1ULL << 62) ? 0 : (int64_t)v;
}

/* The cgroup path of this process for v2 ("0::/x") or for v1's memory
 * controller ("N:...memory...:/x") into out; 2, 1, or 0 when none. */
static int cgroup_path(char *out, size_t cap)
{
    char buf[4096];
    if (read_small("/proc/self/cgroup", buf, sizeof buf) < 0)
        return 0;
    int found = 0;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2) {
            int v2 = c1 == line + 1 && line[0] == '0' && c2 == c1 + 1;
            int v1 = 0;
            for (char *t = c1 + 1; t < c2 && !v1; t++)
                v1 = strncmp(t, "memory", 6) == 0 && (t + 6 == c2 || t[6] == ',');
            if ((v1 && found != 1) || (v2 && !found)) {
                snprintf(out, cap, "%s", c2 + 1);
                found = v1 ? 1 : 2;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return found;
}

int64_t dft_mem_limit(const char **source)
{
    *source = "";
    char cg[1024], path[1200], buf[64];
    int kind = cgroup_path(cg, sizeof cg);
    if (kind == 0)
        return -1;
    if (strcmp(cg, "/") == 0)
        cg[0] = 0;
    /* the tightest limit from the process's cgroup up to the root (a
     * parent's applies to its children) */
    const char *fmt = kind == 1 ? "/sys/fs/cgroup/memory%s/memory.limit_in_bytes"
                                : "/sys/fs/cgroup%s/memory.max";
    int64_t best = 0;
    int any = 0;
    for (;;) {
        snprintf(path, sizeof path, fmt, cg);
        if (read_small(path, buf, sizeof buf) >= 0) {
            int64_t v = parse_limit(buf);
            any |= v >= 0;
            if (v > 0 && (best == 0 || v < best))
                best = v;
        }
        char *slash = strrchr(cg, '/');
        if (!slash)
            break;
        *slash = 0;
    }
    if (!any)
        return -1;
    *source = kind == 1 ? "cgroup1" : "cgroup2";
    return best;
}
