/* core/tracer.c: the tracer's lifecycle (start, lazy start, finalize, fork,
 * running the hooks integrations register in core/state.c) and the public C
 * API of dftracer.h.  The
 * intern set (core/intern.c), the flusher thread (core/flusher.c) and the
 * signal handlers (core/signals.c) are started and reset from here. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/flusher.h"
#include "core/identity.h"
#include "core/inflight.h"
#include "core/intern.h"
#include "core/memory.h"
#include "core/park.h"
#include "core/sigmask.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/trace_file.h"
#include "core/trace_name.h"
#include "core/writer.h"
#include "format/record.h"

/* ---- public C API ------------------------------------------------------ */

/* Any thread, no GIL. */
int dft_active(void) { return atomic_load_explicit(&dft_trace.active, memory_order_relaxed); }

/* Any thread, no GIL. */
int dft_emit(const dft_event *ev)
{
    if (!atomic_load_explicit(&dft_trace.active, memory_order_relaxed) && dft_lazy_start() != 0)
        return 1;
    return dft_emit_logged(ev);
}

/* Any thread, no GIL. */
void dft_enter_scope(void)
{
    if (!atomic_load_explicit(&dft_trace.active, memory_order_relaxed) && dft_lazy_start() != 0)
        return;
    dft_scope_push();
}

/* Any thread, no GIL. */
void dft_exit_scope(void) { dft_scope_pop(); }

/* Any thread, no GIL. */
int dft_emit_complete(const char *name, const char *cat, int64_t ts, int64_t dur,
                      const dft_arg *args, unsigned nargs)
{
    dft_event ev = {.name = name, .name_len = strlen(name), .cat = cat, .cat_len = strlen(cat),
                    .ts = ts, .dur = dur, .ph = DFT_PH_COMPLETE, .args = args, .nargs = nargs};
    return dft_emit(&ev);
}

/* Any thread, no GIL. */
int dft_emit_metadata(const char *kind, const char *key, size_t key_len, const char *value,
                      size_t value_len)
{
    if (!dft_trace_ready())
        return 1;
    return dft_emit_meta(kind, 0, 0, key, key_len, value, value_len, 0, 0);
}

/* Any thread, no GIL. */
int dft_name_lane(int64_t pid, int64_t tid, const char *name)
{
    if (!dft_trace_ready())
        return 1;
    return dft_emit_meta("thread_name", pid, tid, name, strlen(name), "thread_name", 11, 0, 0);
}

/* Takes locks; not for signal handlers. */
void dft_flush(void)
{
    if (atomic_load(&dft_trace.active)) {
        dft_run_lifecycle_hooks(DFT_HOOK_FLUSH);
        dft_flush_all_threads(1);
    }
}

/* ---- what the trace is ------------------------------------------------- */

/* Any thread. */
const char *dft_trace_path(void)
{
    const char *p = dft_writer_path();
    return p ? p : dft_g.path;
}

int dft_trace_explicit(void) { return dft_g.explicit_init; }

const dft_config *dft_trace_config(void) { return &dft_g.cfg; }

/* At import, GIL held, before any trace. */
void dft_set_python_hooks(void *(*release_gil)(void), void (*restore_gil)(void *),
                          int (*thread_name)(char *buf, size_t cap))
{
    dft_g.before_wait = release_gil;
    dft_g.after_wait = restore_gil;
    dft_g.thread_name = thread_name;
}

/* ---- start ------------------------------------------------------------- */

static void read_cmdline(char *buf, size_t cap, size_t *len, char *exec_name, size_t exec_cap)
{
    *len = 0;
    snprintf(exec_name, exec_cap, "python");
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return;
    size_t m = (size_t)n;
    while (m > 0 && buf[m - 1] == '\0')
        m--;
    buf[m] = '\0';
    /* argv[0], or the script/module when argv[0] is a Python interpreter. */
    const char *argv[3] = {buf, NULL, NULL};
    int argc = 1;
    for (size_t i = 0; i < m && argc < 3; i++)
        if (buf[i] == '\0')
            argv[argc++] = buf + i + 1;
    const char *pick = argv[0];
    const char *base0 = strrchr(argv[0], '/');
    base0 = base0 ? base0 + 1 : argv[0];
    if (strstr(base0, "python") && argc > 1) {
        if (!strcmp(argv[1], "-m") && argc > 2)
            pick = argv[2];
        else if (argv[1][0] != '-')
            pick = argv[1];
    }
    const char *base = strrchr(pick, '/');
    base = base ? base + 1 : pick;
    size_t bl = strlen(base);
    if (bl >= exec_cap)
        bl = exec_cap - 1;
    memcpy(exec_name, base, bl);
    exec_name[bl] = '\0';
    for (size_t i = 0; i < m; i++)
        if (buf[i] == '\0')
            buf[i] = ';';
    *len = m;
}

