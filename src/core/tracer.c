/* core/tracer.c: the tracer's lifecycle (start, finalize, fork, signals) and the
 * public C API of dftracer.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/identity.h"
#include "core/state.h"
#include "core/tracer.h"
#include "core/writer.h"
#include "format/record.h"

/* ---- interned strings (FH/SH), once per file --------------------------- */

static struct {
    pthread_mutex_t lock;
    uint64_t *slots; /* open addressing; 0 marks an empty slot */
    size_t cap, len;
    uint64_t gen;
} intern = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Returns 1 if h was not yet recorded for the current file (and records it),
 * 0 if it was, -1 when out of memory.  Any thread, no GIL. */
static int intern_insert(uint64_t h)
{
    if (h == 0)
        h = 1; /* 0 marks empty slots; a collision here only repeats an FH line */
    uint64_t gen = atomic_load(&dft_g.gen);
    pthread_mutex_lock(&intern.lock);
    if (intern.gen != gen) {
        if (intern.slots)
            memset(intern.slots, 0, intern.cap * sizeof *intern.slots);
        intern.len = 0;
        intern.gen = gen;
    }
    if ((intern.len + 1) * 2 > intern.cap) {
        size_t cap = intern.cap ? intern.cap * 2 : 1024;
        uint64_t *s = calloc(cap, sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&intern.lock);
            return -1;
        }
        for (size_t i = 0; i < intern.cap; i++) {
            uint64_t v = intern.slots[i];
            if (!v)
                continue;
            size_t j = (size_t)v & (cap - 1);
            while (s[j])
                j = (j + 1) & (cap - 1);
            s[j] = v;
        }
        free(intern.slots);
        intern.slots = s;
        intern.cap = cap;
    }
    size_t j = (size_t)h & (intern.cap - 1);
    int fresh = 1;
    while (intern.slots[j]) {
        if (intern.slots[j] == h) {
            fresh = 0;
            break;
        }
        j = (j + 1) & (intern.cap - 1);
    }
    if (fresh) {
        intern.slots[j] = h;
        intern.len++;
    }
    pthread_mutex_unlock(&intern.lock);
    return fresh;
}

/* ---- lifecycle hooks ---------------------------------------------------- */

#define DFT_HOOKS_MAX 8
static _Atomic(dft_lifecycle_hook) hooks[DFT_HOOKS_MAX];

int dft_add_lifecycle_hook(dft_lifecycle_hook fn)
{
    for (int i = 0; i < DFT_HOOKS_MAX; i++) {
        dft_lifecycle_hook none = NULL;
        if (atomic_load(&hooks[i]) == fn || atomic_compare_exchange_strong(&hooks[i], &none, fn))
            return 0;
    }
    return -1;
}

static void run_hooks(dft_hook_event ev)
{
    for (int i = 0; i < DFT_HOOKS_MAX; i++) {
        dft_lifecycle_hook fn = atomic_load(&hooks[i]);
        if (fn)
            fn(ev);
    }
}

/* ---- public C API ------------------------------------------------------ */

/* Any thread, no GIL. */
int dft_active(void) { return atomic_load_explicit(&dft_g.active, memory_order_relaxed); }

/* Any thread, no GIL. */
int dft_emit(const dft_event *ev)
{
    if (!atomic_load_explicit(&dft_g.active, memory_order_relaxed) && dft_lazy_start() != 0)
        return 1;
    return dft_emit_record(ev, 0);
}

