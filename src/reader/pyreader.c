/* reader/pyreader.c: what the readers' Python objects (_LineReader in
 * reader/module.c, _EventReader in reader/events.c) share: opening a trace by
 * path without the GIL, and how they report the way a file ended. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reader/reader.h"
#include "reader/identity.h"
#include "reader/tools.h"

#include <errno.h>
#include <string.h>

/* GIL held; the file is opened without it. */
int dft_rd_open_path(dft_rd *rd, PyObject *path)
{
    PyObject *bytes;
    if (!PyUnicode_FSConverter(path, &bytes))
        return -1;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dft_rd_open(rd, PyBytes_AS_STRING(bytes));
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc < 0) {
        dft_rd_raise_open_error(path, rd, errno);
        return -1;
    }
    return 0;
}

/* A reader's end as the readers' Python objects report it (status -1: not
 * at the end yet), and why it ended early (rd->err, or ''). */
PyObject *dft_rd_status_str(int status)
{
    switch (status) {
    case -1:
        return PyUnicode_FromString("reading");
    case DFT_RD_EOF:
        return PyUnicode_FromString("ok");
    case DFT_RD_TRUNCATED:
        return PyUnicode_FromString("truncated");
    case DFT_RD_CORRUPT:
        return PyUnicode_FromString("corrupt");
    default:
        return PyUnicode_FromString("error");
    }
}

PyObject *dft_rd_message_str(const dft_rd *rd)
{
    return PyUnicode_DecodeUTF8(rd->err, (Py_ssize_t)strlen(rd->err), "replace");
}

PyObject *dft_rd_text(const char *s, size_t n)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "replace"); /* older tools: not UTF-8 */
}

const char *dft_rd_status_name(int st)
{
    return st == 1 ? "ok" : st == 2 ? "truncated" : st == 3 ? "corrupt" : "error";
}

int dft_rd_bad_add_to(PyObject *d, const dft_rd_bad *b)
{
    PyObject *v = Py_BuildValue("{s:K,s:z,s:K}", "bad_lines", (unsigned long long)b->lines,
                                "first_bad", b->first, "first_bad_line",
                                (unsigned long long)b->first_line);
    if (!v)
        return -1;
    int rc = PyDict_Update(d, v);
    Py_DECREF(v);
    return rc;
}

int dft_ident_add_to(PyObject *d, const dft_ident *id)
{
    PyObject *v = Py_BuildValue(
        "{s:N,s:N,s:L,s:L,s:L,s:L,s:L,s:L,s:N,s:N,s:L,s:L,s:L,s:N}", "host",
        dft_rd_text(id->host, strlen(id->host)), "process_name",
        dft_rd_text(id->process_name, strlen(id->process_name)), "pid", (long long)id->pid,
        "ppid", (long long)id->ppid, "rank", (long long)id->rank, "own_rank",
        (long long)dft_ident_own_rank(id), "local_rank",
        (long long)id->local_rank, "world_size", (long long)id->world_size, "job_id",
        dft_rd_text(id->job_id, strlen(id->job_id)), "rank_source",
        dft_rd_text(id->rank_source, strlen(id->rank_source)), "worker", (long long)id->worker,
        "num_workers", (long long)id->num_workers, "loader", (long long)id->loader, "dataset",
        dft_rd_text(id->dataset, strlen(id->dataset)));
    if (!v)
        return -1;
    int rc = PyDict_Update(d, v);
    Py_DECREF(v);
    return rc;
}
