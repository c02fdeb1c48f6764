/* io/stdio.c: wrappers for the stdio file API (events with cat "STDIO"):
 * opening and closing streams, whole items (fread/fwrite), lines, characters,
 * formatted output, position and flush, with their _unlocked, _IO_ and
 * fortified (__*_chk) names.
 *
 * A FILE* is traced when its descriptor is: the descriptor table is shared
 * with io/posix.c, so fopen records fileno(fp) and every later call looks it
 * up.  glibc's FILE exposes the descriptor as a field, read here directly
 * because fileno() sets errno on streams without one (fmemopen).  Any
 * thread, no GIL. */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
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

/* ---- data: whole items -------------------------------------------------------- */

/* count is the items asked, ret the items done: the bytes moved are
 * size x ret (docs/cli.md, "I/O bytes"). */
static size_t (*real_fread)(void *, size_t, size_t, FILE *);
static size_t (*real_fwrite)(const void *, size_t, size_t, FILE *);
static size_t (*real_fread_unlocked)(void *, size_t, size_t, FILE *);
static size_t (*real_fwrite_unlocked)(const void *, size_t, size_t, FILE *);
static size_t (*real__IO_fread)(void *, size_t, size_t, FILE *);
static size_t (*real__IO_fwrite)(const void *, size_t, size_t, FILE *);
/* _FORTIFY_SOURCE builds read into buffers of known size through these. */
static size_t (*real___fread_chk)(void *, size_t, size_t, size_t, FILE *);
static size_t (*real___fread_unlocked_chk)(void *, size_t, size_t, size_t, FILE *);

#define FRW_END(SIZE, N)                                                            \
    FP_ARGS();                                                                      \
    dft_io_int(&ev_, "size", (int64_t)(SIZE));                                      \
    dft_io_int(&ev_, "count", (int64_t)(N));                                        \
    dft_io_int(&ev_, "ret", (int64_t)r_);                                           \
    dft_io_finish(&ev_, r_ < (N) && ferror_unlocked(fp), e_);                       \
    return r_

#define FRW_WRAPPER(FN, NAME, BUF_T)                                                \
    static size_t w_##FN(BUF_T ptr, size_t size, size_t n, FILE *fp)                \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(ptr, size, n, fp));                            \
        CALL(size_t, real_##FN(ptr, size, n, fp));                                  \
        FRW_END(size, n);                                                           \
    }

#define FREAD_CHK_WRAPPER(FN, NAME)                                                 \
    static size_t w_##FN(void *ptr, size_t len, size_t size, size_t n, FILE *fp)    \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(ptr, len, size, n, fp));                       \
        CALL(size_t, real_##FN(ptr, len, size, n, fp));                             \
        FRW_END(size, n);                                                           \
    }

FRW_WRAPPER(fread, "fread", void *)
FRW_WRAPPER(fwrite, "fwrite", const void *)
FRW_WRAPPER(fread_unlocked, "fread_unlocked", void *)
FRW_WRAPPER(fwrite_unlocked, "fwrite_unlocked", const void *)
FRW_WRAPPER(_IO_fread, "_IO_fread", void *)
FRW_WRAPPER(_IO_fwrite, "_IO_fwrite", const void *)
FREAD_CHK_WRAPPER(__fread_chk, "__fread_chk")
FREAD_CHK_WRAPPER(__fread_unlocked_chk, "__fread_unlocked_chk")

/* ---- data: lines -------------------------------------------------------------- */

static char *(*real_fgets)(char *, int, FILE *);
static char *(*real_fgets_unlocked)(char *, int, FILE *);
static char *(*real__IO_fgets)(char *, int, FILE *);
static char *(*real___fgets_chk)(char *, size_t, int, FILE *);
static char *(*real___fgets_unlocked_chk)(char *, size_t, int, FILE *);
static int (*real_fputs)(const char *, FILE *);
static int (*real_fputs_unlocked)(const char *, FILE *);
static int (*real__IO_fputs)(const char *, FILE *);
static ssize_t (*real_getline)(char **, size_t *, FILE *);
static ssize_t (*real_getdelim)(char **, size_t *, int, FILE *);
static ssize_t (*real___getdelim)(char **, size_t *, int, FILE *);

/* fgets returns its buffer: ret is the bytes it stored (0 at the end of the
 * file), count the buffer's size. */
#define FGETS_END(N)                                                                \
    FP_ARGS();                                                                      \
    dft_io_int(&ev_, "count", (int64_t)(N));                                        \
    dft_io_int(&ev_, "ret", r_ ? (int64_t)strlen(r_) : 0);                          \
    dft_io_finish(&ev_, !r_ && ferror_unlocked(fp), e_);                            \
    return r_

