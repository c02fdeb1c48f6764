/* testing/writer_bench.h: the writer's own work (format + compress) timed
 * alone, on synthetic torch-like op events, for benchmarks/core/bench_writer.py
 * (the test extension's _bench_writer). */
#ifndef DFT_TESTING_WRITER_BENCH_H
#define DFT_TESTING_WRITER_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* The op mix the events are drawn from (benchmarks/core/op_mix.py defines
 * it): op names, durations in microseconds and input sizes.  None empty. */
typedef struct dft_op_mix {
    const char *const *names;
    const size_t *name_lens;
    size_t nnames;
    const int64_t *durations_us;
    size_t ndurations;
    const int64_t *input_sizes;
    size_t ninput_sizes;
} dft_op_mix;

typedef struct dft_writer_bench_result {
    uint64_t events;
    uint64_t json_bytes;
    uint64_t gz_bytes;   /* 0 when compress is 0 */
    double format_s;     /* thread CPU seconds spent formatting */
    double compress_s;   /* thread CPU seconds spent deflating */
} dft_writer_bench_result;

/* Formats n events drawn from mix into JSON pieces of the writer's size and
 * (with compress) deflates each into one gzip member with the encoder
 * compress names (a dft_encoder of core/compress.h, plus 1: 0 is no
 * compression), as one writer thread does, without writing anything.  with_args: each event carries two int args
 * (device, input_size: the profiler's) or none (the @Profile.log / log_event
 * line).  0, or -1 when out of memory.  Any thread, no GIL. */
int dft_writer_bench(const dft_op_mix *mix, uint64_t n, int compress, int with_args,
                     dft_writer_bench_result *res);

#endif
