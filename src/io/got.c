/* io/got.c: GOT rewriting over dl_iterate_phdr (see io/got.h).
 *
 * For each object we read PT_DYNAMIC for the PLT relocations (DT_JMPREL) and
 * the other RELA relocations (DT_RELA: GLOB_DAT slots of objects linked with
 * -fno-plt or taking a function's address), the symbol and string tables, and
 * PT_GNU_RELRO to know which slots sit on pages the loader made read-only.
 * Only undefined (imported) symbols are patched.  All state is under got_lock,
 * which the wrappers never take. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/config.h"
#include "format/grow.h"
#include "io/got.h"

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#else
#define DFT_GOT_UNSUPPORTED 1
#endif

#define MAX_HOOKS 256 /* the wrappers of io/ (about 130) plus dlopen and dlsym */

static pthread_mutex_t got_lock = PTHREAD_MUTEX_INITIALIZER;
static dft_io_hook hooks[MAX_HOOKS];
static size_t nhooks;
static _Atomic int installed;

/* Saved slots: open addressing on the slot address (0 = empty). */
typedef struct saved_slot {
    uintptr_t slot;
    uintptr_t original;
} saved_slot;
static saved_slot *saved;
static size_t saved_cap, saved_len;
static size_t npatched;

/* Objects already scanned (by their dynamic section), so that each dlopen
 * only reads the relocations of new objects. */
static uintptr_t *seen;
static size_t seen_len, seen_cap;
static unsigned long long seen_subs;

static void *(*real_dlopen)(const char *, int);
static void *(*real_dlsym)(void *, const char *);

/* ---- small tables -------------------------------------------------------- */

static int saved_put(uintptr_t slot, uintptr_t original)
{
    if ((saved_len + 1) * 2 > saved_cap) {
        size_t cap = saved_cap ? saved_cap * 2 : 256;
        saved_slot *s = calloc(cap, sizeof *s);
        if (!s)
            return -1;
        for (size_t i = 0; i < saved_cap; i++) {
            if (!saved[i].slot)
                continue;
            size_t j = (saved[i].slot >> 3) & (cap - 1);
            while (s[j].slot)
                j = (j + 1) & (cap - 1);
            s[j] = saved[i];
        }
        free(saved);
        saved = s;
        saved_cap = cap;
    }
    size_t j = (slot >> 3) & (saved_cap - 1);
    while (saved[j].slot && saved[j].slot != slot)
        j = (j + 1) & (saved_cap - 1);
    if (!saved[j].slot)
        saved_len++;
    saved[j].slot = slot;
    saved[j].original = original;
    return 0;
}

static const saved_slot *saved_get(uintptr_t slot)
{
    if (!saved_cap)
        return NULL;
    size_t j = (slot >> 3) & (saved_cap - 1);
    while (saved[j].slot) {
        if (saved[j].slot == slot)
            return &saved[j];
        j = (j + 1) & (saved_cap - 1);
    }
    return NULL;
}

static int seen_add(uintptr_t key)
{
    for (size_t i = 0; i < seen_len; i++)
        if (seen[i] == key)
            return 0;
    if (DFT_GROW(seen, seen_len, seen_cap, 64) != 0)
        return 1; /* scan again next time: harmless */
    seen[seen_len++] = key;
    return 1;
}

static const dft_io_hook *hook_find(const char *name)
{
    for (size_t i = 0; i < nhooks; i++)
        if (hooks[i].name[0] == name[0] && strcmp(hooks[i].name, name) == 0)
            return &hooks[i];
    return NULL;
}

/* ---- walking objects ----------------------------------------------------- */

enum scan_mode { SCAN_PATCH, SCAN_RESTORE, SCAN_QUERY };

typedef struct scan_ctx {
    enum scan_mode mode;
    const char *self_name; /* our own _core, never patched */
    const char *query;     /* SCAN_QUERY: the symbol */
    dft_got_slot_cb cb;
    void *cb_ctx;
    int count;
    int failed;
} scan_ctx;

static int skipped_object(const char *name, const char *self_name)
{
    if (self_name && name && strcmp(name, self_name) == 0)
        return 1;
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    if (!base)
        return 0;
    static const char *const skip[] = {"ld-linux", "ld64.so", "libc.so", "libpthread.so",
                                       "libdl.so", "linux-vdso", "linux-gate"};
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
        if (strncmp(base, skip[i], strlen(skip[i])) == 0)
            return 1;
    return 0;
}