/* Writes HH, process_name and the start event on the calling thread. */
static void emit_header(void) /* under life_lock, no GIL */
{
    dft_emit_meta("HH", 0, 0, dft_g.hostname, strlen(dft_g.hostname), NULL, 0, 1, dft_g.hhash);
    dft_intern_insert(dft_g.hhash);
    char cmd[4096], exec_name[256], pname[300];
    size_t cmd_len;
    read_cmdline(cmd, sizeof cmd, &cmd_len, exec_name, sizeof exec_name);
    int64_t rank = dft_identity_env_rank();
    int n = rank >= 0 ? snprintf(pname, sizeof pname, "%s rank %lld", exec_name, (long long)rank)
                      : snprintf(pname, sizeof pname, "%s", exec_name);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof pname)
        n = (int)sizeof pname - 1;
    dft_emit_meta("process_name", 0, 0, pname, (size_t)n, "process_name", 12, 0, 0);
    dft_identity_emit_header(); /* rank, first clock pair: kept with the header */
    uint64_t gen = dft_trace_gen();
    dft_keep_own_thread_now(gen); /* HH first; the start event's hashes follow */
    if (!dft_g.cfg.inc_metadata) {
        dft_arg a = {.key = "version", .type = DFT_ARG_STR, .v.s = {DFT_VERSION, strlen(DFT_VERSION)}};
        dft_event ev = {.name = "start", .name_len = 5, .cat = "dftracer", .cat_len = 8,
                        .ts = dft_clock_us(), .ph = DFT_PH_COMPLETE, .args = &a, .nargs = 1};
        dft_emit_top(&ev);
        dft_keep_own_thread_now(gen);
        return;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, "?");
    time_t now = time(NULL);
    struct tm tm;
    char date[64];
    if (!localtime_r(&now, &tm) || !strftime(date, sizeof date, "%a %b %d %H:%M:%S %Y", &tm))
        date[0] = '\0';
    dft_arg args[6] = {
        {.key = "version", .type = DFT_ARG_STR, .v.s = {DFT_VERSION, strlen(DFT_VERSION)}},
        {.key = "cmd_hash", .type = DFT_ARG_HASH, .v.hash = dft_intern(DFT_INTERN_STRING, cmd, cmd_len)},
        {.key = "exec_hash",
         .type = DFT_ARG_HASH,
         .v.hash = dft_intern(DFT_INTERN_STRING, exec_name, strlen(exec_name))},
        {.key = "cwd", .type = DFT_ARG_HASH, .v.hash = dft_intern(DFT_INTERN_FILE, cwd, strlen(cwd))},
        {.key = "date", .type = DFT_ARG_STR, .v.s = {date, strlen(date)}},
        {.key = "ppid", .type = DFT_ARG_INT, .v.i = (int64_t)getppid()},
    };
    dft_event ev = {.name = "start", .name_len = 5, .cat = "dftracer", .cat_len = 8,
                    .ts = dft_clock_us(), .ph = DFT_PH_COMPLETE, .args = args, .nargs = 6};
    dft_emit_top(&ev);
    dft_keep_own_thread_now(gen);
}

static void make_path(void)
{
    char *p = dft_trace_name_build(dft_g.cfg.log_file ? dft_g.cfg.log_file : "./trace",
                                   dft_g.hostname, dft_g.name_id, dft_g.cfg.compression);
    if (!p)
        return;
    free(dft_g.path);
    dft_g.path = p;
}

