/* core/trace_file.c: which file a trace is written to.
 *
 * A trace file is opened for appending without following a symbolic link.
 * The files this process created are remembered (path, device, inode), so a
 * later trace of the same process (initialize_log after finalize) appends to
 * its own file; anything else found at the path (an earlier run's file with
 * the same pid, a planted link) is never written to: a fallback name is used
 * instead (docs/configuration.md, "The trace file").  An exec()'d image finds
 * the file its own pid wrote before the exec: it takes the fallback name
 * quietly, since nothing is wrong. */
#include "core/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"

/* The files this process created (and may append to again, e.g. initialize_log
 * after finalize): anything else at a trace path is never written to. */
typedef struct owned_file {
    struct owned_file *next;
    dev_t dev;
    ino_t ino;
    char path[];
} owned_file;
static owned_file *owned;

static owned_file *owned_find(const char *path)
{
    for (owned_file *o = owned; o; o = o->next)
        if (strcmp(o->path, path) == 0)
            return o;
    return NULL;
}

static void owned_add(const char *path, const struct stat *st)
{
    owned_file *o = owned_find(path);
    if (!o) {
        o = malloc(sizeof *o + strlen(path) + 1);
        if (!o)
            return; /* only costs a fallback name if this file is opened again */
        strcpy(o->path, path);
        o->next = owned;
        owned = o;
    }
    o->dev = st->st_dev;
    o->ino = st->st_ino;
}

#define OPEN_FLAGS (O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)

/* Opens path for appending without following a symbolic link: a file this
 * process created (same device and inode) is appended to, anything else is
 * created new (O_EXCL).  Returns the fd, or -1 with errno (EEXIST or ELOOP:
 * something that is not ours is there). */
static int open_trace_fd(const char *path, int *created)
{
    *created = 0;
    const owned_file *o = owned_find(path);
    if (o) {
        /* O_NONBLOCK: a FIFO put in its place must not block the open. */
        int fd = open(path, OPEN_FLAGS | O_NONBLOCK);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == o->dev &&
                st.st_ino == o->ino && fcntl(fd, F_SETFL, O_APPEND) == 0)
                return fd;
            close(fd);
            errno = EEXIST; /* replaced since we wrote it */
            return -1;
        }
        if (errno != ENOENT) {
            errno = EEXIST; /* something we cannot open is there now */
            return -1;
        }
    }
    int fd = open(path, OPEN_FLAGS | O_CREAT | O_EXCL, 0644);
    if (fd >= 0)
        *created = 1;
    return fd;
}

/* The k-th fallback name: "<stem>-<host>-<pid>.<k>-app.pfw[.gz]" (or the path
 * with ".<k>" appended if it does not end that way).  NULL when out of memory. */
static char *fallback_name(const char *path, int k)
{
    size_t n = strlen(path);
    const char *tail = NULL;
    for (const char *t = strstr(path, "-app.pfw"); t; t = strstr(t + 1, "-app.pfw"))
        if (strcmp(t, "-app.pfw") == 0 || strcmp(t, "-app.pfw.gz") == 0)
            tail = t;
    size_t head = tail ? (size_t)(tail - path) : n;
    char *p = malloc(n + 16);
    if (p)
        snprintf(p, n + 16, "%.*s.%d%s", (int)head, path, k, tail ? tail : "");
    return p;
}

/* This process's start time on the wall clock (ns), from its start in clock
 * ticks since boot (/proc/self/stat, field 22: kept across exec()); 0 when
 * unknown.  Up to one tick early. */
static long long process_start_ns(void)
{
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return 0;
    /* after ')': field 3 (state) ... field 22 (starttime) */
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || hz <= 0)
        return 0;
    unsigned long long ticks = strtoull(p + 1, NULL, 10);
    struct timespec boot, wall;
    if (clock_gettime(CLOCK_BOOTTIME, &boot) != 0 || clock_gettime(CLOCK_REALTIME, &wall) != 0)
        return 0;
    long long since_boot = (long long)boot.tv_sec * 1000000000LL + boot.tv_nsec;
    long long started = (long long)(ticks / (unsigned long long)hz) * 1000000000LL +
                        (long long)(ticks % (unsigned long long)hz) * (1000000000LL / hz);
    return (long long)wall.tv_sec * 1000000000LL + wall.tv_nsec - (since_boot - started);
}

/* 1 when st (a regular file at our trace path) last changed after this
 * process started: this process wrote it, before an exec().  A file an earlier
 * process with the same pid left changed before that process ended, so before
 * this one started.  ctime, which no one can set back. */
static int written_before_exec(const struct stat *st)
{
    long long start = process_start_ns();
    long long changed = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
    return start > 0 && S_ISREG(st->st_mode) && changed >= start;
}

/* Any thread holding the writer's lock (or before any writer thread). */
int dft_trace_file_open(const char *path, int named_by_own_pid, char **actual, off_t *size)
{
    int created;
    int fd = open_trace_fd(path, &created);
    char *used = NULL;
    if (fd < 0 && (errno == EEXIST || errno == ELOOP)) {
        struct stat lst;
        int got = lstat(path, &lst) == 0;
        int quiet = got && named_by_own_pid && !owned_find(path) && written_before_exec(&lst);
        const char *what = quiet ? "was written by this process before exec()"
                           : got && S_ISLNK(lst.st_mode)
                               ? "is a symbolic link"
                               : "already exists and was not written by this process";
        int e = EEXIST;
        for (int k = 1; k <= 999 && fd < 0; k++) {
            free(used);
            used = fallback_name(path, k);
            if (!used) {
                e = ENOMEM;
                break;
            }
            fd = open_trace_fd(used, &created); /* ours from an earlier trace: appended */
            if (fd < 0 && errno != EEXIST && errno != ELOOP) {
                e = errno;
                break;
            }
        }
        if (fd < 0) {
            dft_log(DFT_LOG_ERROR, "trace file %s %s, and no fallback name could be created; "
                    "not tracing", path, what);
            free(used);
            errno = e;
            return -1;
        }
        dft_log(quiet ? DFT_LOG_INFO : DFT_LOG_ERROR,
                "trace file %s %s; not writing to it, tracing to %s instead", path, what, used);
    } else if (fd < 0) {
        return -1;
    } else if (!(used = strdup(path))) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        if (created)
            unlink(used);
        free(used);
        errno = e;
        return -1;
    }
    if (created)
        owned_add(used, &st);
    *actual = used;
    *size = st.st_size;
    return fd;
}

/* Single-threaded (a forked child). */
void dft_trace_file_forget_owned(void)
{
    while (owned) {
        owned_file *o = owned;
        owned = o->next;
        free(o);
    }
}
