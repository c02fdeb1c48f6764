/* core/config.c: parsing DFTRACER_* environment variables (see docs/configuration.md).
 * dft_config_load runs when tracing starts, under the lifecycle lock; the
 * single readers (dft_config_flag, dft_config_env_enabled, ...) and the log
 * run on any thread, without the GIL. */
#include "core/config.h"

#include <stdint.h>

#include "dftracer.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Set when tracing starts (dft_config_load), read by every dft_log. */
static _Atomic int log_level = DFT_LOG_ERROR;

/* One line on stderr, whatever the level.  Any thread, no GIL. */
static void log_line(int level, const char *fmt, va_list ap)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    char line[1024];
    int n = snprintf(line, sizeof line, "dftracer: %s: ", names[level]);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* One write() so lines from several processes do not interleave. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void dft_log(int level, const char *fmt, ...)
{
    if (level < atomic_load_explicit(&log_level, memory_order_relaxed))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_line(level, fmt, ap);
    va_end(ap);
}

void dft_warn_config(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_line(DFT_LOG_WARN, fmt, ap);
    va_end(ap);
}

static void warn_always(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn_always(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_line(DFT_LOG_WARN, fmt, ap);
    va_end(ap);
}

/* Warnings about the environment are always printed, whatever the log level,
 * once per variable and value per process (the table's lock: the variables
 * are read from any thread, dft_config_flag).  Any thread, no GIL. */
static void warn_env(const char *var, const char *value, const char *why, const char *used)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t warned[32];
    static int nwarned;
    char key[512];
    snprintf(key, sizeof key, "%s=%s", var, value);
    uint64_t h = dft_hash64(key, strlen(key));
    pthread_mutex_lock(&lock);
    int seen = 0;
    for (int i = 0; i < nwarned && !seen; i++)
        seen = warned[i] == h;
    if (!seen && nwarned < 32)
        warned[nwarned++] = h;
    pthread_mutex_unlock(&lock);
    if (!seen)
        warn_always("%s='%s' %s; using %s", var, value, why, used);
}

/* The one boolean rule (docs/configuration.md): 1/true/yes/on/y or
 * 0/false/no/off/n, any case; unset or empty is dflt; anything else is dflt
 * with one warning line.  dftracer/_envflag.py is its Python twin. */
static int parse_bool(const char *var, int dflt)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return dflt;
    static const char *yes[] = {"1", "true", "yes", "on", "y"};
    static const char *no[] = {"0", "false", "no", "off", "n"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!strcasecmp(v, yes[i]))
            return 1;
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (!strcasecmp(v, no[i]))
            return 0;
    warn_env(var, v, "is not a boolean (1/true/yes/on or 0/false/no/off)", dflt ? "1" : "0");
    return dflt;
}

/* A byte count with an optional K/M/G suffix (powers of 1024). */
static size_t parse_size(const char *var, size_t dflt, size_t lo, size_t hi)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return dflt;
    char used[32];
    errno = 0;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned long long mult = 1;
    if (end != v && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mult = 1ULL << 10; break;
        case 'M': mult = 1ULL << 20; break;
        case 'G': mult = 1ULL << 30; break;
        default: mult = 0;
        }
        end++;
        if (*end && (toupper((unsigned char)*end) == 'B' || toupper((unsigned char)*end) == 'I'))
            end++;
        if (*end && toupper((unsigned char)*end) == 'B')
            end++;
    }
    if (end == v || *end || errno || mult == 0 || v[0] == '-') {
        snprintf(used, sizeof used, "%zu", dflt);
        warn_env(var, v, "is not a size in bytes", used);
        return dflt;
    }
    unsigned long long bytes = n * mult;
    if (bytes < lo || bytes > hi || (mult > 1 && n > hi / mult)) {
        size_t c = bytes < lo ? lo : hi;
        snprintf(used, sizeof used, "%zu", c);
        warn_env(var, v, "is out of range", used);
        return c;
    }
    return (size_t)bytes;
}

static int parse_int(const char *var, int dflt, int lo, int hi)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    char used[16];
    if (end == v || *end || errno || n < lo || n > hi) {
        snprintf(used, sizeof used, "%d", dflt);
        warn_env(var, v, "is not a usable number", used);
        return dflt;
    }
    return (int)n;
}

/* The length of the decimal number at the start of v (digits, an optional
 * fraction: "5", "0.5", ".5"), or 0.  strtod alone would also take hex
 * ("0x10" is 16), "inf", "nan", exponents and leading blanks. */
static size_t decimal_len(const char *v)
{
    size_t i = 0, digits = 0;
    while (isdigit((unsigned char)v[i]))
        i++, digits++;
    if (v[i] == '.')
        for (i++; isdigit((unsigned char)v[i]); i++)
            digits++;
    return digits ? i : 0;
}

/* Seconds, a decimal number with an optional "s" or "ms" suffix; 0 (or off)
 * turns the time-based flush off.  The one reading of the grammar: v's
 * seconds, or the value used instead with *why saying what was wrong. */
