/* core/tracer.h: what the lifecycle (core/tracer.c) shares with the rest of
 * core/.  Its face for the integrations is core/core.h. */
#ifndef DFT_CORE_TRACER_H
#define DFT_CORE_TRACER_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* Records a metadata event ("ph":"M") named kind on lane (pid, tid) (0, 0:
 * the calling thread) with args name=key and value=value, or value=hash
 * written as 16 hex digits when value_is_hash.  Any thread, no GIL. */
int dft_emit_meta(const char *kind, int64_t pid, int64_t tid, const char *key, size_t key_len,
                  const char *value, size_t value_len, int value_is_hash, uint64_t hash);

/* Records the FH/SH (kind) event defining hash as s in the trace file of
 * generation gen; 0, or non-zero when not recorded (another file started).
 * Any thread, no GIL. */
int dft_emit_hash_def(uint64_t gen, const char *kind, const char *s, size_t len, uint64_t hash);

#endif
