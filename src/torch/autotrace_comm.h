/* torch/autotrace_comm.h: _core._AtCall, a torch function timed per call
 * (autotrace_calls.c: the wrapper, its arguments, torch.save/load;
 * autotrace_comm.c: the collectives).  Everything needs the GIL. */
#ifndef DFT_TORCH_AUTOTRACE_COMM_H
#define DFT_TORCH_AUTOTRACE_COMM_H

#include "torch/autotrace_steps.h"

enum { CALL_COLLECTIVE, CALL_P2P, CALL_FUNCOL, CALL_SAVE, CALL_LOAD, CALL_NKINDS };

/* One parameter of the wrapped function: by position, else by keyword,
 * else its default. */
typedef struct {
    Py_ssize_t pos;   /* -1: keyword only */
    PyObject *name;   /* NULL: the function has no such parameter (None) */
    PyObject *dflt;
} arg_spec;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;     /* __dict__: functools.update_wrapper's attributes */
    PyObject *original;
    PyObject *name;     /* the event's name */
    const char *name_utf8;
    Py_ssize_t name_len;
    int kind;
    int part;           /* DFT_AT_COMM or DFT_AT_CHECKPOINT */
    int is_async;       /* p2p: isend/irecv */
    int sends;          /* p2p: send/isend */
    arg_spec data;      /* the tensor(s) whose bytes the event reports; save/load: the file */
    arg_spec group;
    arg_spec async_op;  /* collectives: async_op */
    arg_spec peer;      /* p2p: the global peer rank */
    arg_spec group_peer; /* p2p: the peer's rank in the group */
    arg_spec tag;       /* funcol: tag */
    PyObject *resolve;  /* funcol: resolve(group, tag) -> ProcessGroup or None */
} AtCall;

/* What the wrappers share (_at_calls_setup). */
typedef struct {
    PyObject *group_info;   /* comm.group_info(group) -> (pg, name, size) or None */
    PyObject *seq;          /* dict: p2p key -> the next p2p_seq (collectives: comm_seq.c) */
    PyObject *tensor_type;  /* torch.Tensor */
    PyObject *pg_type;      /* ProcessGroup */
    PyObject *compiling;    /* torch.compiler.is_compiling, or its module dict (the flag) */
    PyObject *get_rank;     /* c10d.get_rank */
    PyObject *global_rank;  /* c10d.get_global_rank(pg, group_rank) */
    PyObject *abspath;      /* os.path.abspath */
    PyObject *module_type;  /* torch.nn.Module */
    PyObject *loaded_module; /* modules.search_again(): a whole model was loaded */
    PyObject *default_info; /* the default group's info, once found */
    PyObject *groups;       /* dict: id(pg) -> info */
} dft_at_calls_ctx;

extern dft_at_calls_ctx dft_at_calls;


/* The argument s names (borrowed), None where the function has none. */
static inline PyObject *arg_of(const arg_spec *s, PyObject *const *args, Py_ssize_t n,
                        PyObject *kwnames)
{
    if (!s->name)
        return Py_None;
    if (s->pos >= 0 && s->pos < n)
        return args[s->pos];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            if (k == s->name || PyUnicode_Compare(k, s->name) == 0)
                return args[n + i];
        }
    }
    return s->dflt;
}

/* The original, called as the wrapper was; `in_comm` counts it. */
PyObject *dft_at_call_original(AtCall *w, dft_at_thread *t, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames);
/* A collective, point-to-point call or functional collective, timed. */
PyObject *dft_at_comm_call(AtCall *w, dft_at_thread *t, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames);
/* Interns the names autotrace_comm.c reads: 0, or -1 with an exception. */
int dft_at_comm_init(void);

/* The next number of key in the dict seq (0 first), counted there: 0, or
 * -1 with an exception set (autotrace_comm.c: its point-to-point calls). */
int dft_at_next_seq(PyObject *seq, PyObject *key, int64_t *out);

#endif
