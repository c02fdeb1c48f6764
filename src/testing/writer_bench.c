/* testing/writer_bench.c: the writer's format + compress loop, timed on its
 * own (see writer_bench.h).  Runs on the calling thread without the GIL. */
#include "testing/writer_bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/compress.h"
#include "format/lines.h"

#define PIECE ((size_t)1 << 20)  /* JSON bytes per gzip member, as in core/writer_state.h */
#define CHUNK_EVENTS 20000       /* records encoded once, formatted over and over */

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CHUNK_EVENTS records drawn from mix (xorshift64, a fixed seed): timestamps
 * a few microseconds apart, two int args or none. */
static char *encode_mix(const dft_op_mix *mix, size_t *len, int with_args)
{
    size_t cap = (size_t)CHUNK_EVENTS * 128, used = 0;
    char *data = malloc(cap);
    if (!data)
        return NULL;
    uint64_t seed = 88172645463325252ull;
    int64_t ts = 1795435547050367;
    for (int i = 0; i < CHUNK_EVENTS; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17; /* xorshift64 */
        size_t k = seed % mix->nnames;
        ts += (int64_t)((seed >> 8) % 31);
        dft_arg args[2] = {
            {.key = "device", .key_len = 6, .type = DFT_ARG_INT, .v.i = 0},
            {.key = "input_size", .key_len = 10, .type = DFT_ARG_INT,
             .v.i = mix->input_sizes[(seed >> 16) % mix->ninput_sizes]},
        };
        dft_event ev = {.name = mix->names[k], .name_len = mix->name_lens[k], .cat = "PP",
                        .cat_len = 2, .ts = ts,
                        .dur = mix->durations_us[(seed >> 24) % mix->ndurations],
                        .ph = DFT_PH_COMPLETE, .args = args, .nargs = with_args ? 2 : 0};
        size_t size = dft_record_size(&ev);
        if (used + size > cap) {
            char *p = realloc(data, cap * 2);
            if (!p) {
                free(data);
                return NULL;
            }
            data = p;
            cap *= 2;
        }
        dft_rec_place at = {.id = 8 + i, .level = 1, .p_idx = -1, .tid = 31234};
        dft_record_encode(data + used, &ev, size, &at);
        used += size;
    }
    *len = used;
    return data;
}

int dft_writer_bench(const dft_op_mix *mix, uint64_t n, int compress, int with_args,
                     dft_writer_bench_result *res)
{
    memset(res, 0, sizeof *res);
    size_t len = 0;
    char *data = encode_mix(mix, &len, with_args);
    dft_compressor *cz = compress ? dft_compressor_new() : NULL;
    dft_sbuf json = {0}, out = {0};
    int rc = -1;
    if (!data || (compress && !cz) || dft_sbuf_reserve(&out, dft_compress_bound(2 * PIECE)) != 0)
        goto done;
    dft_fmt_ctx ctx = {.pid = 31234, .hhash = 0x185b3c7d3c6c6298ull, .inc_metadata = 1};
    size_t pos = 0;
    while (res->events < n) {
        if (pos >= len)
            pos = 0;
        json.len = 0;
        double t0 = cpu_now();
        size_t lines = dft_format_records(&json, data, &pos, len, &ctx, PIECE);
        double t1 = cpu_now();
        if (json.failed)
            goto done;
        res->format_s += t1 - t0;
        res->events += lines;
        res->json_bytes += json.len;
        if (compress) {
            if (dft_sbuf_reserve(&out, dft_compress_bound(json.len)) != 0)
                goto done;
            size_t m = dft_compress_member_with(cz, json.data, json.len, out.data, out.cap,
                                                (dft_encoder)(compress - 1));
            res->compress_s += cpu_now() - t1;
            if (m == 0)
                goto done;
            res->gz_bytes += m;
        }
    }
    rc = 0;
done:
    free(data);
    dft_compressor_free(cz);
    dft_sbuf_free(&json);
    dft_sbuf_free(&out);
    return rc;
}
