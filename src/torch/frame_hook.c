/* torch/frame_hook.c: a PEP 523 frame-evaluation hook that times the calls of the
 * functions @dynamo.compile returns.
 *
 * dynamo.py gives each decorated function an entry function with a code
 * object of its own and registers that code object here.  While at least one
 * is registered, the hook is installed interpreter-wide; it looks every frame's
 * code object up in a small pointer set, passes unregistered frames straight
 * on, and around a registered one opens a scope (so the graph events nest
 * under it) and writes one `dynamo` span saying whether the call compiled,
 * recompiled or ran cached code, how many graphs ran and how long compiling
 * took (from the per-thread counters in torch/dynamo_timing.c).
 *
 * Chaining: the hook calls whatever hook was installed before it (or the
 * default evaluator).  torch's Dynamo installs its shim on top of ours for the
 * duration of each compiled call, saving ours and restoring it afterwards.
 * If torch's shim was already installed when ours went in, torch may later
 * put back its own saved hook and drop ours; _frame_hook_ensure(), called by
 * every entry function before the timed frame, reinstalls ours when the
 * interpreter is back on the default evaluator (never on top of another
 * hook, which could have saved ours and would then loop).
 *
 * All functions here run with the GIL held: the hook runs on the thread that
 * evaluates the frame. */
#include "core/core.h"
#include "format/grow.h"
#include "torch/parts.h"
#include "torch/dynamo_state.h"

#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03090000
#error "the frame hook needs Python 3.9 or newer"
#endif

/* The newest CPython (major << 8 | minor) whose frame-evaluation internals
 * this file was built and tested against.  On a newer one the hook is
 * compiled out: the module still builds and imports, _core.FRAME_HOOK is
 * False and dynamo.py says so once (a build may lower the limit to test
 * that path: -DDFT_FRAME_HOOK_MAX_PY=0x030A). */
#ifndef DFT_FRAME_HOOK_MAX_PY
#define DFT_FRAME_HOOK_MAX_PY 0x030D
#endif
#define DFT_FRAME_HOOK_ON ((PY_VERSION_HEX >> 16) <= DFT_FRAME_HOOK_MAX_PY)

static int add_flags(PyObject *module)
{
    PyObject *flag = PyBool_FromLong(DFT_FRAME_HOOK_ON);
    int r = PyModule_AddObjectRef(module, "FRAME_HOOK", flag);
    Py_DECREF(flag);
    if (r < 0)
        return -1;
    PyObject *max = Py_BuildValue("(ii)", DFT_FRAME_HOOK_MAX_PY >> 8, DFT_FRAME_HOOK_MAX_PY & 0xFF);
    if (!max)
        return -1;
    r = PyModule_AddObjectRef(module, "FRAME_HOOK_MAX_PYTHON", max);
    Py_DECREF(max);
    return r;
}

#if !DFT_FRAME_HOOK_ON
int dft_frame_hook_register(PyObject *module)
{
    return add_flags(module);
}
#else

/* ---- the frame type and how to read its code object, by version -------- */

#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX < 0x030C0000
/* 3.11 has no public accessor for the code of a _PyInterpreterFrame. */
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif
typedef struct _PyInterpreterFrame eval_frame_t;

/* A borrowed reference to the frame's code object. */
static inline PyCodeObject *frame_code(eval_frame_t *f)
{
#if PY_VERSION_HEX >= 0x030C0000
    /* 3.12+: public accessor (new reference); the frame keeps the code alive */
    PyCodeObject *code = (PyCodeObject *)PyUnstable_InterpreterFrame_GetCode(f);
    Py_XDECREF(code);
    return code;
#else
    return f->f_code;
#endif
}
#else /* 3.9, 3.10: the hook gets a PyFrameObject */
typedef PyFrameObject eval_frame_t;

static inline PyCodeObject *frame_code(eval_frame_t *f)
{
    PyCodeObject *code = PyFrame_GetCode(f);
    Py_DECREF(code);
    return code;
}
#endif

/* ---- registered code objects ------------------------------------------- */

typedef struct {
    PyObject *code; /* strong reference */
    char *name;
    size_t name_len;
    int32_t ctx;
    int64_t calls;
    int64_t compiled_calls;
} traced_code;

/* An open-addressing set of code pointers -> index in `codes`. */
#define SLOT_EMPTY (-1)
#define SLOT_GONE (-2)
static traced_code *codes;
static Py_ssize_t ncodes_live, codes_cap;
static Py_ssize_t *slots;
static size_t nslots; /* a power of two, or 0 */

static size_t slot_of(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL; }

