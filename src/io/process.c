/* io/process.c: wrappers for the calls that make, replace and reap processes
 * (events with cat "POSIX", as the reference dftracer 2.2.0 writes them:
 * docs/io-tracing.md, "Processes"): fork, the exec family, posix_spawn and
 * the wait family.  They concern no file, so they are recorded whatever
 * DFTRACER_DATA_DIR holds, while POSIX calls are traced.
 *
 * Which process writes what: fork's event is the parent's (the child starts
 * its own file with its own events: core/tracer.c); an exec's is written and
 * flushed before the call, since nothing of this image runs after one that
 * works; nothing is recorded in the child of a vfork() (it shares the
 * parent's memory until it execs: vfork itself is never wrapped) nor in the
 * children posix_spawn makes (libc execs there without the GOT).
 *
 * Wrappers run on any thread, without the GIL, like those of io/posix.c. */
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config.h"
#include "io/wrap.h"

#define CAT "POSIX"
#define EXEC_ARGS 6 /* argv[0..5] as arg0..arg5, as the reference writes them */

/* The process whose memory holds this tracer: set when I/O tracing starts
 * and in every forked child (pthread_atfork), not in a vfork child. */
static _Atomic int64_t owner_pid = -1;

static void owner_after_fork_child(void) { atomic_store(&owner_pid, (int64_t)getpid()); }

/* Under life_lock, when I/O tracing starts. */
void dft_io_process_start(void)
{
    static int registered; /* under life_lock */
    atomic_store(&owner_pid, (int64_t)getpid());
    if (!registered) {
        registered = 1;
        if (pthread_atfork(NULL, NULL, owner_after_fork_child) != 0)
            dft_log(DFT_LOG_ERROR, "pthread_atfork failed; exec in forked children not traced");
    }
}

/* 1 when the calling process owns the tracer and may record (marks the
 * thread busy).  The pid is compared first: a vfork child runs on its
 * parent's thread-local state, which it must not write (getpid() is not
 * cached by glibc, so such a child sees its own pid). */
static int enter_own(void)
{
    if ((int64_t)getpid() != atomic_load_explicit(&owner_pid, memory_order_relaxed))
        return 0;
    return dft_io_enter();
}

/* An event begun now without an open span (fork: the child must not find
 * its parent's span; exec: it is written before the call). */
DFT_IO_INLINE void begin_plain(dft_io_ev *e, const char *name)
{
    e->name = name;
    e->name_len = strlen(name);
    e->cat = CAT;
    e->cat_len = sizeof CAT - 1;
    e->n = 0;
    e->gen = dft_trace_gen();
    e->t0 = dft_clock_us();
    e->open_h = NULL;
}

/* ---- fork ------------------------------------------------------------------ */

static pid_t (*real_fork)(void);

static pid_t w_fork(void)
{
    if (!enter_own())
        return real_fork();
    dft_io_ev ev;
    begin_plain(&ev, "fork");
    pid_t r = real_fork();
    int e = errno;
    if (r == 0) { /* the child: its file holds its own events only */
        dft_io_leave();
        errno = e;
        return 0;
    }
    ev.t1 = dft_clock_us();
    dft_io_int(&ev, "ret", r);
    dft_io_finish(&ev, r < 0, e);
    return r;
}

/* ---- exec -------------------------------------------------------------------- */

static int (*real_execv)(const char *, char *const[]);
static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvp)(const char *, char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);

static void add_argv(dft_io_ev *e, char *const argv[])
{
    static const char *const keys[EXEC_ARGS] = {"arg0", "arg1", "arg2", "arg3", "arg4", "arg5"};
    for (int i = 0; argv && i < EXEC_ARGS && argv[i]; i++)
        dft_io_str(e, keys[i], argv[i]);
}

/* Starts an exec's event (0: not recorded, call the real function).  path
 * is hashed as the program passed it (the reference's rule). */
static int exec_begin(dft_io_ev *e, const char *name, const char *path, int fd,
                      char *const argv[])
{
    if (!enter_own())
        return 0;
    begin_plain(e, name);
    if (path)
        dft_io_hash(e, "fhash", dft_intern(DFT_INTERN_FILE, path, strlen(path)));
    if (fd >= 0)
        dft_io_int(e, "fd", fd);
    add_argv(e, argv);
    return 1;
}

/* Before an exec that should run (its file is executable, or PATH is
 * searched): its event goes to the file now, with every buffered one, as
 * the new image keeps none of them.  Takes locks; releases the GIL if held
 * while it waits for the writer. */
static int exec_announce(dft_io_ev *e, int runs)
{
    if (!runs)
        return 0;
    dft_event ev = {.name = e->name,
                    .name_len = e->name_len,
                    .cat = e->cat,
                    .cat_len = e->cat_len,
                    .ts = e->t0,
                    .dur = 0,
                    .ph = DFT_PH_COMPLETE,
                    .args = e->a,
                    .nargs = e->n};
    if (dft_trace_active() && dft_emit_record_in(&ev, e->gen) == 0)
        dft_flush();
    return 1;
}

/* The exec returned: it failed.  Its event, with ret -1 and errno. */
static int exec_failed(dft_io_ev *e, int r, int err)
{
    e->t1 = dft_clock_us();
    dft_io_int(e, "ret", r);
    dft_io_finish(e, 1, err);
    return r;
}

static int runs_path(const char *path) { return path && access(path, X_OK) == 0; }

/* PATH is searched for a name without '/': assume it is found. */
static int runs_search(const char *file)
{
    return file && (strchr(file, '/') == NULL || access(file, X_OK) == 0);
}

