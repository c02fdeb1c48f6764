/* io/posix.c: wrappers for the POSIX calls that name files and manage
 * descriptors (events with cat "POSIX"): open and its fortified forms, close,
 * dup, fcntl, the stat family, mmap, unlink/rename/mkdir/rmdir and
 * directories.  The calls that move, sync or size data are in
 * io/posix_data.c.
 *
 * Each wrapper is installed in GOT slots by io/got.c and forwards to the
 * definition found by dlsym(RTLD_DEFAULT) at install time.  Wrappers run on
 * any thread, without the GIL; on untraced files they add one table lookup
 * (descriptor calls) or one prefix match (path calls).  Struct arguments
 * (struct stat and friends) are only forwarded, so they are typed void *. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/wrap.h"

#define CAT "POSIX"

/* ---- helpers ------------------------------------------------------------- */

/* A descriptor returned for an untraced file may reuse the number of a traced
 * one closed behind our back (close_range, a raw syscall): forget it. */
static inline int fresh_fd(int fd)
{
    if (fd >= 0)
        dft_io_fd_untrack(fd);
    return fd;
}

/* ---- open / close ---------------------------------------------------------- */

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);
static int (*real_close)(int);

static inline mode_t open_mode(int flags, va_list ap)
{
#ifdef O_TMPFILE
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
#else
    if (flags & O_CREAT)
#endif
        return (mode_t)va_arg(ap, int);
    return 0;
}

static int open_common(const char *name, int (*real)(int, const char *, int, ...), int dirfd,
                       const char *path, int flags, mode_t mode)
{
    PATH_BEGIN_HASHED(name, dirfd, path, fresh_fd(real(dirfd, path, flags, mode)), h);
    CALL(int, real(dirfd, path, flags, mode));
    if (r_ >= 0)
        dft_io_fd_track(r_, h);
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "flags", flags);
    dft_io_int(&ev_, "mode", (int64_t)mode);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* open(path, ...) through openat's signature: AT_FDCWD is ignored by dir_of. */
static int via_open(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (mode_t)va_arg(ap, int);
    va_end(ap);
    return real_open(path, flags, mode);
}

static int via_open64(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (mode_t)va_arg(ap, int);
    va_end(ap);
    return real_open64(path, flags, mode);
}

static int via_creat(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (mode_t)va_arg(ap, int);
    va_end(ap);
    (void)flags; /* always O_CREAT | O_WRONLY | O_TRUNC */
    return real_creat(path, mode);
}

static int via_creat64(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (mode_t)va_arg(ap, int);
    va_end(ap);
    (void)flags;
    return real_creat64(path, mode);
}

static int w_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = open_mode(flags, ap);
    va_end(ap);
    return open_common("open", via_open, AT_FDCWD, path, flags, mode);
}

static int w_open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = open_mode(flags, ap);
    va_end(ap);
    return open_common("open64", via_open64, AT_FDCWD, path, flags, mode);
}

static int w_openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = open_mode(flags, ap);
    va_end(ap);
    return open_common("openat", real_openat, dirfd, path, flags, mode);
}

static int w_openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = open_mode(flags, ap);
    va_end(ap);
    return open_common("openat64", real_openat64, dirfd, path, flags, mode);
}