static traced_code *lookup(PyCodeObject *code)
{
    if (!nslots)
        return NULL;
    size_t mask = nslots - 1;
    for (size_t i = slot_of(code) & mask;; i = (i + 1) & mask) {
        Py_ssize_t k = slots[i];
        if (k == SLOT_EMPTY)
            return NULL;
        if (k >= 0 && codes[k].code == (PyObject *)code)
            return &codes[k];
    }
}

/* Rebuilds the set with room for twice the live entries. */
static int rehash(void)
{
    size_t n = 16;
    while (n < (size_t)(ncodes_live + 1) * 4)
        n *= 2;
    Py_ssize_t *s = malloc(n * sizeof *s);
    if (!s) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        s[i] = SLOT_EMPTY;
    for (Py_ssize_t k = 0; k < codes_cap; k++) {
        if (!codes[k].code)
            continue;
        size_t i = slot_of(codes[k].code) & (n - 1);
        while (s[i] != SLOT_EMPTY)
            i = (i + 1) & (n - 1);
        s[i] = k;
    }
    free(slots);
    slots = s;
    nslots = n;
    return 0;
}

/* ---- install / uninstall ----------------------------------------------- */

static _PyFrameEvalFunction previous_hook; /* what ran before ours */
static int installed;

static PyObject *evaluate(PyThreadState *ts, eval_frame_t *f, int throwflag)
{
    _PyFrameEvalFunction prev = previous_hook;
    if (prev)
        return prev(ts, f, throwflag);
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
}

static void emit_span(const dft_scope_tok *tok, const traced_code *tc, int64_t t0, int64_t t1,
                      const dft_dyn_counters *before, const dft_dyn_counters *after, int mode)
{
    static const struct {
        const char *s;
        size_t len;
    } modes[] = {{"cached", 6}, {"compile", 7}, {"recompile", 9}};
    dft_arg a[5 + DFT_DYN_CTX_ARGS] = {
        {.key = "mode", .key_len = 4, .type = DFT_ARG_STR, .v.s = {modes[mode].s, modes[mode].len}},
        {.key = "compiled", .key_len = 8, .type = DFT_ARG_INT, .v.i = mode != 0},
        {.key = "graphs", .key_len = 6, .type = DFT_ARG_INT,
         .v.i = after->graphs_run - before->graphs_run},
        {.key = "graphs_compiled", .key_len = 15, .type = DFT_ARG_INT,
         .v.i = after->graphs_compiled - before->graphs_compiled},
        {.key = "compile_us", .key_len = 10, .type = DFT_ARG_INT,
         .v.i = after->compile_us - before->compile_us},
    };
    unsigned n = 5 + dft_dyn_context_args(tc->ctx, a + 5);
    dft_event ev = {.name = tc->name, .name_len = tc->name_len, .cat = "dynamo", .cat_len = 6,
                    .ts = t0, .dur = t1 >= t0 ? t1 - t0 : 0, .ph = DFT_PH_COMPLETE,
                    .args = a, .nargs = n};
    if (dft_trace_active())
        dft_emit_record(&ev, tok);
}

/* The hook.  GIL held (runs on the evaluating thread). */
static PyObject *frame_hook(PyThreadState *ts, eval_frame_t *f, int throwflag)
{
    traced_code *tc = throwflag ? NULL : lookup(frame_code(f));
    if (!tc)
        return evaluate(ts, f, throwflag);
    /* codes may move if one is registered during the call: keep the index */
    Py_ssize_t k = tc - codes;
    PyObject *code = tc->code;
    dft_dyn_counters *c = dft_dyn_counters_get();
    dft_dyn_counters before = *c;
    dft_scope_tok tok = {NULL, 0, 0};
    int scoped = dft_trace_ready(); /* starts tracing from the environment if need be */
    if (scoped)
        dft_scope_open(&tok); /* the span is the parent of what the call records */
    int64_t t0 = dft_now_us();
    PyObject *r = evaluate(ts, f, throwflag);
    int64_t t1 = dft_now_us();
    if (scoped && k < codes_cap && codes[k].code == code) {
        tc = &codes[k];
        int compiled = c->compiles != before.compiles || c->graphs_compiled != before.graphs_compiled;
        int mode = compiled ? (tc->compiled_calls ? 2 : 1) : 0;
        tc->calls++;
        tc->compiled_calls += compiled;
        emit_span(&tok, tc, t0, t1, &before, c, mode); /* no Python calls: r and any error intact */
    }
    dft_scope_close(&tok);
    return r;
}

/* `installed` means ours is in the chain: on top, or below a hook that saved
 * ours and will put it back.  Ours goes on top of another hook only the first
 * time; afterwards only over the default evaluator (a hook that saved ours
 * would otherwise call ours, which would call it back: a loop). */