static uintptr_t dyn_ptr(uintptr_t base, ElfW(Addr) p)
{
    /* glibc relocates d_ptr in place; other loaders (and the vDSO) do not. */
    return (uintptr_t)p >= base ? (uintptr_t)p : base + (uintptr_t)p;
}

static int write_slot(uintptr_t slot, uintptr_t value, int relro)
{
    static size_t page;
    if (!page) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (size_t)ps : 4096;
    }
    void *pg = (void *)(slot & ~(uintptr_t)(page - 1));
    if (relro && mprotect(pg, page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n((uintptr_t *)slot, value, __ATOMIC_RELEASE);
    if (relro && mprotect(pg, page, PROT_READ) != 0)
        dft_log(DFT_LOG_WARN, "dftracer: cannot re-protect a GOT page: %s", strerror(errno));
    return 0;
}

static void visit_slot(scan_ctx *c, const char *object, const char *name, uintptr_t slot,
                       int relro)
{
    uintptr_t cur = __atomic_load_n((uintptr_t *)slot, __ATOMIC_ACQUIRE);
    if (c->mode == SCAN_QUERY) {
        if (strcmp(name, c->query) == 0) {
            c->count++;
            c->cb(object, slot, cur, c->cb_ctx);
        }
        return;
    }
    const dft_io_hook *h = hook_find(name);
    if (!h || !*h->real)
        return;
    if (c->mode == SCAN_PATCH) {
        if (cur == (uintptr_t)h->wrapper)
            return;
        if (saved_put(slot, cur) != 0) {
            c->failed = 1;
            return;
        }
        if (write_slot(slot, (uintptr_t)h->wrapper, relro) == 0) {
            npatched++;
            c->count++;
        }
    } else if (cur == (uintptr_t)h->wrapper) {
        const saved_slot *s = saved_get(slot);
        if (write_slot(slot, s ? s->original : (uintptr_t)*h->real, relro) == 0) {
            npatched--;
            c->count++;
        }
    }
}

static void scan_relocs(scan_ctx *c, const char *object, uintptr_t base, const ElfW(Rela) * rel,
                        size_t n, const ElfW(Sym) * symtab, const char *strtab, size_t strsz,
                        uintptr_t relro_lo, uintptr_t relro_hi)
{
    for (size_t i = 0; i < n; i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info);
        if (type != R_JUMP_SLOT && type != R_GLOB_DAT)
            continue;
        const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(rel[i].r_info)];
        if (sym->st_shndx != SHN_UNDEF || sym->st_name >= strsz)
            continue; /* defined here: the object's own function */
        if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC && ELF64_ST_TYPE(sym->st_info) != STT_NOTYPE)
            continue;
        uintptr_t slot = base + rel[i].r_offset;
        visit_slot(c, object, strtab + sym->st_name, slot, slot >= relro_lo && slot < relro_hi);
    }
}

static int scan_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    scan_ctx *c = data;
    const char *object = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "<main>";
    if (skipped_object(info->dlpi_name, c->self_name))
        return 0;
    uintptr_t base = (uintptr_t)info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t relro_lo = 0, relro_hi = 0;
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            /* The loader protects whole pages: [down(start), down(end)). */
            relro_lo = (base + ph->p_vaddr) & ~(page - 1);
            relro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        }
    }
    if (!dyn)
        return 0;
    if (c->mode == SCAN_PATCH && !seen_add((uintptr_t)dyn))
        return 0;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_sz = 0, rela_sz = 0, rela_count = 0, strsz = 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprel_sz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_RELASZ: rela_sz = d->d_un.d_val; break;
        case DT_RELACOUNT: rela_count = d->d_un.d_val; break;
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab)
        return 0;
    if (jmprel && pltrel == DT_RELA)
        scan_relocs(c, object, base, jmprel, jmprel_sz / sizeof *jmprel, symtab, strtab, strsz,
                    relro_lo, relro_hi);
    if (rela) {
        size_t n = rela_sz / sizeof *rela;
        size_t skip = rela_count < n ? rela_count : n; /* leading RELATIVE relocations */
        scan_relocs(c, object, base, rela + skip, n - skip, symtab, strtab, strsz, relro_lo,
                    relro_hi);
    }
    return 0;
}