double dft_config_interval(const char *v, double dflt, double lo, double hi, const char **why)
{
    *why = NULL;
    if (!v || !*v)
        return dflt;
    if (!strcasecmp(v, "off"))
        return 0;
    char *end;
    errno = 0;
    size_t n = decimal_len(v);
    double x = n ? strtod(v, &end) : 0;
    if (!n || end != v + n)
        end = (char *)v; /* not a decimal number: rejected below */
    double scale = 1;
    if (end != v && !strcasecmp(end, "ms")) {
        scale = 1e-3;
        end += 2;
    } else if (end != v && !strcasecmp(end, "s")) {
        end += 1;
    }
    if (end == v || *end || errno || !(x >= 0) || x * scale > 1e9) {
        *why = "is not a decimal number of seconds (e.g. 1, 0.5, 200ms, 0 for off)";
        return dflt;
    }
    x *= scale;
    if (x != 0 && (x < lo || x > hi)) {
        *why = "is out of range";
        return x < lo ? lo : hi;
    }
    return x;
}

static double parse_interval(const char *var, double dflt, double lo, double hi)
{
    const char *v = getenv(var), *why;
    double x = dft_config_interval(v, dflt, lo, hi, &why);
    if (why) {
        char used[32];
        snprintf(used, sizeof used, "%g", x);
        warn_env(var, v, why, used);
    }
    return x;
}

static int parse_level(void)
{
    const char *v = getenv("DFTRACER_LOG_LEVEL");
    if (!v || !*v)
        return DFT_LOG_ERROR;
    if (!strcasecmp(v, "DEBUG"))
        return DFT_LOG_DEBUG;
    if (!strcasecmp(v, "INFO"))
        return DFT_LOG_INFO;
    if (!strcasecmp(v, "WARN") || !strcasecmp(v, "WARNING"))
        return DFT_LOG_WARN;
    if (!strcasecmp(v, "ERROR"))
        return DFT_LOG_ERROR;
    warn_env("DFTRACER_LOG_LEVEL", v, "is not one of DEBUG, INFO, WARN, ERROR", "ERROR");
    return DFT_LOG_ERROR;
}

static int parse_init(void)
{
    const char *v = getenv("DFTRACER_INIT");
    if (!v || !*v || !strcasecmp(v, "FUNCTION"))
        return DFT_INIT_FUNCTION;
    if (!strcasecmp(v, "PRELOAD"))
        return DFT_INIT_PRELOAD;
    warn_env("DFTRACER_INIT", v, "is not FUNCTION or PRELOAD", "FUNCTION");
    return DFT_INIT_FUNCTION;
}

int dft_config_env_enabled(void) { return parse_bool("DFTRACER_ENABLE", 0); }

int dft_config_init_mode(void) { return parse_init(); }

int dft_config_flag(const char *var, int dflt) { return parse_bool(var, dflt); }

int dft_config_clock_tsc(void)
{
    const char *v = getenv("DFTRACER_CLOCK");
    if (!v || !*v || !strcasecmp(v, "auto") || !strcasecmp(v, "tsc"))
        return 1;
    if (!strcasecmp(v, "monotonic"))
        return 0;
    warn_env("DFTRACER_CLOCK", v, "is not auto, tsc or monotonic", "auto");
    return 1;
}

static char *env_dup(const char *var)
{
    const char *v = getenv(var);
    return (v && *v) ? strdup(v) : NULL;
}

/* The suffixes a stem loses: a log file named like a trace file (the tail
 * core/trace_name.c puts on a stem). */
char *dft_config_stem(const char *log_file)
{
    size_t n = strlen(log_file);
    if (n >= 7 && !strcmp(log_file + n - 7, ".pfw.gz"))
        n -= 7;
    else if (n >= 4 && !strcmp(log_file + n - 4, ".pfw"))
        n -= 4;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, log_file, n);
    s[n] = '\0';
    return s;
}

void dft_config_load(dft_config *c)
{
    memset(c, 0, sizeof *c);
    c->log_level = parse_level();
    atomic_store(&log_level, c->log_level);
    c->enable = parse_bool("DFTRACER_ENABLE", 0);
    const char *lf = getenv("DFTRACER_LOG_FILE");
    c->log_file = dft_config_stem(lf && *lf ? lf : "./trace");
    c->data_dir = env_dup("DFTRACER_DATA_DIR");
    c->inc_metadata = parse_bool("DFTRACER_INC_METADATA", 1);
    c->compression = parse_bool("DFTRACER_TRACE_COMPRESSION", 1);
    c->write_buffer = parse_size("DFTRACER_WRITE_BUFFER_SIZE", DFT_DEFAULT_WRITE_BUFFER, 1,
                                 (size_t)1 << 30);
    c->bind_signals = parse_bool("DFTRACER_BIND_SIGNALS", 0);
    c->init_mode = parse_init();
    c->disable_io = parse_bool("DFTRACER_DISABLE_IO", 0);
    c->disable_posix = parse_bool("DFTRACER_DISABLE_POSIX", 0);
    c->disable_stdio = parse_bool("DFTRACER_DISABLE_STDIO", 0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int dflt_writers = ncpu >= 2 ? 2 : 1;
    c->writer_threads = parse_int("DFTRACER_WRITER_THREADS", dflt_writers, 1, 16);
    c->sample_hz = parse_int("DFTRACER_SAMPLE_HZ", 100, 0, 1000);
    c->flush_interval = parse_interval("DFTRACER_FLUSH_INTERVAL", DFT_DEFAULT_FLUSH_INTERVAL,
                                       DFT_MIN_FLUSH_INTERVAL, DFT_MAX_FLUSH_INTERVAL);
    c->enable_cupti = parse_bool("DFTRACER_ENABLE_CUPTI", 0);
}

void dft_config_free(dft_config *c)
{
    free(c->log_file);
    free(c->data_dir);
    c->log_file = c->data_dir = NULL;
}
