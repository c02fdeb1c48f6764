/* core/trace_file.h: opening the trace file (core/trace_file.c): the files
 * this process created, and the fallback names used when something else is
 * at the configured path. */
#ifndef DFT_CORE_TRACE_FILE_H
#define DFT_CORE_TRACE_FILE_H

#include <sys/stat.h>
#include <sys/types.h>

/* Opens path for appending: a file this process created is appended to;
 * when anything else is there (an earlier run's file, a symbolic link), the
 * first free fallback name "<stem>-<host>-<pid>.<k>-app.pfw[.gz]" is used
 * instead and one error line names both; quietly (an info line) when the
 * name carries this process's pid (named_by_own_pid) and the file changed
 * after this process started: its image before an exec() wrote it.  Returns
 * the fd, with *actual (the name opened, malloc'd) and *size (0 for a new
 * file); or -1 with errno, having closed and removed what it opened.  Caller
 * holds the writer's lock or runs before any writer thread exists; no GIL. */
int dft_trace_file_open(const char *path, int named_by_own_pid, char **actual, off_t *size);

/* In a forked child: the parent's files are not this process's, so none is
 * appended to again.  Single-threaded. */
void dft_trace_file_forget_owned(void);

#endif