#define FGETS_WRAPPER(FN, NAME)                                                     \
    static char *w_##FN(char *buf, int n, FILE *fp)                                 \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(buf, n, fp));                                  \
        CALL(char *, real_##FN(buf, n, fp));                                        \
        FGETS_END(n);                                                               \
    }

#define FGETS_CHK_WRAPPER(FN, NAME)                                                 \
    static char *w_##FN(char *buf, size_t len, int n, FILE *fp)                     \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(buf, len, n, fp));                             \
        CALL(char *, real_##FN(buf, len, n, fp));                                   \
        FGETS_END(n);                                                               \
    }

/* fputs returns a non-negative number, not a length: count is the string's. */
#define FPUTS_WRAPPER(FN, NAME)                                                     \
    static int w_##FN(const char *str, FILE *fp)                                    \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(str, fp));                                     \
        size_t len_ = str ? strlen(str) : 0;                                        \
        CALL(int, real_##FN(str, fp));                                              \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "count", (int64_t)len_);                                   \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ < 0, e_);                                            \
        return r_;                                                                  \
    }

/* ret: the bytes read, delimiter included; -1 at the end of the file. */
#define GETDELIM_END()                                                              \
    FP_ARGS();                                                                      \
    dft_io_int(&ev_, "ret", (int64_t)r_);                                           \
    dft_io_finish(&ev_, r_ < 0 && ferror_unlocked(fp), e_);                         \
    return r_

static ssize_t w_getline(char **line, size_t *cap, FILE *fp)
{
    FP_BEGIN("getline", fp, real_getline(line, cap, fp));
    CALL(ssize_t, real_getline(line, cap, fp));
    GETDELIM_END();
}

#define GETDELIM_WRAPPER(FN, NAME)                                                  \
    static ssize_t w_##FN(char **line, size_t *cap, int delim, FILE *fp)            \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(line, cap, delim, fp));                        \
        CALL(ssize_t, real_##FN(line, cap, delim, fp));                             \
        GETDELIM_END();                                                             \
    }

FGETS_WRAPPER(fgets, "fgets")
FGETS_WRAPPER(fgets_unlocked, "fgets_unlocked")
FGETS_WRAPPER(_IO_fgets, "_IO_fgets")
FGETS_CHK_WRAPPER(__fgets_chk, "__fgets_chk")
FGETS_CHK_WRAPPER(__fgets_unlocked_chk, "__fgets_unlocked_chk")
FPUTS_WRAPPER(fputs, "fputs")
FPUTS_WRAPPER(fputs_unlocked, "fputs_unlocked")
FPUTS_WRAPPER(_IO_fputs, "_IO_fputs")
GETDELIM_WRAPPER(getdelim, "getdelim")
GETDELIM_WRAPPER(__getdelim, "__getdelim")

/* ---- data: characters ------------------------------------------------------------ */

/* ret: the character, or -1 (EOF). */
static int (*real_fgetc)(FILE *);
static int (*real_getc)(FILE *);
static int (*real_fgetc_unlocked)(FILE *);
static int (*real_getc_unlocked)(FILE *);
static int (*real__IO_getc)(FILE *);
static int (*real_fputc)(int, FILE *);
static int (*real_putc)(int, FILE *);
static int (*real_fputc_unlocked)(int, FILE *);
static int (*real_putc_unlocked)(int, FILE *);
static int (*real__IO_putc)(int, FILE *);

#define GETC_WRAPPER(FN, NAME)                                                      \
    static int w_##FN(FILE *fp)                                                     \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(fp));                                          \
        CALL(int, real_##FN(fp));                                                   \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ == EOF && ferror_unlocked(fp), e_);                  \
        return r_;                                                                  \
    }