static const char *self_name(void)
{
    static char name[PATH_MAX];
    if (!name[0]) {
        Dl_info info;
        if (dladdr((void *)&dft_got_install, &info) && info.dli_fname) {
            size_t n = strlen(info.dli_fname);
            if (n < sizeof name)
                memcpy(name, info.dli_fname, n + 1);
        }
    }
    return name[0] ? name : NULL;
}

/* dl_iterate_phdr's counters tell us when objects were unloaded: their
 * dynamic sections may be reused by new objects, so scan everything again. */
static int count_subs(struct dl_phdr_info *info, size_t size, void *data)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
        *(unsigned long long *)data = info->dlpi_subs;
    return 1;
}

/* Under got_lock. */
static int patch_all(void)
{
    unsigned long long subs = 0;
    dl_iterate_phdr(count_subs, &subs);
    if (subs != seen_subs) {
        seen_len = 0;
        seen_subs = subs;
    }
    scan_ctx c = {.mode = SCAN_PATCH, .self_name = self_name()};
    dl_iterate_phdr(scan_object, &c);
    return c.failed ? -1 : c.count;
}

/* ---- dlopen: follow objects loaded later ---------------------------------- */

/* glibc searches the RUNPATH of the object that called dlopen.  Called from
 * here, that would be _core's; so a bare name is looked up in the caller's
 * RUNPATH/RPATH first (unless already loaded), as the loader would. */
static void *dlopen_as(const void *caller, const char *file, int flags)
{
    if (!file || strchr(file, '/'))
        return real_dlopen(file, flags);
    void *h = real_dlopen(file, (flags & ~(RTLD_NOW | RTLD_LAZY)) | RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
        dlclose(h);
        return real_dlopen(file, flags);
    }
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) || !map || !map->l_ld)
        return real_dlopen(file, flags);
    const char *strtab = NULL, *runpath = NULL, *rpath = NULL;
    uintptr_t rp = 0, rr = 0;
    int has_rp = 0, has_rr = 0;
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)dyn_ptr(map->l_addr, d->d_un.d_ptr);
        else if (d->d_tag == DT_RUNPATH)
            rp = d->d_un.d_val, has_rp = 1;
        else if (d->d_tag == DT_RPATH)
            rr = d->d_un.d_val, has_rr = 1;
    }
    if (!strtab || (!has_rp && !has_rr))
        return real_dlopen(file, flags);
    runpath = has_rp ? strtab + rp : NULL;
    rpath = has_rr ? strtab + rr : NULL;
    const char *list = runpath ? runpath : rpath;
    char origin[PATH_MAX];
    const char *obj = map->l_name && *map->l_name ? map->l_name : "/proc/self/exe";
    char *real = realpath(obj, NULL);
    const char *src = real ? real : obj;
    size_t on = strlen(src);
    if (on >= sizeof origin)
        on = sizeof origin - 1;
    memcpy(origin, src, on);
    origin[on] = '\0';
    free(real);
    char *slash = strrchr(origin, '/');
    if (slash)
        *slash = '\0';
    char path[PATH_MAX];
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        size_t o = 0;
        for (size_t i = 0; i < len && o < sizeof path - 1;) {
            if (strncmp(p + i, "$ORIGIN", 7) == 0 || strncmp(p + i, "${ORIGIN}", 9) == 0) {
                size_t skip = p[i + 1] == '{' ? 9 : 7;
                size_t ol = strlen(origin);
                if (o + ol >= sizeof path - 1)
                    break;
                memcpy(path + o, origin, ol);
                o += ol;
                i += skip;
            } else {
                path[o++] = p[i++];
            }
        }
        size_t fl = strlen(file);
        if (o > 0 && o + 1 + fl < sizeof path) {
            path[o++] = '/';
            memcpy(path + o, file, fl + 1);
            if (access(path, F_OK) == 0)
                return real_dlopen(path, flags);
        }
        p += len;
        if (*p == ':')
            p++;
    }
    return real_dlopen(file, flags);
}

