/* core/trace_file.c: which file a trace is written to.
 *
 * A trace file is created new (O_EXCL) without following a symbolic link, and
 * is only ever written by the one trace that created it: a file is a whole
 * trace, with one header and at most one end (docs/trace-format.md, "Valid
 * files").  The paths this process already wrote are remembered, so a later
 * trace of the same process under the same stem (initialize_log after
 * finalize, or a new image after exec) goes on in the next numbered name
 * without a word; anything else found at the path (an earlier run's file with
 * the same pid, a planted link) is never written to either: a numbered name
 * is used and one error line says so (docs/configuration.md, "The trace
 * file"). */
#include "core/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/trace_name.h"

/* The files this process created: finished or being written, never opened
 * again. */
typedef struct written_file {
    struct written_file *next;
    char path[];
} written_file;
static written_file *written;

static int was_written(const char *path)
{
    for (written_file *w = written; w; w = w->next)
        if (strcmp(w->path, path) == 0)
            return 1;
    return 0;
}

static void remember_written(const char *path)
{
    written_file *w = malloc(sizeof *w + strlen(path) + 1);
    if (!w)
        return; /* only costs an error line if this name comes up again */
    strcpy(w->path, path);
    w->next = written;
    written = w;
}

/* Creates path for appending, never through a symbolic link, never over
 * anything there.  Returns the fd, or -1 with errno (EEXIST or ELOOP:
 * something is there). */
static int create_trace_fd(const char *path)
{
    if (was_written(path)) {
        errno = EEXIST;
        return -1;
    }
    return open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0644);
}

/* When this process started, in seconds since the epoch (exec keeps it):
 * its start tick in /proc/self/stat (CLOCK_BOOTTIME) plus the wall time of
 * boot; -1 when unknown.  Ticks are 10 ms: it may be up to one tick early. */
static double process_start_time(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* field 22 (starttime), counted after the command name's closing ')' */
    const char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    unsigned long long ticks;
    struct timespec real, boot;
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || sscanf(p + 1, "%llu", &ticks) != 1 || hz <= 0 ||
        clock_gettime(CLOCK_REALTIME, &real) != 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
        return -1;
    double booted = (double)(real.tv_sec - boot.tv_sec) + (double)(real.tv_nsec - boot.tv_nsec) * 1e-9;
    return booted + (double)ticks / (double)hz;
}

/* 1 when path is named with this process's pid and was last written after
 * the process started: by an image of this process before an exec, since an
 * earlier process with this pid had ended by then, and no other live process
 * has it.  (A name given by initialize_log's process_id says nothing.) */
static int written_before_exec(const char *path)
{
    struct stat st;
    if (!dft_trace_name_has_pid(path, (long)getpid()) || lstat(path, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return 0;
    double start = process_start_time();
    double mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    return start > 0 && mtime >= start;
}

/* Any thread holding the writer's lock (or before any writer thread). */
int dft_trace_file_open(const char *path, char **actual, off_t *size)
{
    int fd = create_trace_fd(path);
    char *used = NULL;
    if (fd < 0 && (errno == EEXIST || errno == ELOOP)) {
        /* an earlier trace of this process, in this image or before an exec */
        int ours = was_written(path) || written_before_exec(path);
        struct stat lst;
        const char *what = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)
                               ? "is a symbolic link"
                               : "already exists and was not written by this process";
        int e = EEXIST;
        for (int k = 1; k <= 999 && fd < 0; k++) {
            free(used);
            used = dft_trace_name_numbered(path, k);
            if (!used) {
                e = ENOMEM;
                break;
            }
            fd = create_trace_fd(used);
            if (fd < 0 && errno != EEXIST && errno != ELOOP) {
                e = errno;
                break;
            }
        }
        if (fd < 0) {
            dft_log(DFT_LOG_ERROR, "trace file %s %s, and no numbered name could be created; "
                    "not tracing", path, ours ? "was written by an earlier trace" : what);
            free(used);
            errno = e;
            return -1;
        }
        if (!ours)
            dft_log(DFT_LOG_ERROR, "trace file %s %s; not writing to it, tracing to %s instead",
                    path, what, used);
    } else if (fd < 0) {
        return -1;
    } else if (!(used = strdup(path))) {
        close(fd);
        unlink(path);
        errno = ENOMEM;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        unlink(used);
        free(used);
        errno = e;
        return -1;
    }
    remember_written(used);
    *actual = used;
    *size = st.st_size;
    return fd;
}

/* mkdir -p of path's first n bytes.  0, or -1 with errno. */
static int make_dirs(char *path, size_t n)
{
    struct stat st;
    char saved = path[n];
    path[n] = '\0';
    int rc = 0;
    if (stat(path, &st) != 0) {
        char *slash = strrchr(path, '/');
        while (slash && slash > path && slash[-1] == '/')
            slash--;
        if (slash && slash > path)
            rc = make_dirs(path, (size_t)(slash - path));
        if (rc == 0 && mkdir(path, 0777) != 0 && errno != EEXIST)
            rc = -1;
    } else if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        rc = -1;
    }
    path[n] = saved;
    return rc;
}

/* Any thread, no GIL. */
int dft_trace_file_make_dir(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path || cap == 0)
        return 0; /* the working directory, or / */
    size_t n = (size_t)(slash - path);
    snprintf(dir, cap, "%.*s", (int)n, path);
    if (n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return make_dirs(dir, n);
}

/* Single-threaded (a forked child). */
void dft_trace_file_forget_owned(void)
{
    while (written) {
        written_file *w = written;
        written = w->next;
        free(w);
    }
}

/* Caller holds the writer's lock; no GIL. */
/* Appends all of the file at `from` to fd.  0, or -1 with errno. */
static int copy_into(const char *from, int fd)
{
    int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return -1;
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -1 : 0;
            break;
        }
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(fd, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                if (w == 0)
                    errno = ENOSPC;
                rc = -1;
                break;
            }
            done += w;
        }
        if (rc != 0)
            break;
    }
    int e = errno;
    close(in);
    errno = e;
    return rc;
}

int dft_trace_file_rename(const char *from, const char *to, int *moved_fd)
{
    *moved_fd = -1;
    if (was_written(to)) {
        errno = EEXIST;
        return -1;
    }
    /* link() never replaces what is at `to` (rename() would). */
    if (link(from, to) == 0) {
        if (unlink(from) != 0) {
            int e = errno;
            unlink(to);
            errno = e;
            return -1;
        }
        remember_written(to);
        return 0;
    }
    if (errno != EXDEV)
        return -1;
    /* Another file system (a working directory on tmpfs): the bytes move,
     * so that nothing is left where the trace started. */
    int fd = create_trace_fd(to);
    if (fd < 0)
        return -1;
    if (copy_into(from, fd) != 0 || unlink(from) != 0) {
        int e = errno;
        close(fd);
        unlink(to);
        errno = e;
        return -1;
    }
    remember_written(to);
    *moved_fd = fd;
    return 0;
}
