/* io/got.h: redirecting calls between ELF objects by rewriting their GOT.
 *
 * Every loaded object (except dftracer's own _core, the dynamic loader and
 * libc) whose relocation tables import one of the hooked symbols gets the
 * address of the wrapper in that GOT slot; the slot's previous value is kept
 * and written back by dft_got_uninstall().  Objects loaded later through
 * dlopen() are patched when dlopen returns.  No LD_PRELOAD is involved. */
#ifndef DFT_IO_GOT_H
#define DFT_IO_GOT_H

#include <stddef.h>
#include <stdint.h>

typedef struct dft_io_hook {
    const char *name; /* the imported symbol, e.g. "pread64" */
    void *wrapper;
    void **real; /* set at install: the definition calls are forwarded to */
} dft_io_hook;

/* Patches every loaded object for hooks[0..n) (and dlopen, to follow new
 * objects).  Returns the number of slots patched, or -1 on ENOMEM.
 * Takes the loader lock; never from a signal handler. */
int dft_got_install(const dft_io_hook *hooks, size_t n);
/* Writes every saved value back and forgets the hooks. */
void dft_got_uninstall(void);
int dft_got_installed(void);
size_t dft_got_patched(void); /* slots currently redirected */

/* Test helper: calls cb for each GOT slot importing name in every object
 * dft_got would patch; returns the number of slots or -1 (name unknown). */
typedef void (*dft_got_slot_cb)(const char *object, uintptr_t slot, uintptr_t value, void *ctx);
int dft_got_slots(const char *name, dft_got_slot_cb cb, void *ctx);

/* Called once in the process (module init): fork safety of the patch lock. */
void dft_got_atfork(void);

#endif