/* The dlopen wrapper.  Not async-signal-safe (neither is dlopen). */
static void *got_dlopen(const char *file, int flags)
{
    void *h = dlopen_as(__builtin_return_address(0), file, flags);
    if (h && atomic_load_explicit(&installed, memory_order_acquire)) {
        int e = errno;
        pthread_mutex_lock(&got_lock);
        if (atomic_load(&installed) && patch_all() < 0)
            dft_log(DFT_LOG_ERROR, "dftracer: out of memory patching %s; its I/O is not traced",
                    file ? file : "<main>");
        pthread_mutex_unlock(&got_lock);
        errno = e;
    }
    return h;
}

/* The dlsym wrapper: code that looks a hooked function up at run time
 * (ctypes, libffi users, plugin loaders) gets the wrapper, as a GOT would.
 * Only when the lookup finds the very definition we forward to. */
static void *got_dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT) /* relative to the caller: cannot be emulated here */
        return real_dlsym(handle, name);
    void *f = real_dlsym(handle, name);
    if (f && name && atomic_load_explicit(&installed, memory_order_acquire)) {
        int e = errno;
        pthread_mutex_lock(&got_lock);
        const dft_io_hook *h = atomic_load(&installed) ? hook_find(name) : NULL;
        if (h && h->real && *h->real == f && h->wrapper != (void *)got_dlopen &&
            h->wrapper != (void *)got_dlsym)
            f = h->wrapper;
        pthread_mutex_unlock(&got_lock);
        errno = e;
    }
    return f;
}

/* ---- public ---------------------------------------------------------------- */

int dft_got_install(const dft_io_hook *list, size_t n)
{
#ifdef DFT_GOT_UNSUPPORTED
    (void)list;
    (void)n;
    dft_log(DFT_LOG_WARN, "dftracer: I/O tracing is not supported on this architecture");
    return 0;
#else
    pthread_mutex_lock(&got_lock);
    if (atomic_load(&installed)) {
        pthread_mutex_unlock(&got_lock);
        return 0;
    }
    nhooks = 0;
    for (size_t i = 0; i < n && nhooks < MAX_HOOKS - 2; i++) {
        *list[i].real = dlsym(RTLD_DEFAULT, list[i].name);
        if (*list[i].real)
            hooks[nhooks++] = list[i];
    }
    real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_DEFAULT, "dlopen");
    if (real_dlopen)
        hooks[nhooks++] = (dft_io_hook){"dlopen", (void *)got_dlopen, (void **)&real_dlopen};
    real_dlsym = (void *(*)(void *, const char *))dlsym(RTLD_DEFAULT, "dlsym");
    if (real_dlsym && nhooks < MAX_HOOKS)
        hooks[nhooks++] = (dft_io_hook){"dlsym", (void *)got_dlsym, (void **)&real_dlsym};
    seen_len = 0;
    seen_subs = 0;
    int rc = patch_all();
    atomic_store_explicit(&installed, 1, memory_order_release);
    pthread_mutex_unlock(&got_lock);
    return rc;
#endif
}

void dft_got_uninstall(void)
{
    pthread_mutex_lock(&got_lock);
    if (atomic_load(&installed)) {
        atomic_store(&installed, 0);
        scan_ctx c = {.mode = SCAN_RESTORE, .self_name = self_name()};
        dl_iterate_phdr(scan_object, &c);
        free(saved);
        saved = NULL;
        saved_cap = saved_len = 0;
        seen_len = 0;
        npatched = 0;
        nhooks = 0;
    }
    pthread_mutex_unlock(&got_lock);
}

int dft_got_installed(void) { return atomic_load(&installed); }

size_t dft_got_patched(void)
{
    pthread_mutex_lock(&got_lock);
    size_t n = npatched;
    pthread_mutex_unlock(&got_lock);
    return n;
}

int dft_got_slots(const char *name, dft_got_slot_cb cb, void *ctx)
{
    scan_ctx c = {.mode = SCAN_QUERY, .self_name = self_name(), .query = name, .cb = cb,
                  .cb_ctx = ctx};
    pthread_mutex_lock(&got_lock);
    dl_iterate_phdr(scan_object, &c);
    pthread_mutex_unlock(&got_lock);
    return c.count;
}

/* A thread holding got_lock at fork() does not exist in the child. */
static void got_atfork_child(void) { pthread_mutex_init(&got_lock, NULL); }

void dft_got_atfork(void)
{
    static int done;
    if (!done && pthread_atfork(NULL, NULL, got_atfork_child) == 0)
        done = 1;
}