#define PUTC_WRAPPER(FN, NAME)                                                      \
    static int w_##FN(int c, FILE *fp)                                              \
    {                                                                               \
        FP_BEGIN(NAME, fp, real_##FN(c, fp));                                       \
        CALL(int, real_##FN(c, fp));                                                \
        FP_ARGS();                                                                  \
        dft_io_int(&ev_, "ret", r_);                                                \
        dft_io_finish(&ev_, r_ == EOF, e_);                                         \
        return r_;                                                                  \
    }

GETC_WRAPPER(fgetc, "fgetc")
GETC_WRAPPER(getc, "getc")
GETC_WRAPPER(fgetc_unlocked, "fgetc_unlocked")
GETC_WRAPPER(getc_unlocked, "getc_unlocked")
GETC_WRAPPER(_IO_getc, "_IO_getc")
PUTC_WRAPPER(fputc, "fputc")
PUTC_WRAPPER(putc, "putc")
PUTC_WRAPPER(fputc_unlocked, "fputc_unlocked")
PUTC_WRAPPER(putc_unlocked, "putc_unlocked")
PUTC_WRAPPER(_IO_putc, "_IO_putc")

/* ---- data: formatted output ------------------------------------------------------ */

/* ret: the bytes written, or a negative value.  The variadic forms forward to
 * their va_list twins (fprintf -> vfprintf), as libc itself does. */
static int (*real_fprintf)(FILE *, const char *, ...);
static int (*real_vfprintf)(FILE *, const char *, va_list);
static int (*real___fprintf_chk)(FILE *, int, const char *, ...);
static int (*real___vfprintf_chk)(FILE *, int, const char *, va_list);
static int (*real_dprintf)(int, const char *, ...);
static int (*real_vdprintf)(int, const char *, va_list);

int __vfprintf_chk(FILE *, int, const char *, va_list);

/* flag < 0: vfprintf, else __vfprintf_chk with that flag. */
static int vfprintf_as(const char *name, FILE *fp, int flag, const char *fmt, va_list ap)
{
    int (*plain)(FILE *, const char *, va_list) = real_vfprintf ? real_vfprintf : vfprintf;
    int (*chk)(FILE *, int, const char *, va_list) =
        real___vfprintf_chk ? real___vfprintf_chk : __vfprintf_chk;
    FP_BEGIN(name, fp, flag < 0 ? plain(fp, fmt, ap) : chk(fp, flag, fmt, ap));
    CALL(int, flag < 0 ? plain(fp, fmt, ap) : chk(fp, flag, fmt, ap));
    FP_ARGS();
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

static int w_vfprintf(FILE *fp, const char *fmt, va_list ap)
{
    return vfprintf_as("vfprintf", fp, -1, fmt, ap);
}

static int w___vfprintf_chk(FILE *fp, int flag, const char *fmt, va_list ap)
{
    return vfprintf_as("__vfprintf_chk", fp, flag < 0 ? 0 : flag, fmt, ap);
}

static int w_fprintf(FILE *fp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf_as("fprintf", fp, -1, fmt, ap);
    va_end(ap);
    return r;
}

static int w___fprintf_chk(FILE *fp, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf_as("__fprintf_chk", fp, flag < 0 ? 0 : flag, fmt, ap);
    va_end(ap);
    return r;
}

/* dprintf writes to a descriptor through a stream of its own. */
static int vdprintf_as(const char *name, int fd, const char *fmt, va_list ap)
{
    int (*real)(int, const char *, va_list) = real_vdprintf ? real_vdprintf : vdprintf;
    FD_BEGIN(name, fd, real(fd, fmt, ap));
    CALL(int, real(fd, fmt, ap));
    FD_ARGS(fd);
    dft_io_int(&ev_, "ret", r_);
    dft_io_finish(&ev_, r_ < 0, e_);
    return r_;
}

static int w_vdprintf(int fd, const char *fmt, va_list ap)
{
    return vdprintf_as("vdprintf", fd, fmt, ap);
}

static int w_dprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf_as("dprintf", fd, fmt, ap);
    va_end(ap);
    return r;
}

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
    HOOK(fopen),          HOOK(fopen64),         HOOK(fdopen),          HOOK(fclose),
    HOOK(fread),          HOOK(fwrite),          HOOK(fread_unlocked),  HOOK(fwrite_unlocked),
    HOOK(_IO_fread),      HOOK(_IO_fwrite),      HOOK(__fread_chk),     HOOK(__fread_unlocked_chk),
    HOOK(fgets),          HOOK(fgets_unlocked),  HOOK(_IO_fgets),       HOOK(__fgets_chk),
    HOOK(__fgets_unlocked_chk), HOOK(fputs),     HOOK(fputs_unlocked),  HOOK(_IO_fputs),
    HOOK(getline),        HOOK(getdelim),        HOOK(__getdelim),      HOOK(fgetc),
    HOOK(getc),           HOOK(fgetc_unlocked),  HOOK(getc_unlocked),   HOOK(_IO_getc),
    HOOK(fputc),          HOOK(putc),            HOOK(fputc_unlocked),  HOOK(putc_unlocked),
    HOOK(_IO_putc),       HOOK(fprintf),         HOOK(vfprintf),        HOOK(__fprintf_chk),
    HOOK(__vfprintf_chk), HOOK(dprintf),         HOOK(vdprintf),        HOOK(fseek),
    HOOK(fseeko),         HOOK(fseeko64),        HOOK(ftell),           HOOK(ftello),
    HOOK(ftello64),       HOOK(fflush),
};
const size_t dft_io_stdio_nhooks = sizeof dft_io_stdio_hooks / sizeof *dft_io_stdio_hooks;
