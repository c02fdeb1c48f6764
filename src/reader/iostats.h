/* reader/iostats.h: the per-file pass behind `dftracer summary --io` and the
 * report's I/O section (reader/iostats.c; its Python face is
 * reader/iostats_py.c). */
#ifndef DFT_READER_IOSTATS_H
#define DFT_READER_IOSTATS_H

#include "reader/iostats_result.h"

/* Reads the trace at path.  epoch_from (NULL: none) names the events that
 * start epochs (`name` or `cat/name`); bounds (n pairs of epoch, start ts,
 * sorted by ts; NULL: none) splits the reads by epoch.  Returns 0, or -1
 * with errno when the file cannot be opened; out-of-memory is status -1.
 * No GIL, no Python. */
int dft_io_read(const char *path, const char *epoch_from, const int64_t *bounds, size_t nbounds,
                dft_io_result *out);
void dft_io_free(dft_io_result *r);

extern const char *const dft_io_counter_names[IO_NCOUNTERS];

#endif