static void read_hostname(void)
{
    if (gethostname(dft_g.hostname, sizeof dft_g.hostname - 1) != 0)
        snprintf(dft_g.hostname, sizeof dft_g.hostname, "localhost");
    dft_g.hostname[sizeof dft_g.hostname - 1] = '\0';
    for (char *c = dft_g.hostname; *c; c++)
        if (*c == '/' || *c == ' ' || *c == '\t' || *c == '\n')
            *c = '_';
    dft_g.hhash = dft_hash64(dft_g.hostname, strlen(dft_g.hostname));
}

static int open_file(int open_now, uint64_t gen)
{
    dft_writer_opts o = {.path = dft_g.path,
                         .gen = gen,
                         .compression = dft_g.cfg.compression,
                         .inc_metadata = dft_g.cfg.inc_metadata,
                         .nthreads = dft_g.cfg.writer_threads,
                         .pid = dft_g.pid,
                         .hhash = dft_g.hhash};
    return dft_writer_open(&o, open_now);
}

static void finalize_locked(int sig);
static void install_process_hooks(void);

static int start_held(const char *log_file, const char *data_dir, int64_t process_id,
                      int explicit_init, char *err, size_t errlen, int *started);

/* Any thread, no GIL (initialize_log releases it). */
int dft_start(const char *log_file, const char *data_dir, int64_t process_id, int explicit_init,
              char *err, size_t errlen)
{
    sigset_t saved;
    dft_signals_hold(&saved); /* the header is written under the writer's locks */
    int started = 0;
    int rc = start_held(log_file, data_dir, process_id, explicit_init, err, errlen, &started);
    dft_signals_release(&saved);
    if (started)
        dft_run_lifecycle_hooks(DFT_HOOK_STARTED);
    return rc;
}

/* initialize_log in a process whose trace started by itself (an event
 * logged before it, as DLIO's first `@dlp.log_init` is): the trace goes on
 * in the file initialize_log names, with every event logged so far -- the
 * file is renamed, and the I/O filter takes the new data_dir -- so that no
 * file is left in the current directory.  0, or -1 when it cannot be
 * renamed there (another file system, a name taken): the caller finalizes
 * the trace and starts a new one, as before.  Caller holds life_lock; no
 * GIL. */
static int adopt_locked(const char *log_file, const char *data_dir, int64_t process_id)
{
    char *stem = log_file && *log_file ? dft_config_stem(log_file) : NULL;
    int64_t name_id = process_id >= 0 ? process_id : dft_g.real_pid;
    const char *use = stem ? stem : dft_g.cfg.log_file ? dft_g.cfg.log_file : "./trace";
    char *path = dft_trace_name_build(use, dft_g.hostname, name_id, dft_g.cfg.compression);
    char *dd = data_dir && *data_dir ? strdup(data_dir) : NULL;
    char dir[PATH_MAX];
    int ok = path && (!data_dir || !*data_dir || dd) &&
             dft_trace_file_make_dir(path, dir, sizeof dir) == 0 &&
             (strcmp(path, dft_g.path ? dft_g.path : "") == 0 || dft_writer_rename(path) == 0);
    if (!ok) {
        dft_log(DFT_LOG_INFO, "the trace that started by itself cannot take the name %s: %s; "
                "it ends there and a new one starts", path ? path : "?", strerror(errno));
        free(stem);
        free(path);
        free(dd);
        return -1;
    }
    if (stem) {
        free(dft_g.cfg.log_file);
        dft_g.cfg.log_file = stem;
    }
    if (dd) {
        free(dft_g.cfg.data_dir);
        dft_g.cfg.data_dir = dd;
    }
    free(dft_g.path);
    dft_g.path = path;
    dft_g.name_id = name_id;
    dft_g.explicit_init = 1;
    dft_run_lifecycle_hooks(DFT_HOOK_RECONFIGURED);
    /* the stacks request file is named after the trace: the flusher watches
     * the new one (it reads the name only as it starts) */
    sigset_t saved;
    dft_signals_hold(&saved);
    dft_flusher_stop();
    dft_flusher_start();
    dft_signals_release(&saved);
    dft_log(DFT_LOG_INFO, "tracing goes on in %s", dft_writer_path());
    return 0;
}

