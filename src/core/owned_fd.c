/* core/owned_fd.c: the tracer's long-lived descriptors, kept out of the
 * program's way (core/owned_fd.h).
 *
 * A program may close every descriptor above 2 and open its own files: the
 * kernel hands out the lowest free number, so the program's next file would
 * get the number of the trace file, and a writer that trusted its number
 * would append gzip members to the program's file.  Each descriptor is moved
 * high (half the soft RLIMIT_NOFILE, at most FD_FLOOR_MAX, where a program
 * rarely reaches) and remembered by device and inode; one fstat() before a
 * use tells whether it is still ours.  Every function here is
 * async-signal-safe (fcntl, fstat, close) and runs on any thread without the
 * GIL. */
#include "core/owned_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define FD_FLOOR_MAX 1024

/* The lowest number an owned descriptor takes. */
static int fd_floor(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return FD_FLOOR_MAX;
    rlim_t half = rl.rlim_cur / 2;
    return half > FD_FLOOR_MAX ? FD_FLOOR_MAX : half < 3 ? 3 : (int)half;
}

int dft_owned_fd_adopt(dft_owned_fd *o, int fd)
{
    int high = fcntl(fd, F_DUPFD_CLOEXEC, fd_floor());
    if (high >= 0) {
        close(fd); /* the low number goes back to the program */
        fd = high;
    } /* else (no free number up there): the descriptor stays where it is */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        o->fd = -1;
        errno = e;
        return -1;
    }
    o->fd = fd;
    o->dev = st.st_dev;
    o->ino = st.st_ino;
    return 0;
}

int dft_owned_fd_check(dft_owned_fd *o)
{
    if (o->fd < 0)
        return 0;
    struct stat st;
    if (fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino)
        return 1;
    o->fd = -1; /* closed by the program, or a file of its own now */
    return 0;
}

int dft_owned_fd_same_file(const dft_owned_fd *o, int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

int dft_owned_fd_close(dft_owned_fd *o)
{
    int rc = 0;
    if (dft_owned_fd_check(o) && close(o->fd) != 0)
        rc = -1;
    o->fd = -1;
    return rc;
}
