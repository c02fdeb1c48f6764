/* io/posix_data.c: wrappers for the POSIX calls that move, sync or size file
 * data (events with cat "POSIX"): read/write with their positional, vectored
 * and fortified (__*_chk) forms, the kernel-side copies between two
 * descriptors (sendfile, copy_file_range, splice), lseek, the sync calls and
 * the calls that set a file's size or allocation.
 *
 * Installed like io/posix.c's wrappers, from its own table; any thread,
 * without the GIL.  Offsets are 64-bit on the supported (LP64) targets, so
 * the *64 names share the plain names' signatures. */
#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "io/wrap.h"

#define CAT "POSIX"

/* ---- read / write ---------------------------------------------------------- */

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real___read)(int, void *, size_t);
static ssize_t (*real___write)(int, const void *, size_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off_t);
static ssize_t (*real___pread64)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real___pwrite64)(int, const void *, size_t, off_t);
/* _FORTIFY_SOURCE builds read into buffers of known size through these. */
static ssize_t (*real___read_chk)(int, void *, size_t, size_t);
static ssize_t (*real___pread_chk)(int, void *, size_t, off_t, size_t);
static ssize_t (*real___pread64_chk)(int, void *, size_t, off_t, size_t);

#define RW_END(FD, COUNT)                                                           \
    FD_ARGS(FD);                                                                    \
    dft_io_int(&ev_, "count", (int64_t)(COUNT));                                    \
    dft_io_int(&ev_, "ret", r_);                                                    \
    dft_io_finish(&ev_, r_ < 0, e_);                                                \
    return r_

#define RW_WRAPPER(FN, NAME, BUF_T)                                                 \
    static ssize_t w_##FN(int fd, BUF_T buf, size_t count)                          \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, buf, count));                              \
        CALL(ssize_t, real_##FN(fd, buf, count));                                   \
        RW_END(fd, count);                                                          \
    }

#define PRW_WRAPPER(FN, NAME, BUF_T)                                                \
    static ssize_t w_##FN(int fd, BUF_T buf, size_t count, off_t off)               \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, buf, count, off));                         \
        CALL(ssize_t, real_##FN(fd, buf, count, off));                              \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        RW_END(fd, count);                                                          \
    }

static ssize_t w___read_chk(int fd, void *buf, size_t count, size_t buflen)
{
    FD_BEGIN("__read_chk", fd, real___read_chk(fd, buf, count, buflen));
    CALL(ssize_t, real___read_chk(fd, buf, count, buflen));
    RW_END(fd, count);
}

#define PREAD_CHK_WRAPPER(FN, NAME)                                                 \
    static ssize_t w_##FN(int fd, void *buf, size_t count, off_t off, size_t buflen) \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, buf, count, off, buflen));                 \
        CALL(ssize_t, real_##FN(fd, buf, count, off, buflen));                      \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        RW_END(fd, count);                                                          \
    }

RW_WRAPPER(read, "read", void *)
RW_WRAPPER(write, "write", const void *)
RW_WRAPPER(__read, "__read", void *)
RW_WRAPPER(__write, "__write", const void *)
PRW_WRAPPER(pread, "pread", void *)
PRW_WRAPPER(pread64, "pread64", void *)
PRW_WRAPPER(__pread64, "__pread64", void *)
PRW_WRAPPER(pwrite, "pwrite", const void *)
PRW_WRAPPER(pwrite64, "pwrite64", const void *)
PRW_WRAPPER(__pwrite64, "__pwrite64", const void *)
PREAD_CHK_WRAPPER(__pread_chk, "__pread_chk")
PREAD_CHK_WRAPPER(__pread64_chk, "__pread64_chk")

/* ---- vectored: readv, writev, preadv*, pwritev* ------------------------------ */

static ssize_t (*real_readv)(int, const struct iovec *, int);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_preadv64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_preadv2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_preadv64v2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off_t, int);