static int start_held(const char *log_file, const char *data_dir, int64_t process_id,
                      int explicit_init, char *err, size_t errlen, int *started)
{
    pthread_mutex_lock(&dft_g.life_lock);
    int state = atomic_load(&dft_trace.state);
    if (state == DFT_STATE_ACTIVE) {
        if (!explicit_init || dft_g.explicit_init) {
            pthread_mutex_unlock(&dft_g.life_lock);
            return 0;
        }
        if (adopt_locked(log_file, data_dir, process_id) == 0) {
            pthread_mutex_unlock(&dft_g.life_lock);
            return 0;
        }
        finalize_locked(0); /* it could not: a file of its own, then */
    }
    if (!explicit_init && state != DFT_STATE_UNINIT) {
        pthread_mutex_unlock(&dft_g.life_lock);
        return 1;
    }
    dft_config_free(&dft_g.cfg);
    dft_config_load(&dft_g.cfg);
    if (!dft_g.cfg.enable) {
        atomic_store(&dft_trace.state, DFT_STATE_DISABLED);
        pthread_mutex_unlock(&dft_g.life_lock);
        return 1;
    }
    if (log_file && *log_file) {
        char *stem = dft_config_stem(log_file);
        if (stem) {
            free(dft_g.cfg.log_file);
            dft_g.cfg.log_file = stem;
        }
    }
    if (data_dir && *data_dir) {
        free(dft_g.cfg.data_dir);
        dft_g.cfg.data_dir = strdup(data_dir);
    }
    dft_clock_init(); /* done at import; kept for C API users */
    read_hostname();
    dft_g.real_pid = (int64_t)getpid();
    dft_g.pid = dft_g.real_pid;
    dft_g.name_id = process_id >= 0 ? process_id : dft_g.real_pid;
    dft_g.flush_threshold = dft_g.cfg.write_buffer;
    size_t base = dft_g.cfg.write_buffer < 65536 ? 65536 : dft_g.cfg.write_buffer;
    dft_g.chunk_cap = base + DFT_REC_MAX;
    make_path();
    char dir[PATH_MAX];
    if (dft_g.path && dft_trace_file_make_dir(dft_g.path, dir, sizeof dir) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create log directory %s: %s", dir, strerror(e));
        atomic_store(&dft_trace.state, explicit_init ? DFT_STATE_UNINIT : DFT_STATE_DISABLED);
        pthread_mutex_unlock(&dft_g.life_lock);
        errno = e;
        return -1;
    }
    if (!dft_g.path || open_file(1, dft_trace_gen() + 1) != 0) {
        int e = dft_g.path ? errno : ENOMEM;
        snprintf(err, errlen, "cannot open trace file %s: %s", dft_g.path ? dft_g.path : "?",
                 strerror(e));
        atomic_store(&dft_trace.state, explicit_init ? DFT_STATE_UNINIT : DFT_STATE_DISABLED);
        pthread_mutex_unlock(&dft_g.life_lock);
        errno = e;
        return -1;
    }
    dft_g.explicit_init = explicit_init;
    atomic_fetch_add(&dft_trace.gen, 1);
    atomic_store(&dft_trace.state, DFT_STATE_ACTIVE);
    atomic_store(&dft_trace.active, 1);
    install_process_hooks();
    dft_signals_install(dft_g.cfg.bind_signals);
    dft_dropped_take(); /* a count left by an earlier trace's finalize */
    dft_args_dropped_take();
    emit_header();
    dft_run_lifecycle_hooks(DFT_HOOK_OPENED);
    dft_keep_own_thread_now(dft_trace_gen());
    dft_writer_write_kept(); /* the header is on disk before tracing goes on */
    dft_flusher_start();
    dft_threads_unpark();
    pthread_mutex_unlock(&dft_g.life_lock);
    dft_log(DFT_LOG_INFO, "tracing to %s", dft_writer_path());
    *started = 1;
    return 0;
}

