/* core/trace_file.c: which file a trace is written to.
 *
 * A trace file is opened for appending without following a symbolic link.
 * The files this process created are remembered (path, device, inode), so a
 * later trace of the same process (initialize_log after finalize) appends to
 * its own file; anything else found at the path (an earlier run's file with
 * the same pid, a planted link) is never written to: a fallback name is used
 * instead (docs/configuration.md, "The trace file"). */
#include "core/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Any thread holding the writer's lock (or before any writer thread). */
int dft_trace_file_open(const char *path, char **actual, off_t *size)
{
    int created;
    int fd = open_trace_fd(path, &created);
    char *used = NULL;
    if (fd < 0 && (errno == EEXIST || errno == ELOOP)) {
        struct stat lst;
        const char *what = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)
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
        dft_log(DFT_LOG_ERROR, "trace file %s %s; not writing to it, tracing to %s instead",
                path, what, used);
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
