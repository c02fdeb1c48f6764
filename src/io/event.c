/* io/event.c: the end of every traced I/O call, shared by the POSIX and
 * stdio wrappers (io/wrap.h): the event is recorded and the thread's
 * re-entry guard released. */
#include <errno.h>

#include "io/wrap.h"

__thread int dft_io_busy __attribute__((tls_model("initial-exec")));

/* Any thread, no GIL. */
void dft_io_finish(dft_io_ev *e, int failed, int err)
{
    dft_open_io_end(e->open_h);
    if (failed)
        dft_io_int(e, "errno", err);
    dft_event ev = {.name = e->name,
                    .name_len = e->name_len,
                    .cat = e->cat,
                    .cat_len = e->cat_len,
                    .ts = e->t0,
                    .dur = e->t1 - e->t0,
                    .ph = DFT_PH_COMPLETE,
                    .args = e->a,
                    .nargs = e->n};
    /* Inside the innermost scope: a traced call never takes the scope of an
     * enter_event() block (the block's own log_event does).  Only into the
     * file it began in, where its fhash is defined: a call that straddles a
     * finalize()/initialize_log() is dropped. */
    if (dft_trace_active())
        dft_emit_record_in(&ev, e->gen);
    dft_io_busy = 0;
    errno = err;
}