/* Any thread, no GIL. */
int dft_lazy_start(void)
{
    int state = atomic_load_explicit(&dft_trace.state, memory_order_relaxed);
    if (state == DFT_STATE_ACTIVE)
        return 0;
    if (state != DFT_STATE_UNINIT)
        return 1;
    char err[512];
    if (dft_start(NULL, NULL, -1, 0, err, sizeof err) < 0) {
        dft_log(DFT_LOG_ERROR, "%s; tracing disabled", err);
        return 1;
    }
    return atomic_load(&dft_trace.active) ? 0 : 1;
}

/* ---- finalize ---------------------------------------------------------- */

/* How long finalize waits for threads in the middle of recording an event. */
#define FINALIZE_WAIT_NS 100000000LL

/* Caller holds life_lock; no GIL.  sig: the signal that ends the process
 * after this (its `end` says so: docs/trace-format.md), 0 for any other end. */
static void finalize_locked(int sig)
{
    if (atomic_load(&dft_trace.state) != DFT_STATE_ACTIVE)
        return;
    /* SIGTERM/SIGINT wait until the trace is complete: on this thread they stay
     * pending until the end (a pool terminating a worker that is already
     * finalizing); another thread that takes them waits for dft_finalizing. */
    sigset_t saved;
    dft_signals_hold(&saved);
    atomic_store(&dft_finalizing, 1);
    dft_run_lifecycle_hooks(DFT_HOOK_FINALIZING); /* e.g. restores the GOT before the end event */
    dft_flusher_stop();
    dft_threads_unpark();
    /* Events recorded after this point are refused and counted (num_dropped):
     * the end event must be the last line.  Threads in the middle of recording
     * one finish first, so their event is in the last flush. */
    atomic_store(&dft_trace.active, 0);
    dft_wait_for_recorders(FINALIZE_WAIT_NS);
    dft_flush_all_threads(1);
    dft_tstate *ts = dft_tstate_get();
    int64_t id = ts ? atomic_fetch_add(&dft_g.next_id_block, 1) : 0;
    dft_arg a[4] = {
        {.key = "num_events", .type = DFT_ARG_INT, .v.i = (int64_t)dft_writer_lines()},
    };
    int na = 1;
    int64_t dropped = (int64_t)dft_dropped_take(), args_dropped = (int64_t)dft_args_dropped_take();
    if (dropped > 0)
        a[na++] = (dft_arg){.key = "num_dropped", .type = DFT_ARG_INT, .v.i = dropped};
    if (args_dropped > 0)
        a[na++] = (dft_arg){.key = "num_args_dropped", .type = DFT_ARG_INT, .v.i = args_dropped};
    if (sig > 0) /* killed by it: readers never take this end for a normal one */
        a[na++] = (dft_arg){.key = "signal", .type = DFT_ARG_INT, .v.i = sig};
    dft_event end = {.name = "end", .name_len = 3, .cat = "dftracer", .cat_len = 8,
                     .ts = dft_clock_us(), .ph = DFT_PH_COMPLETE, .tid = ts ? ts->tid : 0,
                     .args = a, .nargs = na};
    dft_writer_write_now(&end, id);
    dft_writer_close();
    dft_mem_statm_close(); /* the flusher, its one reader here, has stopped */
    atomic_store(&dft_trace.state, DFT_STATE_FINALIZED);
    atomic_store(&dft_finalizing, 0);
    dft_signals_release(&saved);
    dft_log(DFT_LOG_INFO, "finalized %s", dft_trace_path() ? dft_trace_path() : "trace");
}