static void install(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (cur == frame_hook) {
        installed = 1;
        return;
    }
    if (installed && cur != _PyEval_EvalFrameDefault)
        return;
    previous_hook = cur == _PyEval_EvalFrameDefault ? NULL : cur;
    _PyInterpreterState_SetEvalFrameFunc(interp, frame_hook);
    installed = 1;
}

static void uninstall(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    /* Only when ours is on top: a hook above ours saved ours and will put it
     * back; ours then runs as a pass-through until it is on top again. */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == frame_hook) {
        _PyInterpreterState_SetEvalFrameFunc(
            interp, previous_hook ? previous_hook : _PyEval_EvalFrameDefault);
        previous_hook = NULL;
        installed = 0;
    }
}

/* ---- Python functions -------------------------------------------------- */

/* _frame_hook_add(code, name, ctx) */
static PyObject *hook_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_frame_hook_add() takes 3 arguments (code, name, ctx)");
        return NULL;
    }
    if (!PyCode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "code must be a code object, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    if (!PyUnicode_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "name must be a str, not %.100s", Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    long ctx = PyLong_AsLong(args[2]);
    if (ctx == -1 && PyErr_Occurred())
        return NULL;
    if (lookup((PyCodeObject *)args[0]))
        Py_RETURN_NONE; /* already registered */
    Py_ssize_t nlen;
    const char *u = PyUnicode_AsUTF8AndSize(args[1], &nlen);
    if (!u)
        return NULL;
    Py_ssize_t k = 0;
    while (k < codes_cap && codes[k].code)
        k++;
    if (k == codes_cap) {
        size_t old = (size_t)codes_cap, cap = old;
        if (DFT_GROW(codes, old, cap, 8) != 0)
            return PyErr_NoMemory();
        memset(codes + old, 0, (cap - old) * sizeof *codes); /* free slots are zeroed */
        codes_cap = (Py_ssize_t)cap;
    }
    char *name = malloc((size_t)nlen + 1);
    if (!name)
        return PyErr_NoMemory();
    memcpy(name, u, (size_t)nlen + 1);
    Py_INCREF(args[0]); /* not Py_NewRef: kept buildable on 3.9 */
    codes[k] = (traced_code){.code = args[0], .name = name,
                             .name_len = (size_t)nlen, .ctx = (int32_t)ctx};
    ncodes_live++;
    if (rehash() < 0) {
        Py_CLEAR(codes[k].code);
        free(codes[k].name);
        ncodes_live--;
        return NULL;
    }
    install();
    Py_RETURN_NONE;
}

/* _frame_hook_remove(code): unknown codes are ignored (finalizers at exit). */
static PyObject *hook_remove(PyObject *self, PyObject *code)
{
    (void)self;
    traced_code *tc = PyCode_Check(code) ? lookup((PyCodeObject *)code) : NULL;
    if (!tc)
        Py_RETURN_NONE;
    PyObject *ref = tc->code;
    tc->code = NULL;
    free(tc->name);
    tc->name = NULL;
    ncodes_live--;
    if (rehash() < 0)
        PyErr_Clear(); /* the old set still works: lookups skip freed entries */
    if (ncodes_live == 0)
        uninstall();
    Py_DECREF(ref);
    Py_RETURN_NONE;
}

/* _frame_hook_ensure(): puts the hook back if it was dropped (see above). */
static PyObject *hook_ensure(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (ncodes_live > 0) {
        PyInterpreterState *interp = PyInterpreterState_Get();
        _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
        if (cur == _PyEval_EvalFrameDefault)
            install();
    }
    Py_RETURN_NONE;
}

/* _frame_hook_state() -> (on_top, registered, chained_to_other) */
static PyObject *hook_state(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    int on_top = _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == frame_hook;
    return Py_BuildValue("(Nni)", PyBool_FromLong(on_top), ncodes_live,
                         installed && previous_hook != NULL);
}

static PyMethodDef hook_methods[] = {
    {"_frame_hook_add", (PyCFunction)(void (*)(void))hook_add, METH_FASTCALL,
     "_frame_hook_add(code, name, ctx): times every call of code"},
    {"_frame_hook_remove", hook_remove, METH_O, "_frame_hook_remove(code)"},
    {"_frame_hook_ensure", hook_ensure, METH_NOARGS,
     "_frame_hook_ensure(): reinstalls the hook if another library dropped it"},
    {"_frame_hook_state", hook_state, METH_NOARGS,
     "_frame_hook_state() -> (installed_on_top, registered_codes, chained)"},
    {NULL, NULL, 0, NULL},
};

int dft_frame_hook_register(PyObject *module)
{
    if (add_flags(module) < 0)
        return -1;
    return PyModule_AddFunctions(module, hook_methods);
}
#endif /* DFT_FRAME_HOOK_ON */