/* What the iovecs ask for (read before the call: a reader may reuse them). */
static int64_t iov_bytes(const struct iovec *iov, int n)
{
    int64_t total = 0;
    for (int i = 0; iov && i < n; i++)
        total += (int64_t)iov[i].iov_len;
    return total;
}

#define RWV_END(N)                                                                  \
    dft_io_int(&ev_, "iovcnt", N);                                                  \
    RW_END(fd, asked_)

#define RWV_WRAPPER(FN, NAME)                                                       \
    static ssize_t w_##FN(int fd, const struct iovec *iov, int n)                   \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, iov, n));                                  \
        int64_t asked_ = n > 0 ? iov_bytes(iov, n) : 0;                             \
        CALL(ssize_t, real_##FN(fd, iov, n));                                       \
        RWV_END(n);                                                                 \
    }

#define PRWV_WRAPPER(FN, NAME)                                                      \
    static ssize_t w_##FN(int fd, const struct iovec *iov, int n, off_t off)        \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, iov, n, off));                             \
        int64_t asked_ = n > 0 ? iov_bytes(iov, n) : 0;                             \
        CALL(ssize_t, real_##FN(fd, iov, n, off));                                  \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        RWV_END(n);                                                                 \
    }

#define PRWV2_WRAPPER(FN, NAME)                                                     \
    static ssize_t w_##FN(int fd, const struct iovec *iov, int n, off_t off, int flags) \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, iov, n, off, flags));                      \
        int64_t asked_ = n > 0 ? iov_bytes(iov, n) : 0;                             \
        CALL(ssize_t, real_##FN(fd, iov, n, off, flags));                           \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "flags", flags);                                           \
        RWV_END(n);                                                                 \
    }

RWV_WRAPPER(readv, "readv")
RWV_WRAPPER(writev, "writev")
PRWV_WRAPPER(preadv, "preadv")
PRWV_WRAPPER(preadv64, "preadv64")
PRWV_WRAPPER(pwritev, "pwritev")
PRWV_WRAPPER(pwritev64, "pwritev64")
PRWV2_WRAPPER(preadv2, "preadv2")
PRWV2_WRAPPER(preadv64v2, "preadv64v2")
PRWV2_WRAPPER(pwritev2, "pwritev2")
PRWV2_WRAPPER(pwritev64v2, "pwritev64v2")

/* ---- copies between two descriptors ------------------------------------------ */

/* Traced when either descriptor is.  One event per call: fhash/fd name the
 * source, out_fhash/out_fd the destination (a hash only for a traced side),
 * offset/out_offset the positions given (before the call moved them). */
#define XFER_BEGIN(NAME, IN, OUT, PASS)                                             \
    dft_fd_slot *in_ = dft_io_fd_slot(IN), *out_ = dft_io_fd_slot(OUT);              \
    if (__builtin_expect(!in_ && !out_, 1) || !dft_io_enter())                      \
        return PASS;                                                                \
    dft_io_ev ev_;                                                                  \
    dft_io_begin(&ev_, NAME, CAT)

#define XFER_END(IN, OUT, COUNT)                                                    \
    if (in_)                                                                        \
        dft_io_hash(&ev_, "fhash", dft_io_fd_hash(in_, IN));                        \
    dft_io_int(&ev_, "fd", IN);                                                     \
    if (out_)                                                                       \
        dft_io_hash(&ev_, "out_fhash", dft_io_fd_hash(out_, OUT));                  \
    dft_io_int(&ev_, "out_fd", OUT);                                                \
    dft_io_int(&ev_, "count", (int64_t)(COUNT));                                    \
    if (off_in_ >= 0)                                                               \
        dft_io_int(&ev_, "offset", off_in_);                                        \
    if (off_out_ >= 0)                                                              \
        dft_io_int(&ev_, "out_offset", off_out_);                                   \
    dft_io_int(&ev_, "ret", r_);                                                    \
    dft_io_finish(&ev_, r_ < 0, e_);                                                \
    return r_

