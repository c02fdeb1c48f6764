/* profile/emit.c: what every dft_fn event path shares (the object's `with`
 * blocks, decorated calls in wrap.c, loops in loop.c): the conversion of
 * epoch/step/... values and writing one event with the object's category and
 * args, in the nesting scopes of core/core.h.  All functions need the GIL. */
#include "profile/emit.h"

#include <stdlib.h>
#include <string.h>

#include "binding/pyargs.h"
#include "core/clock.h"

PyObject *dft_sa_names[DFT_SA_N];
const char *const dft_sa_keys[DFT_SA_N] = {"epoch", "step", "image_idx", "image_size"};

int dft_emit_ready(void)
{
    for (int k = 0; k < DFT_SA_N; k++)
        if (!dft_sa_names[k] && !(dft_sa_names[k] = PyUnicode_InternFromString(dft_sa_keys[k])))
            return -1;
    return 0;
}

/* ---- values and emission ----------------------------------------------- */

int dft_val_from(PyObject *v, int as_int, dft_val *out)
{
    if (v == NULL || v == Py_None)
        return 0;
    if (PyLong_Check(v)) {
        int overflow;
        long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (i == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        out->type = 'i';
        out->i = i;
        return 1;
    }
    if (PyFloat_Check(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        if (as_int) {
            if (!(d > -9.2e18 && d < 9.2e18))
                return 0;
            out->type = 'i';
            out->i = (int64_t)d;
        } else {
            out->type = 'f';
            out->f = d;
        }
        return 1;
    }
    /* numpy scalars and other integer-likes */
    if (Py_TYPE(v)->tp_as_number && Py_TYPE(v)->tp_as_number->nb_index) {
        PyObject *idx = PyNumber_Index(v);
        if (!idx) {
            PyErr_Clear();
            return 0;
        }
        int r = dft_val_from(idx, as_int, out);
        Py_DECREF(idx);
        return r;
    }
    return 0;
}

static const char *type_short_name(PyObject *t)
{
    if (!PyType_Check(t))
        return "error";
    const char *n = ((PyTypeObject *)t)->tp_name;
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

static void add_val(dft_pyevent *pe, const char *key, const dft_val *v)
{
    if (pe->ev.nargs >= DFT_PYARGS_MAX)
        return;
    dft_arg *a = &pe->args[pe->ev.nargs++];
    a->key = key;
    a->key_len = 0;
    if (v->type == 'i') {
        a->type = DFT_ARG_INT;
        a->v.i = v->i;
    } else {
        a->type = DFT_ARG_FLOAT;
        a->v.f = v->f;
    }
}

static int add_str(dft_pyevent *pe, const char *key, PyObject *s)
{
    if (pe->ev.nargs >= DFT_PYARGS_MAX)
        return 0;
    Py_ssize_t n;
    PyObject *holder;
    const char *p = dft_pyargs_utf8(s, &n, &holder);
    if (!p)
        return -1;
    if (holder)
        pe->holders[pe->nholders++] = holder;
    dft_arg *a = &pe->args[pe->ev.nargs++];
    a->key = key;
    a->key_len = 0;
    a->type = DFT_ARG_STR;
    a->v.s.ptr = p;
    a->v.s.len = (size_t)n;
    return 0;
}

/* One item of an args dict; values were normalised by update(). */
static int add_item(dft_pyevent *pe, PyObject *key, PyObject *value)
{
    Py_ssize_t kl;
    PyObject *kh;
    const char *k = dft_pyargs_utf8(key, &kl, &kh);
    if (!k)
        return -1;
    if (kh)
        pe->holders[pe->nholders++] = kh;
    dft_val v = {0};
    if (PyUnicode_Check(value))
        return add_str(pe, k, value);
    if (dft_val_from(value, 0, &v))
        add_val(pe, k, &v);
    return 0;
}

/* UTF-8 of a str without a call for the usual ASCII case. */
static inline const char *utf8_of(PyObject *s, Py_ssize_t *len)
{
    if (PyUnicode_IS_COMPACT_ASCII(s)) {
        *len = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    return PyUnicode_AsUTF8AndSize(s, len);
}

/* The common case on the stack: no args dicts and UTF-8 already cached in the
 * str objects.  Returns 0 when written, 1 when the general path is needed. */
static int emit_fast(ProfileObject *p, const dft_scope_tok *own, PyObject *name, int64_t ts,
                     int64_t dur, const dft_stepargs *sa, PyObject *counter_key,
                     int64_t counter, PyObject *exc_type)
{
    for (const ProfileObject *q = p; q; q = q->parent)
        if (q->args && PyDict_GET_SIZE(q->args) > 0)
            return 1;
    Py_ssize_t nl, cl, kl = 0;
    const char *n = utf8_of(name, &nl);
    const char *c = n ? utf8_of(p->cat, &cl) : NULL;
    const char *k = c && counter_key ? utf8_of(counter_key, &kl) : NULL;
    if (!c || (counter_key && !k)) {
        PyErr_Clear(); /* lone surrogates: the general path passes them through */
        return 1;
    }
    dft_arg args[DFT_SA_N + 2];
    unsigned na = 0;
    for (int i = 0; i < DFT_SA_N; i++) {
        const dft_val *v = sa && sa->v[i].type ? &sa->v[i] : NULL;
        for (const ProfileObject *q = p; !v && q; q = q->parent)
            if (q->base.v[i].type)
                v = &q->base.v[i];
        if (!v)
            continue;
        args[na].key = dft_sa_keys[i];
        args[na].key_len = 0;
        if (v->type == 'i') {
            args[na].type = DFT_ARG_INT;
            args[na].v.i = v->i;
        } else {
            args[na].type = DFT_ARG_FLOAT;
            args[na].v.f = v->f;
        }
        na++;
    }
    if (k) {
        args[na].key = k;
        args[na].key_len = 0;
        args[na].type = DFT_ARG_INT;
        args[na++].v.i = counter;
    }
    if (exc_type) {
        const char *en = type_short_name(exc_type);
        args[na].key = "error";
        args[na].key_len = 0;
        args[na].type = DFT_ARG_STR;
        args[na].v.s.ptr = en;
        args[na++].v.s.len = strlen(en);
    }
    dft_event ev = {.name = n, .name_len = (size_t)nl, .cat = c, .cat_len = (size_t)cl,
                    .ts = ts, .dur = dur < 0 ? 0 : dur, .ph = DFT_PH_COMPLETE,
                    .args = args, .nargs = na};
    dft_emit_record(&ev, own);
    return 0;
}

void dft_profile_emit(ProfileObject *p, const dft_scope_tok *own, PyObject *name, int64_t ts,
                      int64_t dur, const dft_stepargs *sa, PyObject *counter_key,
                      int64_t counter, PyObject *exc_type)
{
    if (dft_trace_state() != DFT_STATE_ACTIVE)
        return; /* while finalize runs, dft_emit_record refuses it and counts it */
    /* With own, the event takes own's scope (its id, level and parent);
     * without (async calls, flush() regions), it nests in the innermost one. */
    if (emit_fast(p, own, name, ts, dur, sa, counter_key, counter, exc_type) == 0)
        return;
    dft_pyevent pe;
    if (dft_pyevent_init(&pe, name, p->cat) < 0) {
        PyErr_WriteUnraisable((PyObject *)p);
        return;
    }
    pe.ev.ph = DFT_PH_COMPLETE;
    pe.ev.ts = ts;
    pe.ev.dur = dur < 0 ? 0 : dur;
    /* Values: the nearest of sa, p, p's parents wins. */
    for (int k = 0; k < DFT_SA_N; k++) {
        const dft_val *v = sa && sa->v[k].type ? &sa->v[k] : NULL;
        for (const ProfileObject *q = p; !v && q; q = q->parent)
            if (q->base.v[k].type)
                v = &q->base.v[k];
        if (v)
            add_val(&pe, dft_sa_keys[k], v);
    }
    for (const ProfileObject *q = p; q; q = q->parent) {
        if (!q->args)
            continue;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(q->args, &pos, &key, &value)) {
            int shadowed = 0;
            for (const ProfileObject *r = p; r != q; r = r->parent)
                if (r->args && PyDict_Contains(r->args, key) == 1)
                    shadowed = 1;
            if (!shadowed && add_item(&pe, key, value) < 0)
                goto fail;
        }
    }
    if (counter_key) {
        Py_ssize_t kl;
        PyObject *kh;
        const char *k = dft_pyargs_utf8(counter_key, &kl, &kh);
        if (!k)
            goto fail;
        if (kh)
            pe.holders[pe.nholders++] = kh;
        dft_val v = {.type = 'i', .i = counter};
        add_val(&pe, k, &v);
    }
    if (exc_type && pe.ev.nargs < DFT_PYARGS_MAX) {
        const char *en = type_short_name(exc_type);
        dft_arg *a = &pe.args[pe.ev.nargs++];
        a->key = "error";
        a->key_len = 0;
        a->type = DFT_ARG_STR;
        a->v.s.ptr = en;
        a->v.s.len = strlen(en);
    }
    dft_emit_record(&pe.ev, own);
    dft_pyevent_clear(&pe);
    return;
fail:
    dft_pyevent_clear(&pe);
    PyErr_WriteUnraisable((PyObject *)p);
}

void dft_profile_emit_keep_error(ProfileObject *p, const dft_scope_tok *own, PyObject *name,
                                 int64_t ts, int64_t dur, const dft_stepargs *sa,
                                 PyObject *counter_key, int64_t counter)
{
    /* StopIteration is how generators finish, not an error. */
    int mark = PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_StopIteration);
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    dft_profile_emit(p, own, name, ts, dur, sa, counter_key, counter,
                     exc && mark ? (PyObject *)Py_TYPE(exc) : NULL);
    PyErr_SetRaisedException(exc);
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    dft_profile_emit(p, own, name, ts, dur, sa, counter_key, counter, mark ? t : NULL);
    PyErr_Restore(t, v, tb);
#endif
}

