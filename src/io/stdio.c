/* io/stdio.c: wrappers for the stdio file API (events with cat "STDIO").
 *
 * A FILE* is traced when its descriptor is: the descriptor table is shared
 * with io/posix.c, so fopen records fileno(fp) and every later call looks it
 * up.  glibc's FILE exposes the descriptor as a field, read here directly
 * because fileno() sets errno on streams without one (fmemopen).  Any
 * thread, no GIL. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/types.h>

#include "io/wrap.h"

#define CAT "STDIO"

static inline int stream_fd(FILE *fp)
{
    if (!fp)
        return -1;
#ifdef __GLIBC__
    return fp->_fileno;
#else
    int e = errno;
    int fd = fileno(fp);
    errno = e;
    return fd;
#endif
}

#define FP_BEGIN(NAME, FP, PASS)                                                    \
    int fd_ = stream_fd(FP);                                                        \
    FD_BEGIN(NAME, fd_, PASS)

#define FP_ARGS() FD_ARGS(fd_)

/* ---- open / close ---------------------------------------------------------- */

static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fopen64)(const char *, const char *);
static FILE *(*real_fdopen)(int, const char *);
static int (*real_fclose)(FILE *);

static FILE *fopen_common(const char *name, FILE *(*real)(const char *, const char *),
                          const char *path, const char *mode)
{
    if (!dft_io_enter()) {
        FILE *fp = real(path, mode);
        return fp;
    }
    char abs[PATH_MAX];
    size_t n = dft_io_path_traced(AT_FDCWD, path, abs, sizeof abs);
    if (!n) {
        dft_io_leave();
        FILE *fp = real(path, mode);
        int fd = stream_fd(fp);
        if (fd >= 0)
            dft_io_fd_untrack(fd); /* a stale number: see io/posix.c fresh_fd */
        return fp;
    }
    dft_io_ev ev_;
    dft_io_begin(&ev_, name, CAT);
    CALL(FILE *, real(path, mode));
    uint64_t h = dft_intern(DFT_INTERN_FILE, abs, n);
    int fd = stream_fd(r_);
    if (fd >= 0)
        dft_io_fd_track(fd, h);
    dft_io_hash(&ev_, "fhash", h);
    dft_io_str(&ev_, "mode", mode);
    dft_io_int(&ev_, "fd", fd);
    dft_io_finish(&ev_, r_ == NULL, e_);
    return r_;
}

static FILE *w_fopen(const char *path, const char *mode)
{
    return fopen_common("fopen", real_fopen, path, mode);
}

static FILE *w_fopen64(const char *path, const char *mode)
{
    return fopen_common("fopen64", real_fopen64, path, mode);
}

static FILE *w_fdopen(int fd, const char *mode)
{
    dft_fd_slot *slot_ = dft_io_fd_slot(fd);
    if (__builtin_expect(!slot_, 1) || !dft_io_enter())
        return real_fdopen(fd, mode);
    int fd_ = fd;
    dft_io_ev ev_;
    dft_io_begin(&ev_, "fdopen", CAT);
    CALL(FILE *, real_fdopen(fd, mode));
    FP_ARGS();
    dft_io_str(&ev_, "mode", mode);
    dft_io_finish(&ev_, r_ == NULL, e_);
    return r_;
}

static int w_fclose(FILE *fp)
{
    FP_BEGIN("fclose", fp, real_fclose(fp));
    uint64_t h = dft_io_fd_hash(slot_, fd_);
    dft_io_fd_untrack(fd_);
    CALL(int, real_fclose(fp));
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "fd", fd_);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ != 0, e_);
    return r_;
}

/* ---- data --------------------------------------------------------------------- */

static size_t (*real_fread)(void *, size_t, size_t, FILE *);
static size_t (*real_fwrite)(const void *, size_t, size_t, FILE *);

#define FRW_WRAPPER(FN, NAME, BUF_T)                                                \
    static size_t w_##FN(BUF_T ptr, size_t size, size_t n, FILE *fp)                \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(ptr, size, n, fp));                            \
        CALL(size_t, real_##FN(ptr, size, n, fp));                                  \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "size", (int64_t)size);                                    \
        dft_io_int(&ev_, "count", (int64_t)n);                                      \
        dft_io_int(&ev_, "ret", (int64_t)r_);                                       \
        dft_io_finish(&ev_, r_ < n && ferror_unlocked(fp), e_);                     \
        return r_;                                                                  \
    }

FRW_WRAPPER(fread, "fread", void *)
FRW_WRAPPER(fwrite, "fwrite", const void *)

/* ---- position, flush ---------------------------------------------------------- */

static int (*real_fseek)(FILE *, long, int);
static int (*real_fseeko)(FILE *, off_t, int);
static int (*real_fseeko64)(FILE *, off_t, int);
static long (*real_ftell)(FILE *);
static off_t (*real_ftello)(FILE *);
static off_t (*real_ftello64)(FILE *);
static int (*real_fflush)(FILE *);

#define FSEEK_WRAPPER(FN, NAME, OFF_T)                                              \
    static int w_##FN(FILE *fp, OFF_T off, int whence)                              \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(fp, off, whence));                             \
        CALL(int, real_##FN(fp, off, whence));                                      \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "whence", whence);                                         \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ != 0, e_);                                           \
        return r_;                                                                  \
    }

#define FTELL_WRAPPER(FN, NAME, RET_T)                                              \
    static RET_T w_##FN(FILE *fp)                                                   \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(fp));                                          \
        CALL(RET_T, real_##FN(fp));                                                 \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "ret", (int64_t)r_);                                       \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

FSEEK_WRAPPER(fseek, "fseek", long)
FSEEK_WRAPPER(fseeko, "fseeko", off_t)
FSEEK_WRAPPER(fseeko64, "fseeko64", off_t)
FTELL_WRAPPER(ftell, "ftell", long)
FTELL_WRAPPER(ftello, "ftello", off_t)
FTELL_WRAPPER(ftello64, "ftello64", off_t)

static int w_fflush(FILE *fp)
{
    FP_BEGIN("fflush", fp, real_fflush(fp));
    CALL(int, real_fflush(fp));
    FP_ARGS();
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ != 0, e_);
    return r_;
}

/* ---- the table ------------------------------------------------------------------ */

#define HOOK(FN) {#FN, (void *)w_##FN, (void **)&real_##FN}

const dft_io_hook dft_io_stdio_hooks[] = {
    HOOK(fopen),  HOOK(fopen64), HOOK(fdopen), HOOK(fclose),   HOOK(fread),
    HOOK(fwrite), HOOK(fseek),   HOOK(fseeko), HOOK(fseeko64), HOOK(ftell),
    HOOK(ftello), HOOK(ftello64), HOOK(fflush),
};
const size_t dft_io_stdio_nhooks = sizeof dft_io_stdio_hooks / sizeof *dft_io_stdio_hooks;
