/* core/trace_file.h: opening the trace file (core/trace_file.c): the files
 * this process created, and the fallback names used when something else is
 * at the configured path. */
#ifndef DFT_CORE_TRACE_FILE_H
#define DFT_CORE_TRACE_FILE_H

#include <sys/stat.h>
#include <sys/types.h>

/* Creates path new, for appending: when anything is there (a file an
 * earlier trace of this process wrote, an earlier run's file, a symbolic
 * link), the first free numbered name "<stem>-<host>-<pid>.<k>-app.pfw[.gz]"
 * is used instead, with one error line naming both unless the path was this
 * process's own.  Returns the fd, with *actual (the name opened, malloc'd)
 * and *size (0: a new file); or -1 with errno, having closed and removed
 * what it created.  Caller holds the writer's lock or runs before any writer
 * thread exists; no GIL. */
int dft_trace_file_open(const char *path, char **actual, off_t *size);

/* Creates the missing directories above the file path (like mkdir -p, mode
 * 0777 less the umask), whether the path came from initialize_log or
 * DFTRACER_LOG_FILE.  dir (cap bytes) receives the directory.  0, or -1 with
 * errno.  Any thread, no GIL. */
int dft_trace_file_make_dir(const char *path, char *dir, size_t cap);

/* Gives the file this process is writing at `from` the name `to`, never over
 * anything there (EEXIST): a trace that started by itself takes the name
 * initialize_log gives it.  On one file system the file itself moves
 * (*moved_fd = -1: a descriptor on it stays good); across file systems its
 * bytes are copied to a new file at `to` and `from` removed (*moved_fd: the
 * new file, open for appending, the caller's to keep).  0, or -1 with errno
 * (nothing changed).  Caller holds the writer's locks (no write runs); no
 * GIL. */
int dft_trace_file_rename(const char *from, const char *to, int *moved_fd);
/* In a forked child: the names the parent wrote are the parent's business
 * (the child's own pid is in its names).  Single-threaded. */
void dft_trace_file_forget_owned(void);

#endif
