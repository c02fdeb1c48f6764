/* core/owned_fd.h: descriptors the tracer keeps open for the life of a trace
 * (core/owned_fd.c): moved above the numbers a program reuses, and checked to
 * still be the file opened before each use, so that a program that closes
 * its descriptors (os.closerange, a daemon) never gets the tracer's bytes in
 * a file of its own. */
#ifndef DFT_CORE_OWNED_FD_H
#define DFT_CORE_OWNED_FD_H

#include <sys/types.h>

typedef struct dft_owned_fd {
    int fd;    /* -1: none */
    dev_t dev; /* the file it was opened on */
    ino_t ino;
} dft_owned_fd;

#define DFT_OWNED_FD_NONE {.fd = -1}

/* Takes fd over: moves it to a high number (F_DUPFD_CLOEXEC; the low numbers
 * are what a program's next open() gets) and records which file it is.  0,
 * or -1 with errno set (fd is closed then).  Async-signal-safe. */
int dft_owned_fd_adopt(dft_owned_fd *o, int fd);

/* 1 while o->fd is still the file it was opened on; 0 when the program closed
 * it or the number now names another file (o->fd is forgotten then, never
 * closed: it is the program's).  Async-signal-safe. */
int dft_owned_fd_check(dft_owned_fd *o);

/* Whether fd, just opened by name, is the same file as o's was. */
int dft_owned_fd_same_file(const dft_owned_fd *o, int fd);

/* Closes o->fd when it is still ours; forgets it either way.  0, or -1 with
 * errno set when close() failed.  Async-signal-safe. */
int dft_owned_fd_close(dft_owned_fd *o);

#endif