/* Any thread, no GIL. */
void dft_enter_scope(void)
{
    if (!atomic_load_explicit(&dft_g.active, memory_order_relaxed) && dft_lazy_start() != 0)
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

static int emit_meta(const char *kind, int64_t pid, int64_t tid, const char *key, size_t key_len,
                     const char *value, size_t value_len, int value_is_hash, uint64_t hash)
{
    dft_arg args[2] = {
        {.key = "name", .type = DFT_ARG_STR, .v.s = {key, key_len}},
        {.key = "value", .type = DFT_ARG_STR, .v.s = {value, value_len}},
    };
    if (value_is_hash) {
        args[1].type = DFT_ARG_HASH;
        args[1].v.hash = hash;
    }
    dft_event ev = {.name = kind, .name_len = strlen(kind), .cat = "dftracer", .cat_len = 8,
                    .ph = DFT_PH_METADATA, .pid = pid, .tid = tid, .args = args, .nargs = 2};
    return dft_emit(&ev);
}

/* Any thread, no GIL. */
int dft_emit_metadata(const char *kind, const char *key, size_t key_len, const char *value,
                      size_t value_len)
{
    return emit_meta(kind, 0, 0, key, key_len, value, value_len, 0, 0);
}

/* Any thread, no GIL. */
int dft_name_lane(int64_t pid, int64_t tid, const char *name)
{
    return emit_meta("thread_name", pid, tid, name, strlen(name), "thread_name", 11, 0, 0);
}

/* Any thread, no GIL. */
uint64_t dft_intern(dft_intern_kind kind, const char *s, size_t len)
{
    if (!atomic_load_explicit(&dft_g.active, memory_order_relaxed) && dft_lazy_start() != 0)
        return 0;
    uint64_t h = dft_hash64(s, len);
    if (intern_insert(h) == 1)
        emit_meta(kind == DFT_INTERN_FILE ? "FH" : "SH", 0, 0, s, len, NULL, 0, 1, h);
    return h;
}

/* Takes locks; not for signal handlers. */
void dft_flush(void)
{
    if (atomic_load(&dft_g.active)) {
        run_hooks(DFT_HOOK_FLUSH);
        dft_flush_all_threads(1);
    }
}

/* ---- the flusher thread -------------------------------------------------
 *
 * One thread per tracing process, started with the trace and stopped by
 * finalize.  Every half DFTRACER_FLUSH_INTERVAL it hands the writer the buffer
 * of each thread whose records have waited a whole period
 * (dft_flush_aged_threads), so an idle process keeps at most one interval of
 * events in memory.  A signal handler wakes it with sem_post (async-signal-
 * safe) to write every thread's committed records and drain the writer queue
 * while the handler waits: the handler itself takes no lock and allocates
 * nothing, and the flush runs on a thread that holds no lock of the
 * interrupted one.  All signals are blocked here; no GIL, never Python. */

static struct {
    pthread_t thread;
    int started;          /* a thread to join; under life_lock */
    sem_t wake;
    int sem_ready;
    _Atomic int stop;
    _Atomic int alive;    /* the thread runs and serves requests */
    _Atomic unsigned req; /* flush requests from signal handlers */
    _Atomic unsigned done;
    double period;        /* seconds between ticks; 0: requests only */
} fl;

static void *flusher_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    dft_no_gil_release = 1; /* never a Python thread */
    while (!atomic_load(&fl.stop)) {
        unsigned req = atomic_load(&fl.req);
        if (req != atomic_load(&fl.done)) {
            dft_flush_all_threads(1); /* every thread's records, and the queue drained */
            atomic_store(&fl.done, req);
            continue;
        }
        if (fl.period > 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            long long ns = t.tv_nsec + (long long)(fl.period * 1e9);
            t.tv_sec += (time_t)(ns / 1000000000);
            t.tv_nsec = (long)(ns % 1000000000);
            if (sem_clockwait(&fl.wake, CLOCK_MONOTONIC, &t) != 0 && errno == ETIMEDOUT &&
                !atomic_load(&fl.stop) && atomic_load(&dft_g.active)) {
                dft_flush_aged_threads();
                dft_identity_clock_tick();
            }
        } else {
            sem_wait(&fl.wake);
        }
    }
    atomic_store(&fl.alive, 0);
    return NULL;
}

/* Starts the flusher for the current trace.  Under life_lock (or single-
 * threaded in a forked child); no GIL. */
static void flusher_start(void)
{
    if (fl.started)
        return;
    if (!fl.sem_ready) {
        if (sem_init(&fl.wake, 0, 0) != 0) {
            dft_log(DFT_LOG_ERROR, "sem_init: %s; no time-based flush", strerror(errno));
            return;
        }
        fl.sem_ready = 1;
    }
    double iv = dft_g.cfg.flush_interval;
    fl.period = iv > 0 ? iv / 2 : 0;
    atomic_store(&fl.stop, 0);
    atomic_store(&fl.done, atomic_load(&fl.req));
    atomic_store(&fl.alive, 1);
    int e = pthread_create(&fl.thread, NULL, flusher_main, NULL);
    if (e != 0) {
        atomic_store(&fl.alive, 0);
        dft_log(DFT_LOG_ERROR, "cannot start the flusher thread: %s; no time-based flush",
                strerror(e));
        return;
    }
    fl.started = 1;
}