static int w_creat(const char *path, mode_t mode)
{
    return open_common("creat", via_creat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

static int w_creat64(const char *path, mode_t mode)
{
    return open_common("creat64", via_creat64, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                       mode);
}

/* _FORTIFY_SOURCE builds call these for an open without O_CREAT whose
 * flags are not a compile-time constant (no mode argument). */
static int (*real___open_2)(const char *, int);
static int (*real___open64_2)(const char *, int);
static int (*real___openat_2)(int, const char *, int);
static int (*real___openat64_2)(int, const char *, int);

static int via_open_2(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    return real___open_2(path, flags);
}

static int via_open64_2(int dirfd, const char *path, int flags, ...)
{
    (void)dirfd;
    return real___open64_2(path, flags);
}

static int via_openat_2(int dirfd, const char *path, int flags, ...)
{
    return real___openat_2(dirfd, path, flags);
}

static int via_openat64_2(int dirfd, const char *path, int flags, ...)
{
    return real___openat64_2(dirfd, path, flags);
}

static int w___open_2(const char *path, int flags)
{
    return open_common("__open_2", via_open_2, AT_FDCWD, path, flags, 0);
}

static int w___open64_2(const char *path, int flags)
{
    return open_common("__open64_2", via_open64_2, AT_FDCWD, path, flags, 0);
}

static int w___openat_2(int dirfd, const char *path, int flags)
{
    return open_common("__openat_2", via_openat_2, dirfd, path, flags, 0);
}

static int w___openat64_2(int dirfd, const char *path, int flags)
{
    return open_common("__openat64_2", via_openat64_2, dirfd, path, flags, 0);
}

static int w_close(int fd)
{
    FD_BEGIN("close", fd, real_close(fd));
    uint64_t h = dft_io_fd_hash(slot_, fd);
    dft_io_fd_untrack(fd); /* before close: the number may be reused at once */
    CALL(int, real_close(fd));
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "fd", fd);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* ---- dup: a traced descriptor's copies are traced too ---------------------- */

static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);

static int dup_end(dft_io_ev *ev, dft_fd_slot *slot, int fd, int r, int e)
{
    uint64_t h = dft_io_fd_hash(slot, fd);
    if (r >= 0)
        dft_io_fd_track(r, h);
    dft_io_hash(ev, "fhash", h);
    dft_io_int(ev, "fd", fd);
    dft_io_int(ev, "ret", r);
    dft_io_finish(ev, r < 0, e);
    return r;
}

static int w_dup(int fd)
{
    FD_BEGIN("dup", fd, fresh_fd(real_dup(fd)));
    CALL(int, real_dup(fd));
    return dup_end(&ev_, slot_, fd, r_, e_);
}

static int w_dup2(int fd, int fd2)
{
    FD_BEGIN("dup2", fd, fresh_fd(real_dup2(fd, fd2)));
    CALL(int, real_dup2(fd, fd2));
    return dup_end(&ev_, slot_, fd, r_, e_);
}

static int w_dup3(int fd, int fd2, int flags)
{
    FD_BEGIN("dup3", fd, fresh_fd(real_dup3(fd, fd2, flags)));
    CALL(int, real_dup3(fd, fd2, flags));
    return dup_end(&ev_, slot_, fd, r_, e_);
}

/* fcntl(F_DUPFD*) is how CPython duplicates descriptors (os.dup, numpy's
 * tofile/fromfile); every fcntl on a traced descriptor is recorded.  The
 * third argument is forwarded as a pointer, as glibc reads it. */
static int (*real_fcntl)(int, int, ...);
static int (*real_fcntl64)(int, int, ...);

static int fcntl_common(const char *name, int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    int dups = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
    FD_BEGIN(name, fd, dups ? fresh_fd(real(fd, cmd, arg)) : real(fd, cmd, arg));
    CALL(int, real(fd, cmd, arg));
    uint64_t h = dft_io_fd_hash(slot_, fd);
    if (dups && r_ >= 0)
        dft_io_fd_track(r_, h);
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "fd", fd);
    dft_io_int(&ev_, "cmd", cmd);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

static int w_fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common("fcntl", real_fcntl, fd, cmd, arg);
}

static int w_fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common("fcntl64", real_fcntl64, fd, cmd, arg);
}

/* ---- the stat family ------------------------------------------------------- */

static int (*real_stat)(const char *, void *);
static int (*real_stat64)(const char *, void *);
static int (*real_lstat)(const char *, void *);
static int (*real_lstat64)(const char *, void *);
static int (*real_fstat)(int, void *);
static int (*real_fstat64)(int, void *);
static int (*real_fstatat)(int, const char *, void *, int);
static int (*real_fstatat64)(int, const char *, void *, int);
static int (*real_statx)(int, const char *, int, unsigned, void *);
static int (*real___xstat)(int, const char *, void *);
static int (*real___xstat64)(int, const char *, void *);
static int (*real___lxstat)(int, const char *, void *);
static int (*real___lxstat64)(int, const char *, void *);
static int (*real___fxstat)(int, int, void *);
static int (*real___fxstat64)(int, int, void *);
static int (*real___fxstatat)(int, int, const char *, void *, int);
static int (*real___fxstatat64)(int, int, const char *, void *, int);

#define PATH_END()                                                                  \
    dft_io_hash(&ev_, "fhash", PATH_HASH());                                        \
    dft_io_int(&ev_, "ret", r_);                                                    \
    dft_io_finish(&ev_, r_ < 0, e_);                                                \
    return r_

