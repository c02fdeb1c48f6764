/* core/writer_bench.h: the writer's own work (format + compress) timed alone,
 * on synthetic torch-like op events, for benchmarks/core/bench_writer.py. */
#ifndef DFT_CORE_WRITER_BENCH_H
#define DFT_CORE_WRITER_BENCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct dft_writer_bench_result {
    uint64_t events;
    uint64_t json_bytes;
    uint64_t gz_bytes;   /* 0 when compress is 0 */
    double format_s;     /* thread CPU seconds spent formatting */
    double compress_s;   /* thread CPU seconds spent deflating */
} dft_writer_bench_result;

/* Formats n events into JSON pieces of the writer's size and (with compress)
 * deflates each into one gzip member, as one writer thread does, without
 * writing anything.  with_args: each event carries two int args (the op mix
 * of the profiler's events) or none (the @Profile.log / log_event line).
 * 0, or -1 when out of memory.  Any thread, no GIL. */
int dft_writer_bench(uint64_t n, int compress, int with_args, dft_writer_bench_result *res);

#endif