/* Any thread, no GIL. */
void dft_finalize(void)
{
    pthread_mutex_lock(&dft_g.life_lock);
    finalize_locked(0);
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* C atexit: after Python's own atexit handlers (which finalize first), no GIL. */
static void at_exit(void) { dft_finalize(); }

/* The finalize of signal sig, which ends the process (core/signals.c), run
 * by the flusher while the handler waits.  The interrupted thread may hold
 * life_lock, and would never let it go: it is only tried until deadline_ns
 * (0: the handler flushes what it can instead).  The flusher, no GIL. */
static int finalize_for_signal(long long deadline_ns, int sig)
{
    while (pthread_mutex_trylock(&dft_g.life_lock) != 0) {
        /* The holder may be finalizing (a worker's exit: it writes the end)
         * or waiting to join this thread (that, or a fork): flush instead. */
        if (dft_signal_clock_ns() >= deadline_ns || dft_flusher_stopping() ||
            atomic_load(&dft_finalizing))
            return 0;
        dft_signal_nap_1ms();
    }
    finalize_locked(sig);
    pthread_mutex_unlock(&dft_g.life_lock);
    return 1;
}

/* ---- fork -------------------------------------------------------------- */

/* Before fork(): write out everything buffered so the child cannot inherit it
 * (the parent writes it) and stop the tracer's threads, so that the process
 * has no more threads at fork() than without dftracer (core/park.c); then
 * hold the locks so the child gets them consistent. */
/* pthread_atfork prepare: runs in the forking thread, GIL held but never released here. */
static sigset_t fork_saved_mask; /* under life_lock, from prepare to parent/child */

static void fork_prepare(void)
{
    pthread_mutex_lock(&dft_g.life_lock);
    /* A SIGTERM taken on this thread while it holds the tracer's locks could
     * not be flushed: it waits until fork() is done. */
    dft_signals_hold(&fork_saved_mask);
    dft_no_gil_release = 1;
    dft_threads_park();
    dft_no_gil_release = 0;
    pthread_mutex_lock(&dft_g.registry_lock);
    dft_writer_atfork_prepare();
}

/* pthread_atfork parent handler, after park.c's (which decided what the
 * parked threads wait for); no GIL needed.  Starts no thread: the parent's
 * os.fork() counts threads after this (core/park.c). */
static void fork_parent(void)
{
    dft_writer_atfork_parent();
    pthread_mutex_unlock(&dft_g.registry_lock);
    dft_signals_release(&fork_saved_mask);
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* In the child: a new file under the same stem, never the parent's events.
 * Single-threaded at this point; no GIL needed. */
static void fork_child(void)
{
    dft_writer_atfork_child();
    dft_clock_after_fork();
    pthread_mutex_init(&dft_g.registry_lock, NULL);
    pthread_mutex_init(&dft_g.life_lock, NULL);
    dft_intern_after_fork_child();
    dft_tstate_reset_current();
    dft_inflight_after_fork_child(); /* the parent's collectives are not the child's */
    dft_flusher_after_fork_child();
    dft_threads_unpark(); /* the flusher starts below, with the child's header */
    dft_dropped_take();
    dft_args_dropped_take(); /* the parent's, in its own trace */
    atomic_store(&dft_finalizing, 0);
    if (atomic_load(&dft_trace.state) != DFT_STATE_ACTIVE) {
        dft_signals_release(&fork_saved_mask);
        return;
    }
    dft_g.real_pid = (int64_t)getpid();
    dft_g.pid = dft_g.real_pid;
    dft_g.name_id = dft_g.real_pid; /* its own file, under the parent's stem */
    make_path();
    atomic_fetch_add(&dft_trace.gen, 1);
    if (!dft_g.path || open_file(0, dft_trace_gen()) != 0) {
        dft_log(DFT_LOG_ERROR, "forked child cannot open %s: %s; tracing disabled",
                dft_g.path ? dft_g.path : "trace", strerror(errno));
        atomic_store(&dft_trace.active, 0);
        atomic_store(&dft_trace.state, DFT_STATE_DISABLED);
        dft_run_lifecycle_hooks(DFT_HOOK_ABANDONED);
        dft_signals_release(&fork_saved_mask);
        return;
    }
    /* The header is kept by the writer (emit_header), not written: a child
     * that execs at once leaves no file; one that lives on has it at the head
     * of its first member, or written by the flusher within the interval. */
    emit_header();
    dft_flusher_start(); /* with SIGTERM still blocked: the new thread blocks all anyway */
    dft_signals_release(&fork_saved_mask);
}

static void install_process_hooks(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    dft_park_install(); /* first: park.c's prepare runs after ours, its parent and child before */
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        dft_log(DFT_LOG_ERROR, "pthread_atfork failed; forked children will not be traced");
    if (atexit(at_exit) != 0)
        dft_log(DFT_LOG_ERROR, "atexit failed; call finalize() before exit");
    dft_flusher_set_finalize(finalize_for_signal);
}
