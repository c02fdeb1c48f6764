/* core/core.h: what the integrations (and module.c) use of the core.
 *
 * Data flow: a traced thread appends compact binary records (format/record.h)
 * to its own buffer (core/buffer.c) without locking.  A full buffer is handed
 * to the writer queue (core/writer.c); writer threads turn records into JSON
 * lines (format/lines.c), deflate them into complete gzip members and append
 * each member with one write().  core/tracer.c starts and stops all of it. */
#ifndef DFT_CORE_H
#define DFT_CORE_H

#include "dftracer.h"
#include "core/buffer.h"
#include "core/config.h"
#include "core/state.h"
#include "core/tracer.h"
#include "core/writer.h"

#endif
