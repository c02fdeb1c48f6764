/* core/config.h: tracer settings, read from the environment when tracing starts. */
#ifndef DFT_CONFIG_H
#define DFT_CONFIG_H

#include <stddef.h>

enum { DFT_LOG_DEBUG = 0, DFT_LOG_INFO, DFT_LOG_WARN, DFT_LOG_ERROR };
enum { DFT_INIT_FUNCTION = 0, DFT_INIT_PRELOAD = 1 };

typedef struct dft_config {
    int enable;            /* DFTRACER_ENABLE */
    char *log_file;        /* DFTRACER_LOG_FILE: the stem, without .pfw/.pfw.gz */
    char *data_dir;        /* DFTRACER_DATA_DIR, ":"-separated, or "all" */
    int inc_metadata;      /* DFTRACER_INC_METADATA, default 1 */
    int compression;       /* DFTRACER_TRACE_COMPRESSION, default 1 */
    size_t write_buffer;   /* DFTRACER_WRITE_BUFFER_SIZE: bytes buffered per thread */
    int log_level;         /* DFTRACER_LOG_LEVEL, default ERROR */
    int bind_signals;      /* DFTRACER_BIND_SIGNALS */
    int init_mode;         /* DFTRACER_INIT: FUNCTION or PRELOAD */
    int disable_io;        /* DFTRACER_DISABLE_IO */
    int disable_posix;     /* DFTRACER_DISABLE_POSIX */
    int disable_stdio;     /* DFTRACER_DISABLE_STDIO */
    int writer_threads;    /* DFTRACER_WRITER_THREADS, default min(2, CPUs) */
    double flush_interval; /* DFTRACER_FLUSH_INTERVAL: seconds an event may wait in a
                              buffer; 0 turns the time-based flush off; default 1 */
    int enable_cupti;      /* DFTRACER_ENABLE_CUPTI, default 0 (read by gpu/) */
    int sample_hz;         /* DFTRACER_SAMPLE_HZ: the step thread's stack samples a
                              second (hang/sampler.c), default 100; 0: none */
} dft_config;

#define DFT_DEFAULT_WRITE_BUFFER ((size_t)1 << 20)
#define DFT_DEFAULT_FLUSH_INTERVAL 1.0
#define DFT_MIN_FLUSH_INTERVAL 0.01
#define DFT_MAX_FLUSH_INTERVAL 3600.0

/* Fills c from the environment.  An unusable value prints one warning line on
 * stderr naming the variable and the value used instead. */
void dft_config_load(dft_config *c);
void dft_config_free(dft_config *c);

/* DFTRACER_ENABLE as it is in the environment now. */
int dft_config_env_enabled(void);

/* DFTRACER_INIT as it is in the environment now: DFT_INIT_FUNCTION or
 * DFT_INIT_PRELOAD (an unusable value: FUNCTION, with one warning line). */
int dft_config_init_mode(void);

/* The boolean variable var as it is in the environment now, by the one rule
 * every DFTRACER_* boolean follows (1/true/yes/on/y, 0/false/no/off/n, any
 * case; unset or empty: dflt; anything else: dflt, with one warning line
 * naming the variable and the value used).  Any thread, no GIL. */
int dft_config_flag(const char *var, int dflt);

/* DFTRACER_FLUSH_INTERVAL's grammar (docs/configuration.md) applied to v:
 * its seconds (0: off; NULL or empty: dflt), else the value used instead
 * (dflt, or lo/hi for a value out of range) with *why the reason (NULL when
 * v is usable).  Pure: any thread, no GIL (dftracer top reads a job's
 * variable by it: _core._parse_interval). */
double dft_config_interval(const char *v, double dflt, double lo, double hi, const char **why);

/* DFTRACER_CLOCK: 1 for auto/tsc (the default: the TSC when the kernel keeps
 * time with it), 0 for monotonic.  Read once, at import. */
int dft_config_clock_tsc(void);

/* Strips a trailing ".pfw.gz" or ".pfw"; returns a malloc'd copy or NULL. */
char *dft_config_stem(const char *log_file);

/* Diagnostics on stderr at or above the configured level. */
void dft_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A warning about the configuration: printed whatever DFTRACER_LOG_LEVEL says. */
void dft_warn_config(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