static int w_execv(const char *path, char *const argv[])
{
    dft_io_ev ev;
    if (!exec_begin(&ev, "execv", path, -1, argv))
        return real_execv(path, argv);
    exec_announce(&ev, runs_path(path));
    int r = real_execv(path, argv);
    return exec_failed(&ev, r, errno);
}

static int w_execve(const char *path, char *const argv[], char *const envp[])
{
    dft_io_ev ev;
    if (!exec_begin(&ev, "execve", path, -1, argv))
        return real_execve(path, argv, envp);
    exec_announce(&ev, runs_path(path));
    int r = real_execve(path, argv, envp);
    return exec_failed(&ev, r, errno);
}

static int w_execvp(const char *file, char *const argv[])
{
    dft_io_ev ev;
    if (!exec_begin(&ev, "execvp", file, -1, argv))
        return real_execvp(file, argv);
    exec_announce(&ev, runs_search(file));
    int r = real_execvp(file, argv);
    return exec_failed(&ev, r, errno);
}

static int w_execvpe(const char *file, char *const argv[], char *const envp[])
{
    dft_io_ev ev;
    if (!exec_begin(&ev, "execvpe", file, -1, argv))
        return real_execvpe(file, argv, envp);
    exec_announce(&ev, runs_search(file));
    int r = real_execvpe(file, argv, envp);
    return exec_failed(&ev, r, errno);
}

static int w_fexecve(int fd, char *const argv[], char *const envp[])
{
    dft_io_ev ev;
    if (!exec_begin(&ev, "fexecve", NULL, fd, argv))
        return real_fexecve(fd, argv, envp);
    exec_announce(&ev, fd >= 0);
    int r = real_fexecve(fd, argv, envp);
    return exec_failed(&ev, r, errno);
}

/* ---- posix_spawn: the child is made and has exec'd when it returns ----------- */

typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);
static spawn_fn real_posix_spawn, real_posix_spawnp;

/* posix_spawn returns the error number and leaves errno alone. */
static int spawn_common(const char *name, spawn_fn real, pid_t *pid, const char *path,
                        const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                        char *const argv[], char *const envp[])
{
    if (!enter_own())
        return real(pid, path, fa, attr, argv, envp);
    pid_t child = -1;
    pid_t *out = pid ? pid : &child;
    dft_io_ev ev_;
    dft_io_begin(&ev_, name, CAT);
    CALL(int, real(out, path, fa, attr, argv, envp));
    if (path)
        dft_io_hash(&ev_, "fhash", dft_intern(DFT_INTERN_FILE, path, strlen(path)));
    add_argv(&ev_, argv);
    if (r_ == 0)
        dft_io_int(&ev_, "child_pid", *out);
    dft_io_int(&ev_, "ret", r_);
    if (r_ != 0)
        dft_io_int(&ev_, "errno", r_);
    dft_io_finish(&ev_, 0, e_);
    return r_;
}

static int w_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                         const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn_common("posix_spawn", real_posix_spawn, pid, path, fa, attr, argv, envp);
}

static int w_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn_common("posix_spawnp", real_posix_spawnp, pid, file, fa, attr, argv, envp);
}

/* ---- wait ---------------------------------------------------------------------- */

static pid_t (*real_waitpid)(pid_t, int *, int);
static pid_t (*real_wait)(int *);
static pid_t (*real_wait4)(pid_t, int *, int, struct rusage *);

/* The end of a wait: the pid reaped (0: none yet, with WNOHANG) and, for a
 * child reaped, its wait status. */
static pid_t wait_end(dft_io_ev *ev, pid_t r, int e, const int *status)
{
    if (r > 0 && status)
        dft_io_int(ev, "status", *status);
    dft_io_int(ev, "ret", r);
    dft_io_finish(ev, r < 0, e);
    return r;
}

static pid_t w_waitpid(pid_t pid, int *status, int options)
{
    if (!enter_own())
        return real_waitpid(pid, status, options);
    dft_io_ev ev_;
    dft_io_begin(&ev_, "waitpid", CAT);
    CALL(pid_t, real_waitpid(pid, status, options));
    dft_io_int(&ev_, "pid", pid);
    dft_io_int(&ev_, "options", options);
    return wait_end(&ev_, r_, e_, status);
}

static pid_t w_wait(int *status)
{
    if (!enter_own())
        return real_wait(status);
    dft_io_ev ev_;
    dft_io_begin(&ev_, "wait", CAT);
    CALL(pid_t, real_wait(status));
    return wait_end(&ev_, r_, e_, status);
}

static pid_t w_wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
    if (!enter_own())
        return real_wait4(pid, status, options, ru);
    dft_io_ev ev_;
    dft_io_begin(&ev_, "wait4", CAT);
    CALL(pid_t, real_wait4(pid, status, options, ru));
    dft_io_int(&ev_, "pid", pid);
    dft_io_int(&ev_, "options", options);
    return wait_end(&ev_, r_, e_, status);
}

/* ---- the table --------------------------------------------------------------- */

#define HOOK(FN) {#FN, (void *)w_##FN, (void **)&real_##FN}

const dft_io_hook dft_io_process_hooks[] = {
    HOOK(fork),        HOOK(execv),        HOOK(execve), HOOK(execvp),
    HOOK(execvpe),     HOOK(fexecve),      HOOK(posix_spawn), HOOK(posix_spawnp),
    HOOK(waitpid),     HOOK(wait),         HOOK(wait4),
};
const size_t dft_io_process_nhooks = sizeof dft_io_process_hooks / sizeof *dft_io_process_hooks;