static ssize_t (*real_sendfile)(int, int, off_t *, size_t);
static ssize_t (*real_sendfile64)(int, int, off_t *, size_t);
static ssize_t (*real_copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned);
static ssize_t (*real_splice)(int, off_t *, int, off_t *, size_t, unsigned);

#define SENDFILE_WRAPPER(FN, NAME)                                                  \
    static ssize_t w_##FN(int out, int in, off_t *off, size_t count)               \
    {                                                                               \
        XFER_BEGIN(NAME, in, out, real_##FN(out, in, off, count));                  \
        int64_t off_in_ = off ? (int64_t)*off : -1, off_out_ = -1;                  \
        CALL(ssize_t, real_##FN(out, in, off, count));                              \
        XFER_END(in, out, count);                                                   \
    }

SENDFILE_WRAPPER(sendfile, "sendfile")
SENDFILE_WRAPPER(sendfile64, "sendfile64")

#define RANGE_WRAPPER(FN, NAME)                                                     \
    static ssize_t w_##FN(int in, off_t *oin, int out, off_t *oout, size_t len,    \
                          unsigned flags)                                           \
    {                                                                               \
        XFER_BEGIN(NAME, in, out, real_##FN(in, oin, out, oout, len, flags));       \
        int64_t off_in_ = oin ? (int64_t)*oin : -1;                                 \
        int64_t off_out_ = oout ? (int64_t)*oout : -1;                              \
        CALL(ssize_t, real_##FN(in, oin, out, oout, len, flags));                   \
        dft_io_int(&ev_, "flags", (int64_t)flags);                                  \
        XFER_END(in, out, len);                                                     \
    }

RANGE_WRAPPER(copy_file_range, "copy_file_range")
RANGE_WRAPPER(splice, "splice")

/* ---- seek ---------------------------------------------------------------------- */

static off_t (*real_lseek)(int, off_t, int);
static off_t (*real_lseek64)(int, off_t, int);

#define SEEK_WRAPPER(FN, NAME)                                                      \
    static off_t w_##FN(int fd, off_t off, int whence)                              \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, off, whence));                             \
        CALL(off_t, real_##FN(fd, off, whence));                                    \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "whence", whence);                                         \
        dft_io_int(&ev_, "ret", (int64_t)r_);                                       \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

SEEK_WRAPPER(lseek, "lseek")
SEEK_WRAPPER(lseek64, "lseek64")

/* ---- sync ------------------------------------------------------------------------ */

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned);
static int (*real_msync)(void *, size_t, int);

#define FD_INT_WRAPPER(FN, NAME)                                                    \
    static int w_##FN(int fd)                                                       \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd));                                          \
        CALL(int, real_##FN(fd));                                                   \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

FD_INT_WRAPPER(fsync, "fsync")
FD_INT_WRAPPER(fdatasync, "fdatasync")

static int w_sync_file_range(int fd, off_t off, off_t len, unsigned flags)
{
    FD_BEGIN("sync_file_range", fd, real_sync_file_range(fd, off, len, flags));
    CALL(int, real_sync_file_range(fd, off, len, flags));
    FD_ARGS(fd);
    dft_io_int(&ev_, "offset", (int64_t)off);
    dft_io_int(&ev_, "size", (int64_t)len);
    dft_io_int(&ev_, "flags", (int64_t)flags);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* Traced when addr lies in a map of a traced file (io/posix.c's mmap). */
static int w_msync(void *addr, size_t len, int flags)
{
    uint64_t h = dft_io_map_find(addr);
    if (__builtin_expect(!h, 1) || !dft_io_enter())
        return real_msync(addr, len, flags);
    dft_io_ev ev_;
    dft_io_begin(&ev_, "msync", CAT);
    CALL(int, real_msync(addr, len, flags));
    dft_io_hash(&ev_, "fhash", h);
    dft_io_int(&ev_, "size", (int64_t)len);
    dft_io_int(&ev_, "flags", flags);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

/* ---- size and allocation ------------------------------------------------------- */

static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);

#define FTRUNC_WRAPPER(FN, NAME)                                                    \
    static int w_##FN(int fd, off_t len)                                            \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, len));                                     \
        CALL(int, real_##FN(fd, len));                                              \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "size", (int64_t)len);                                     \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

#define TRUNC_WRAPPER(FN, NAME)                                                     \
    static int w_##FN(const char *path, off_t len)                                  \
    {                                                                               \
        PATH_BEGIN(NAME, AT_FDCWD, path, real_##FN(path, len));                     \
        CALL(int, real_##FN(path, len));                                            \
        dft_io_hash(&ev_, "fhash", PATH_HASH());                                    \
        dft_io_int(&ev_, "size", (int64_t)len);                                     \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

#define FALLOCATE_WRAPPER(FN, NAME)                                                 \
    static int w_##FN(int fd, int mode, off_t off, off_t len)                       \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, mode, off, len));                          \
        CALL(int, real_##FN(fd, mode, off, len));                                   \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "mode", mode);                                             \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "size", (int64_t)len);                                     \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

/* posix_fallocate returns the error number and leaves errno alone. */
#define POSIX_FALLOCATE_WRAPPER(FN, NAME)                                           \
    static int w_##FN(int fd, off_t off, off_t len)                                 \
    {                                                                               \
        FD_BEGIN(NAME, fd, real_##FN(fd, off, len));                                \
        CALL(int, real_##FN(fd, off, len));                                         \
        FD_ARGS(fd);                                                                \
        dft_io_int(&ev_, "offset", (int64_t)off);                                   \
        dft_io_int(&ev_, "size", (int64_t)len);                                     \
        dft_io_int(&ev_, "ret", r_);                                                \
        if (r_ != 0)                                                                \
            dft_io_int(&ev_, "errno", r_);                                          \
        dft_io_finish(&ev_, 0, e_);                                                 \
        return r_;                                                                  \
    }

FTRUNC_WRAPPER(ftruncate, "ftruncate")
FTRUNC_WRAPPER(ftruncate64, "ftruncate64")
TRUNC_WRAPPER(truncate, "truncate")
TRUNC_WRAPPER(truncate64, "truncate64")
FALLOCATE_WRAPPER(fallocate, "fallocate")
FALLOCATE_WRAPPER(fallocate64, "fallocate64")
POSIX_FALLOCATE_WRAPPER(posix_fallocate, "posix_fallocate")
POSIX_FALLOCATE_WRAPPER(posix_fallocate64, "posix_fallocate64")

/* ---- the table --------------------------------------------------------------- */

#define HOOK(FN) {#FN, (void *)w_##FN, (void **)&real_##FN}

const dft_io_hook dft_io_posix_data_hooks[] = {
    HOOK(read),          HOOK(write),          HOOK(__read),           HOOK(__write),
    HOOK(pread),         HOOK(pread64),        HOOK(__pread64),        HOOK(pwrite),
    HOOK(pwrite64),      HOOK(__pwrite64),     HOOK(__read_chk),       HOOK(__pread_chk),
    HOOK(__pread64_chk), HOOK(readv),          HOOK(writev),           HOOK(preadv),
    HOOK(preadv64),      HOOK(pwritev),        HOOK(pwritev64),        HOOK(preadv2),
    HOOK(preadv64v2),    HOOK(pwritev2),       HOOK(pwritev64v2),      HOOK(sendfile),
    HOOK(sendfile64),    HOOK(copy_file_range), HOOK(splice),          HOOK(lseek),
    HOOK(lseek64),       HOOK(fsync),          HOOK(fdatasync),        HOOK(sync_file_range),
    HOOK(msync),         HOOK(ftruncate),      HOOK(ftruncate64),      HOOK(truncate),
    HOOK(truncate64),    HOOK(fallocate),      HOOK(fallocate64),      HOOK(posix_fallocate),
    HOOK(posix_fallocate64),
};
const size_t dft_io_posix_data_nhooks =
    sizeof dft_io_posix_data_hooks / sizeof *dft_io_posix_data_hooks;