#define STAT_WRAPPER(FN, NAME)                                                      \
    static int w_##FN(const char *path, void *st)                                   \
    {                                                                               \
        PATH_BEGIN(NAME, AT_FDCWD, path, real_##FN(path, st));                      \
        CALL(int, real_##FN(path, st));                                             \
        PATH_END();                                                                 \
    }

#define XSTAT_WRAPPER(FN, NAME)                                                     \
    static int w_##FN(int ver, const char *path, void *st)                          \
    {                                                                               \
        PATH_BEGIN(NAME, AT_FDCWD, path, real_##FN(ver, path, st));                 \
        CALL(int, real_##FN(ver, path, st));                                        \
        PATH_END();                                                                 \
    }

#define FSTATAT_WRAPPER(FN, NAME)                                                   \
    static int w_##FN(int dirfd, const char *path, void *st, int flags)             \
    {                                                                               \
        PATH_BEGIN(NAME, dirfd, path, real_##FN(dirfd, path, st, flags));           \
        CALL(int, real_##FN(dirfd, path, st, flags));                               \
        dft_io_int(&ev_, "flags", flags);                                           \
        PATH_END();                                                                 \
    }

#define FXSTATAT_WRAPPER(FN, NAME)                                                  \
    static int w_##FN(int ver, int dirfd, const char *path, void *st, int flags)    \
    {                                                                               \
        PATH_BEGIN(NAME, dirfd, path, real_##FN(ver, dirfd, path, st, flags));      \
        CALL(int, real_##FN(ver, dirfd, path, st, flags));                          \
        dft_io_int(&ev_, "flags", flags);                                           \
        PATH_END();                                                                 \
    }

#define FSTAT_WRAPPER(FN, NAME)                                                     \
    static int w_##FN(int fd, void *st)                                             \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, st));                                       \
        CALL(int, real_##FN(fd, st));                                                \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

#define FXSTAT_WRAPPER(FN, NAME)                                                    \
    static int w_##FN(int ver, int fd, void *st)                                    \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(ver, fd, st));                                  \
        CALL(int, real_##FN(ver, fd, st));                                           \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

STAT_WRAPPER(stat, "stat")
STAT_WRAPPER(stat64, "stat64")
STAT_WRAPPER(lstat, "lstat")
STAT_WRAPPER(lstat64, "lstat64")
FSTAT_WRAPPER(fstat, "fstat")
FSTAT_WRAPPER(fstat64, "fstat64")
FSTATAT_WRAPPER(fstatat, "fstatat")
FSTATAT_WRAPPER(fstatat64, "fstatat64")
XSTAT_WRAPPER(__xstat, "__xstat")
XSTAT_WRAPPER(__xstat64, "__xstat64")
XSTAT_WRAPPER(__lxstat, "__lxstat")
XSTAT_WRAPPER(__lxstat64, "__lxstat64")
FXSTAT_WRAPPER(__fxstat, "__fxstat")
FXSTAT_WRAPPER(__fxstat64, "__fxstat64")
FXSTATAT_WRAPPER(__fxstatat, "__fxstatat")
FXSTATAT_WRAPPER(__fxstatat64, "__fxstatat64")

static int w_statx(int dirfd, const char *path, int flags, unsigned mask, void *st)
{
    PATH_BEGIN("statx", dirfd, path, real_statx(dirfd, path, flags, mask, st));
    CALL(int, real_statx(dirfd, path, flags, mask, st));
    dft_io_int(&ev_, "flags", flags);
    PATH_END();
}

/* ---- memory maps ----------------------------------------------------------- */

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);

#define MMAP_WRAPPER(FN, NAME)                                                      \
    static void *w_##FN(void *addr, size_t len, int prot, int flags, int fd, off_t off) \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(addr, len, prot, flags, fd, off));             \
        CALL(void *, real_##FN(addr, len, prot, flags, fd, off));                   \
        uint64_t h = dft_io_fd_hash(slot_, fd);                                     \
        if (r_ != MAP_FAILED)                                                       \
            dft_io_map_track(r_, len, h);                                                \
        dft_io_hash(&ev_, "fhash", h);                                              \
        dft_io_int(&ev_, "fd", fd);                                                 \
        dft_io_int(&ev_, "size", (int64_t)len);                                     \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "prot", prot);                                             \
        dft_io_int(&ev_, "flags", flags);                                           \
        dft_io_int(&ev_, "ret", r_ == MAP_FAILED ? -1 : 0);                         \
        dft_io_finish(&ev_, r_ == MAP_FAILED, e_);                                  \
        return r_;                                                                  \
    }

MMAP_WRAPPER(mmap, "mmap")
MMAP_WRAPPER(mmap64, "mmap64")

static int w_munmap(void *addr, size_t len)
{
    uint64_t h = dft_io_map_untrack(addr);
    if (__builtin_expect(!h, 1) || !dft_io_enter())
        return real_munmap(addr, len);
    dft_io_ev ev_;
    dft_io_begin(&ev_, "munmap", CAT);
    CALL(int, real_munmap(addr, len));
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "size", (int64_t)len);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* ---- names: unlink, rename, mkdir, rmdir ------------------------------------ */

static int (*real_unlink)(const char *);
static int (*real_rmdir)(const char *);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_rename)(const char *, const char *);

static int w_unlink(const char *path)
{
    PATH_BEGIN("unlink", AT_FDCWD, path, real_unlink(path));
    CALL(int, real_unlink(path));
    PATH_END();
}

static int w_rmdir(const char *path)
{
    PATH_BEGIN("rmdir", AT_FDCWD, path, real_rmdir(path));
    CALL(int, real_rmdir(path));
    PATH_END();
}

static int w_mkdir(const char *path, mode_t mode)
{
    PATH_BEGIN("mkdir", AT_FDCWD, path, real_mkdir(path, mode));
    CALL(int, real_mkdir(path, mode));
    dft_io_int(&ev_, "mode", (int64_t)mode);
    PATH_END();
}

/* Traced when either name is under the data dir. */
static int w_rename(const char *from, const char *to)
{
    if (!dft_io_enter())
        return real_rename(from, to);
    char a[PATH_MAX], b[PATH_MAX];
    size_t na = dft_io_path_traced(AT_FDCWD, from, a, sizeof a);
    size_t nb = dft_io_path_traced(AT_FDCWD, to, b, sizeof b);
    if (!na && !nb) {
        dft_io_leave();
        return real_rename(from, to);
    }
    dft_io_ev ev_;
    dft_io_begin(&ev_, "rename", CAT);
    CALL(int, real_rename(from, to));
    if (na)
        dft_io_hash(&ev_, "fhash", dft_intern(DFT_INTERN_FILE, a, na));
    if (nb)
        dft_io_hash(&ev_, "new_fhash", dft_intern(DFT_INTERN_FILE, b, nb));
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* ---- directories ------------------------------------------------------------ */

static DIR *(*real_opendir)(const char *);
static struct dirent *(*real_readdir)(DIR *);
static void *(*real_readdir64)(DIR *);
static int (*real_closedir)(DIR *);

static DIR *w_opendir(const char *path)
{
    PATH_BEGIN("opendir", AT_FDCWD, path, real_opendir(path));
    CALL(DIR *, real_opendir(path));
    uint64_t h = PATH_HASH();
    int fd = r_ ? dirfd(r_) : -1;
    if (fd >= 0)
        dft_io_fd_track(fd, h);
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "fd", fd);
    dft_io_finish(&ev_, r_ == NULL, e_);
    return r_;
}

#define READDIR_WRAPPER(FN, NAME, RET_T)                                            \
    static RET_T w_##FN(DIR *d)                                                     \
    {                                                                               \
        int fd = d ? dirfd(d) : -1;                                                 \
        FD_BEGIN(NAME, fd, real_##FN(d));                                            \
        int before = errno;                                                         \
        errno = 0;                                                                  \
        CALL(RET_T, real_##FN(d));                                                  \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "ret", r_ != NULL);                                        \
        /* NULL with errno unchanged is the end of the directory */                 \
        dft_io_finish(&ev_, r_ == NULL && e_ != 0, r_ == NULL && e_ != 0 ? e_ : before); \
        return r_;                                                                  \
    }

READDIR_WRAPPER(readdir, "readdir", struct dirent *)
READDIR_WRAPPER(readdir64, "readdir64", void *)

static int w_closedir(DIR *d)
{
    int fd = d ? dirfd(d) : -1;
    FD_BEGIN("closedir", fd, real_closedir(d));
    uint64_t h = dft_io_fd_hash(slot_, fd);
    dft_io_fd_untrack(fd);
    CALL(int, real_closedir(d));
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "fd", fd);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* ---- the table --------------------------------------------------------------- */

#define HOOK(FN) {#FN, (void *)w_##FN, (void **)&real_##FN}

const dft_io_hook dft_io_posix_hooks[] = {
    HOOK(open),       HOOK(open64),       HOOK(openat),      HOOK(openat64),
    HOOK(__open_2),   HOOK(__open64_2),   HOOK(__openat_2),  HOOK(__openat64_2),
    HOOK(creat),      HOOK(creat64),      HOOK(close),       HOOK(dup),
    HOOK(dup2),       HOOK(dup3),         HOOK(fcntl),       HOOK(fcntl64),
    HOOK(stat),       HOOK(stat64),       HOOK(lstat),       HOOK(lstat64),
    HOOK(fstat),      HOOK(fstat64),      HOOK(fstatat),     HOOK(fstatat64),
    HOOK(statx),      HOOK(__xstat),      HOOK(__xstat64),   HOOK(__lxstat),
    HOOK(__lxstat64), HOOK(__fxstat),     HOOK(__fxstat64),  HOOK(__fxstatat),
    HOOK(__fxstatat64), HOOK(mmap),       HOOK(mmap64),      HOOK(munmap),
    HOOK(unlink),     HOOK(rmdir),        HOOK(mkdir),       HOOK(rename),
    HOOK(opendir),    HOOK(readdir),      HOOK(readdir64),   HOOK(closedir),
};
const size_t dft_io_posix_nhooks = sizeof dft_io_posix_hooks / sizeof *dft_io_posix_hooks;