/* Under life_lock; no GIL.  Waits for a flush in progress to end. */
static void flusher_stop(void)
{
    if (!fl.started)
        return;
    atomic_store(&fl.stop, 1);
    sem_post(&fl.wake);
    pthread_join(fl.thread, NULL);
    fl.started = 0;
    atomic_store(&fl.alive, 0);
}

/* In a forked child the flusher thread does not exist; its semaphore may be
 * in any state.  Single-threaded. */
static void flusher_after_fork_child(void)
{
    fl.started = 0;
    atomic_store(&fl.alive, 0);
    if (fl.sem_ready)
        sem_init(&fl.wake, 0, 0);
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
    emit_meta("HH", 0, 0, dft_g.hostname, strlen(dft_g.hostname), NULL, 0, 1, dft_g.hhash);
    intern_insert(dft_g.hhash);
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
    emit_meta("process_name", 0, 0, pname, (size_t)n, "process_name", 12, 0, 0);
    dft_identity_emit_header(); /* rank, first clock pair */
    if (!dft_g.cfg.inc_metadata) {
        dft_arg a = {.key = "version", .type = DFT_ARG_STR, .v.s = {DFT_VERSION, strlen(DFT_VERSION)}};
        dft_event ev = {.name = "start", .name_len = 5, .cat = "dftracer", .cat_len = 8,
                        .ts = dft_clock_us(), .ph = DFT_PH_COMPLETE, .args = &a, .nargs = 1};
        dft_emit(&ev);
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
    dft_emit(&ev);
}

static void make_path(void)
{
    const char *stem = dft_g.cfg.log_file ? dft_g.cfg.log_file : "./trace";
    size_t n = strlen(stem) + strlen(dft_g.hostname) + 64;
    char *p = malloc(n);
    if (!p)
        return;
    snprintf(p, n, "%s-%s-%lld-app.pfw%s", stem, dft_g.hostname, (long long)dft_g.pid,
             dft_g.cfg.compression ? ".gz" : "");
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

static int open_file(int open_now)
{
    dft_writer_opts o = {.path = dft_g.path,
                         .compression = dft_g.cfg.compression,
                         .inc_metadata = dft_g.cfg.inc_metadata,
                         .nthreads = dft_g.cfg.writer_threads,
                         .pid = dft_g.pid,
                         .hhash = dft_g.hhash};
    return dft_writer_open(&o, open_now);
}

static void finalize_locked(void);
static void install_process_hooks(void);
static void install_signals(int all);

static int start_held(const char *log_file, const char *data_dir, int64_t process_id,
                      int explicit_init, char *err, size_t errlen, int *started);

/* Starts tracing (explicit_init: from initialize_log; else lazily from the
 * environment).  Returns 0 when tracing, 1 when disabled, -1 with err set.
 * Any thread, no GIL (initialize_log releases it). */
int dft_start(const char *log_file, const char *data_dir, int64_t process_id, int explicit_init,
              char *err, size_t errlen)
{
    sigset_t saved;
    dft_signals_hold(&saved); /* the header is written under the writer's locks */
    int started = 0;
    int rc = start_held(log_file, data_dir, process_id, explicit_init, err, errlen, &started);
    dft_signals_release(&saved);
    if (started)
        run_hooks(DFT_HOOK_STARTED);
    return rc;
}

static int start_held(const char *log_file, const char *data_dir, int64_t process_id,
                      int explicit_init, char *err, size_t errlen, int *started)
{
    pthread_mutex_lock(&dft_g.life_lock);
    int state = atomic_load(&dft_g.state);
    if (state == DFT_STATE_ACTIVE) {
        if (!explicit_init || dft_g.explicit_init) {
            pthread_mutex_unlock(&dft_g.life_lock);
            return 0;
        }
        finalize_locked(); /* an implicit trace gives way to initialize_log */
    }
    if (!explicit_init && state != DFT_STATE_UNINIT) {
        pthread_mutex_unlock(&dft_g.life_lock);
        return 1;
    }
    dft_config_free(&dft_g.cfg);
    dft_config_load(&dft_g.cfg);
    if (!dft_g.cfg.enable) {
        atomic_store(&dft_g.state, DFT_STATE_DISABLED);
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
    dft_g.pid = process_id >= 0 ? process_id : dft_g.real_pid;
    dft_g.flush_threshold = dft_g.cfg.write_buffer;
    size_t base = dft_g.cfg.write_buffer < 65536 ? 65536 : dft_g.cfg.write_buffer;
    dft_g.chunk_cap = base + DFT_REC_MAX;
    make_path();
    if (!dft_g.path || open_file(1) != 0) {
        int e = dft_g.path ? errno : ENOMEM;
        snprintf(err, errlen, "cannot open trace file %s: %s", dft_g.path ? dft_g.path : "?",
                 strerror(e));
        atomic_store(&dft_g.state, explicit_init ? DFT_STATE_UNINIT : DFT_STATE_DISABLED);
        pthread_mutex_unlock(&dft_g.life_lock);
        errno = e;
        return -1;
    }
    dft_g.explicit_init = explicit_init;
    atomic_fetch_add(&dft_g.gen, 1);
    atomic_store(&dft_g.state, DFT_STATE_ACTIVE);
    atomic_store(&dft_g.active, 1);
    install_process_hooks();
    install_signals(dft_g.cfg.bind_signals);
    emit_header();
    run_hooks(DFT_HOOK_OPENED);
    dft_flush_own_thread_now(); /* the header is on disk before tracing goes on */
    flusher_start();
    pthread_mutex_unlock(&dft_g.life_lock);
    dft_log(DFT_LOG_INFO, "tracing to %s", dft_writer_path());
    *started = 1;
    return 0;
}

/* The hot path's fallback when tracing is not active: starts tracing from the
 * environment the first time (DFTRACER_ENABLE), else returns 1 at once.
 * Any thread, no GIL. */
int dft_lazy_start(void)
{
    int state = atomic_load_explicit(&dft_g.state, memory_order_relaxed);
    if (state == DFT_STATE_ACTIVE)
        return 0;
    if (state != DFT_STATE_UNINIT)
        return 1;
    char err[512];
    if (dft_start(NULL, NULL, -1, 0, err, sizeof err) < 0) {
        dft_log(DFT_LOG_ERROR, "%s; tracing disabled", err);
        return 1;
    }
    return atomic_load(&dft_g.active) ? 0 : 1;
}

int dft_is_enabled_env(void)
{
    dft_config c;
    dft_config_load(&c);
    int e = c.enable;
    dft_config_free(&c);
    return e;
}

/* ---- finalize ---------------------------------------------------------- */

/* Set while finalize runs: a signal that comes then waits for it (see
 * on_signal) instead of cutting the end of the trace. */
static _Atomic int finalizing;

/* Caller holds life_lock; no GIL. */
static void finalize_locked(void)
{
    if (atomic_load(&dft_g.state) != DFT_STATE_ACTIVE)
        return;
    /* SIGTERM/SIGINT wait until the trace is complete: on this thread they stay
     * pending until the end (a pool terminating a worker that is already
     * finalizing); another thread that takes them waits for `finalizing`. */
    sigset_t saved;
    dft_signals_hold(&saved);
    atomic_store(&finalizing, 1);
    run_hooks(DFT_HOOK_FINALIZING); /* e.g. restores the GOT before the end event */
    flusher_stop();
    /* Emits after this point are dropped; the end event must be the last line. */
    atomic_store(&dft_g.active, 0);
    dft_flush_all_threads(1);
    dft_tstate *ts = dft_tstate_get();
    int64_t id = ts ? atomic_fetch_add(&dft_g.next_id_block, 1) : 0;
    dft_arg a = {.key = "num_events", .type = DFT_ARG_INT, .v.i = (int64_t)dft_writer_lines()};
    dft_event end = {.name = "end", .name_len = 3, .cat = "dftracer", .cat_len = 8,
                     .ts = dft_clock_us(), .ph = DFT_PH_COMPLETE, .tid = ts ? ts->tid : 0,
                     .args = &a, .nargs = 1};
    dft_writer_write_now(&end, id);
    dft_writer_close();
    atomic_store(&dft_g.state, DFT_STATE_FINALIZED);
    atomic_store(&finalizing, 0);
    dft_signals_release(&saved);
    dft_log(DFT_LOG_INFO, "finalized %s", dft_g.path ? dft_g.path : "trace");
}

/* Any thread, no GIL. */
void dft_finalize(void)
{
    pthread_mutex_lock(&dft_g.life_lock);
    finalize_locked();
    pthread_mutex_unlock(&dft_g.life_lock);
}

/* C atexit: after Python's own atexit handlers (which finalize first), no GIL. */
static void at_exit(void) { dft_finalize(); }

/* ---- fork -------------------------------------------------------------- */

/* Before fork(): write out everything buffered so the child cannot inherit it
 * (the parent writes it), then hold the locks so the child gets them consistent. */
/* pthread_atfork prepare: runs in the forking thread, GIL held but never released here. */
static sigset_t fork_saved_mask; /* under life_lock, from prepare to parent/child */

static void fork_prepare(void)
{
    pthread_mutex_lock(&dft_g.life_lock);
    /* A SIGTERM taken on this thread while it holds the tracer's locks could
     * not be flushed: it waits until fork() is done. */
    dft_signals_hold(&fork_saved_mask);
    dft_no_gil_release = 1;
    if (atomic_load(&dft_g.active))
        dft_flush_all_threads(1);
    dft_no_gil_release = 0;
    pthread_mutex_lock(&dft_g.registry_lock);
    dft_writer_atfork_prepare();
}

/* pthread_atfork parent handler; no GIL needed. */
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
    pthread_mutex_init(&intern.lock, NULL);
    dft_tstate_reset_current();
    flusher_after_fork_child();
    atomic_store(&finalizing, 0);
    if (atomic_load(&dft_g.state) != DFT_STATE_ACTIVE) {
        dft_signals_release(&fork_saved_mask);
        return;
    }
    dft_g.real_pid = (int64_t)getpid();
    dft_g.pid = dft_g.real_pid;
    make_path();
    atomic_fetch_add(&dft_g.gen, 1);
    if (!dft_g.path || open_file(0) != 0) {
        dft_log(DFT_LOG_ERROR, "forked child cannot open %s: %s; tracing disabled",
                dft_g.path ? dft_g.path : "trace", strerror(errno));
        atomic_store(&dft_g.active, 0);
        atomic_store(&dft_g.state, DFT_STATE_DISABLED);
        run_hooks(DFT_HOOK_ABANDONED);
        dft_signals_release(&fork_saved_mask);
        return;
    }
    /* The header stays in this thread's buffer: a child that execs at once
     * leaves no file; one that lives on has it written with its first chunk,
     * or by the flusher within the interval. */
    emit_header();
    flusher_start(); /* with SIGTERM still blocked: the new thread blocks all anyway */
    dft_signals_release(&fork_saved_mask);
}

static void install_process_hooks(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        dft_log(DFT_LOG_ERROR, "pthread_atfork failed; forked children will not be traced");
    if (atexit(at_exit) != 0)
        dft_log(DFT_LOG_ERROR, "atexit failed; call finalize() before exit");
}

/* ---- signals -----------------------------------------------------------
 *
 * SIGTERM is always handled while tracing (how pools, schedulers and
 * `kill` end a process): the handler has the flusher write every thread's
 * committed records and drain the writer queue, waits for it (at most
 * SIGNAL_WAIT_NS), then does what the signal would have done without dftracer:
 * the program's own handler runs, or the default action (the process dies by
 * the signal, so its exit status is kept).  DFTRACER_BIND_SIGNALS=1 adds
 * SIGINT, SIGABRT and SIGSEGV.  A signal ignored when tracing starts is left
 * alone (so exec'd children still inherit SIG_IGN). */

static const int bound_signals[] = {SIGTERM, SIGINT, SIGABRT, SIGSEGV};
#define NSIG_BOUND (sizeof bound_signals / sizeof *bound_signals)
#define SIGNAL_WAIT_NS 3000000000LL
static struct sigaction old_actions[NSIG_BOUND];
static int bound[NSIG_BOUND];

/* Flushes what it can without blocking: the committed records of every thread
 * whose lock is free.  The fallback when the flusher cannot serve (not running,
 * or stuck behind a lock the interrupted thread holds).  Async-signal context. */
static void emergency_flush(void)
{
    if (pthread_mutex_trylock(&dft_g.registry_lock) != 0)
        return;
    for (dft_tstate *ts = dft_g.threads; ts; ts = ts->next) {
        if (pthread_mutex_trylock(&ts->lock) != 0)
            continue;
        size_t pos = atomic_load_explicit(&ts->pos, memory_order_acquire);
        if (pos > ts->flushed && dft_writer_emergency(ts->cur->data, ts->flushed, pos) == 0)
            ts->flushed = pos;
        pthread_mutex_unlock(&ts->lock);
    }
    pthread_mutex_unlock(&dft_g.registry_lock);
}

static long long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void nap_1ms(void)
{
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

/* Has the flusher write everything and waits for it; if finalize runs on
 * another thread, waits for it instead.  Uses only atomics, sem_post,
 * clock_gettime and nanosleep.  Async-signal context. */
static void flush_from_signal(void)
{
    long long deadline = mono_ns() + SIGNAL_WAIT_NS;
    if (atomic_load(&dft_g.active) && atomic_load(&fl.alive)) {
        unsigned mine = atomic_fetch_add(&fl.req, 1) + 1;
        sem_post(&fl.wake);
        while ((int)(atomic_load(&fl.done) - mine) < 0 && atomic_load(&fl.alive) &&
               mono_ns() < deadline)
            nap_1ms();
        if ((int)(atomic_load(&fl.done) - mine) >= 0)
            return;
    }
    if (atomic_load(&finalizing)) {
        while (atomic_load(&finalizing) && mono_ns() < deadline)
            nap_1ms();
        return;
    }
    if (atomic_load(&dft_g.active)) {
        if (atomic_load(&fl.alive)) {
            static const char msg[] = "dftracer: the flush for a signal did not finish in 3 s; "
                                      "writing what can be written without waiting\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
        }
        emergency_flush(); /* no flusher, or it is stuck behind a lock */
    }
}

/* Signal handler: async-signal context, no GIL, no blocking locks. */
static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    int saved_errno = errno;
    if ((atomic_load(&dft_g.active) || atomic_load(&finalizing)) &&
        (pid_t)dft_g.real_pid == getpid())
        flush_from_signal();
    for (size_t i = 0; i < NSIG_BOUND; i++) {
        if (bound_signals[i] != sig)
            continue;
        struct sigaction *old = &old_actions[i];
        if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
            old->sa_sigaction(sig, info, uctx);
        } else if (old->sa_handler == SIG_IGN) {
            /* ignored before us: stay ignored */
        } else if (old->sa_handler == SIG_DFL) {
            /* Behave as without us: the default action, once this handler returns. */
            sigaction(sig, old, NULL);
            if (sig != SIGSEGV) /* a fault re-raises itself on return */
                raise(sig);
        } else {
            old->sa_handler(sig);
        }
    }
    errno = saved_errno;
}

/* SIGTERM always; with all (DFTRACER_BIND_SIGNALS), the others too.  Each
 * signal is bound once per process, chaining to the action it had then.
 * Under life_lock. */
static void install_signals(int all)
{
    static int prepared;
    if (!prepared) {
        if (dft_writer_emergency_prepare() != 0)
            dft_log(DFT_LOG_ERROR, "out of memory; signals flush only through the flusher");
        prepared = 1;
    }
    for (size_t i = 0; i < NSIG_BOUND; i++) {
        if (bound[i] || (!all && bound_signals[i] != SIGTERM))
            continue;
        struct sigaction cur;
        if (sigaction(bound_signals[i], NULL, &cur) != 0)
            continue;
        bound[i] = 1;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)
            continue; /* ignored by the program: leave it so */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(bound_signals[i], &sa, &old_actions[i]) != 0)
            dft_log(DFT_LOG_ERROR, "cannot bind signal %d: %s", bound_signals[i], strerror(errno));
    }
}
