"""The reference's ecosystem reads our traces as it reads the reference's.

A workload with DLIO's shape (tests/ecosystem/dlio_workload.py: 2 ranks,
each with a persistent forked DataLoader worker) is traced by dftracer and
by the reference (pydftracer 2.0.6 over dftracer 2.2.0) on the same data;
then the tools built around the reference read both traces:

- DFAnalyzer (dftracer-analyzer 0.0.9 over dftracer-utils 0.0.12), its
  DLIO preset (`analyzer/preset=dlio`): the layer rows and counts, the
  profile, process and node counts must be the reference's, but for what
  docs/compat.md ("Ecosystem tools") lists and these tests compute exactly;
- dftracer-utils 0.0.14: `dftracer_event_count`, `dftracer_validate` and
  `TraceViewer(...).group_by("cat", "name")` must count what `dftracer
  summary` counts.

Each tool runs from its own venv (they import as `dftracer` too, so never
beside this package): `make test-ecosystem` builds them once
(build/ecosystem-venv, build/ecosystem-utils-venv) and names them in
DFTRACER_ECOSYSTEM_PYTHON and DFTRACER_ECOSYSTEM_UTILS_PYTHON, with
DFTRACER_REQUIRE_ECOSYSTEM=1: there these tests run, never skip.  Elsewhere
(`make test`) they skip, saying so.

Ours is traced with DFTRACER_FLUSH_INTERVAL=0.02, so that everything we
write beyond the reference is in the traces the tools read: `memory` counter
samples, `open` snapshots (a compute step outlasts the interval), `clock`
ticks.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "dlio_workload.py")
RANKS = 2
ECO = os.environ.get("DFTRACER_ECOSYSTEM_PYTHON")
UTILS = os.environ.get("DFTRACER_ECOSYSTEM_UTILS_PYTHON")
REFERENCE = os.environ.get("DFTRACER_REFERENCE_PYTHON")
REQUIRE = os.environ.get("DFTRACER_REQUIRE_ECOSYSTEM") == "1"

# The POSIX calls the reference (dftracer 2.2.0's brahma POSIX tracer)
# intercepts: on glibc 2.33 and later CPython's stat/fstat are stat64/fstat64
# (not __xstat), and readdir/closedir are not intercepted, so those calls,
# which dftracer records, are absent from the reference's trace of the run.
REFERENCE_POSIX = {
    "__fxstat", "__fxstat64", "__lxstat", "__lxstat64", "__xstat", "__xstat64", "access",
    "chdir", "chmod", "chown", "close", "copy_file_range", "creat64", "dup", "dup2", "execl",
    "execlp", "execv", "execve", "execvp", "execvpe", "faccessat", "fcntl", "fdatasync", "flock",
    "fork", "fstatvfs", "fstatvfs64", "fsync", "ftruncate", "lchown", "link", "linkat", "lseek",
    "lseek64", "mkdir", "mkfifo", "mmap", "mmap64", "open", "open64", "openat", "opendir",
    "posix_fadvise", "posix_fadvise64", "posix_fallocate", "posix_fallocate64", "pread",
    "pread64", "preadv", "preadv64", "pwrite", "pwrite64", "pwritev", "pwritev64", "read",
    "readlink", "readlinkat", "readv", "remove", "rename", "rmdir", "sendfile", "sendfile64",
    "statvfs", "statvfs64", "symlink", "symlinkat", "truncate", "umask", "unlink", "utime",
    "wait", "waitpid", "write", "writev",
}


def _clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("DFTRACER_") and k != "PYTHONPATH"}


def _tools():
    missing = [name for name, value in (("DFTRACER_ECOSYSTEM_PYTHON", ECO),
                                        ("DFTRACER_ECOSYSTEM_UTILS_PYTHON", UTILS),
                                        ("DFTRACER_REFERENCE_PYTHON", REFERENCE)) if not value]
    if missing:
        if REQUIRE:
            pytest.fail(f"DFTRACER_REQUIRE_ECOSYSTEM=1 but {', '.join(missing)} unset")
        pytest.skip(f"{', '.join(missing)} not set: `make test-ecosystem` builds the ecosystem's "
                    "venvs and runs these tests")
    for path in (ECO, UTILS, REFERENCE):
        if not os.path.exists(path):
            pytest.fail(f"{path}: no such interpreter")


def _torch_site(tmp):
    """This interpreter's site-packages without our package: the reference's torch."""
    import torch

    site = tmp / "site"
    site.mkdir()
    torch_site = os.path.dirname(os.path.dirname(torch.__file__))
    for entry in os.listdir(torch_site):
        if not entry.lower().startswith("dftracer"):
            os.symlink(os.path.join(torch_site, entry), site / entry)
    return str(site)


def _trace(python, where, data, extra_env):
    """The workload's ranks, run at once as a launcher starts them; cwd is
    `where`, the trace folder `where`/out."""
    env = {**_clean_env(), "DFTRACER_ENABLE": "1", "DFTRACER_INC_METADATA": "1", **extra_env}
    ranks = [subprocess.Popen([python, WORKLOAD, "train", data, "out", str(r), str(RANKS)],
                              cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(RANKS)]
    for p in ranks:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{python}: exit {p.returncode}\n{out}\n{err[-3000:]}"
    return os.path.join(where, "out")


def _copy_traces(folder, dest):
    """The trace files alone, for one tool (the tools leave indexes beside them)."""
    os.makedirs(dest)
    for name in os.listdir(folder):
        if ".pfw" in name:
            shutil.copy(os.path.join(folder, name), dest)
    return dest


def _run_json(argv, timeout):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**_clean_env(), "USER": os.environ.get("USER", "dftracer")})
    assert proc.returncode == 0, f"{argv[:2]}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    _tools()
    tmp = tmp_path_factory.mktemp("eco")
    data = str(tmp / "data")
    subprocess.run([sys.executable, WORKLOAD, "generate", data], env=_clean_env(), check=True,
                   timeout=120)
    for name in ("ours", "ref"):
        (tmp / name).mkdir()
    ours_env = {"DFTRACER_FLUSH_INTERVAL": "0.02"}
    if os.environ.get("PYTHONPATH"):  # an in-place or sanitized build is found through it
        ours_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    ours = _trace(sys.executable, str(tmp / "ours"), data, ours_env)
    ref = _trace(REFERENCE, str(tmp / "ref"), data, {"PYTHONPATH": _torch_site(tmp)})
    folders = {"ours": ours, "ref": ref}
    dfa_in = {k: _copy_traces(v, str(tmp / "dfanalyzer" / k)) for k, v in folders.items()}
    dfa = _run_json([ECO, os.path.join(HERE, "dfanalyzer_counts.py"), str(tmp / "dfanalyzer"),
                     dfa_in["ours"], dfa_in["ref"]], timeout=900)
    return {"tmp": tmp, "data": data, "folders": folders,
            "dfa": {k: dfa[v] for k, v in dfa_in.items()},
            "traces": {"ours": [read_trace(p) for p in find_traces(ours)]}}


def _ours_by_name(runs, cat):
    c = collections.Counter()
    for t in runs["traces"]["ours"]:
        for e in t.of("X", cat=cat):
            c[e["name"]] += 1
    return c


def _rows(dfa):
    return {layer for layer, m in dfa["layers"].items() if m["count"] > 0}


def test_dfanalyzer_dlio_layers_are_the_references(runs):
    ours, ref = runs["dfa"]["ours"], runs["dfa"]["ref"]
    # The DLIO layers all there (a workload of DLIO's shape), in both.
    for layer in ("app", "training", "epoch", "compute", "fetch_data", "data_loader",
                  "data_loader_fork", "reader", "posix"):
        assert ref["layers"][layer]["count"] > 0, (layer, ref)
    # Rows: the reference's, and POSIX - Reader, which needs the files' names
    # (docs/compat.md: dftracer-utils 0.0.12 resolves no file hash of a
    # dftracer 2.2.0 trace, whose metadata lines have a numeric "ph").
    assert _rows(ours) == _rows(ref) | {"reader_posix"}, (ours, ref)
    for layer in _rows(ref) - {"posix"}:
        assert ours["layers"][layer]["count"] == ref["layers"][layer]["count"], layer
    # One fork per rank: its DataLoader worker.
    assert ours["layers"]["data_loader_fork"]["count"] == RANKS
    # POSIX: the reference's calls, and those it cannot see (REFERENCE_POSIX).
    posix = _ours_by_name(runs, "POSIX")
    unseen = sum(n for name, n in posix.items() if name not in REFERENCE_POSIX)
    assert unseen > 0  # CPython's stat64/fstat64/readdir64: the case documented
    assert ours["layers"]["posix"]["count"] == ref["layers"]["posix"]["count"] + unseen
    assert ours["layers"]["posix"]["count"] == sum(posix.values())
    # POSIX - Reader: every POSIX call on a file under the data dir ("/data").
    on_data = 0
    for t in runs["traces"]["ours"]:
        files = t.hashes("FH")
        on_data += sum(1 for e in t.of("X", cat="POSIX")
                       if "/data" in files.get(e["args"].get("fhash", ""), ""))
    assert on_data > 0 and ours["layers"]["reader_posix"]["count"] == on_data


def test_dfanalyzer_counts_profiles_processes_and_nodes_as_for_the_reference(runs):
    ours, ref = runs["dfa"]["ours"], runs["dfa"]["ref"]
    # Our memory samples are in the traces it read, and are no profile events.
    samples = sum(len(t.of("C", name="memory")) for t in runs["traces"]["ours"])
    assert samples > 0
    assert ours["profile_count"] == ref["profile_count"]
    # Each rank and its worker: one process each, on one node.
    assert ours["processes"] == ref["processes"] == 2 * RANKS
    assert ours["nodes"] == ref["nodes"] == 1


def _summary(folder):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", folder, "--json",
                           "--by", "name", "--top", "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _utils_bin(name):
    return os.path.join(os.path.dirname(UTILS), name)


def test_dftracer_utils_counts_what_summary_counts(runs):
    folder = _copy_traces(runs["folders"]["ours"], str(runs["tmp"] / "utils" / "ours"))
    summary = _summary(folder)
    overview = summary["overview"]
    assert overview["counter_events"] > 0 and overview["complete_events"] > 0
    # dftracer_event_count: every complete and counter event (both versions).
    for n, python in enumerate((UTILS, ECO)):
        index = str(runs["tmp"] / "utils" / f"index-{n}")
        proc = subprocess.run([os.path.join(os.path.dirname(python), "dftracer_event_count"),
                               "-d", folder, "--index-dir", index, "--log-level", "error"],
                              capture_output=True, text=True, timeout=300, env=_clean_env())
        assert proc.returncode == 0, proc.stderr
        assert int(proc.stdout.split()[-1]) == \
            overview["complete_events"] + overview["counter_events"], proc.stdout
    # TraceViewer's group_by: the same (cat, name) counts as summary's by name.
    viewer = _run_json([UTILS, os.path.join(HERE, "utils_counts.py"),
                        str(runs["tmp"] / "utils" / "tv"), folder], timeout=300)[folder]
    # (dftracer-utils writes categories in lower case, as DFAnalyzer matches
    # them; summary's tables leave out the tracer's start and end: one each a file)
    by_name = {(r["cat"].lower(), r["name"]): r["count"] for r in summary["by_name"]}
    assert len(by_name) == len(summary["by_name"])
    by_name[("dftracer", "start")] = by_name[("dftracer", "end")] = overview["files"]
    assert {(c, n): k for c, n, k in viewer["events"]} == by_name
    assert sum(k for _, _, k in viewer["counters"]) == overview["counter_events"]
    assert {(c, n) for c, n, _ in viewer["counters"]} == {("sys", "memory")}


def test_dftracer_validate_passes_both_tracers_files(runs):
    for who, folder in runs["folders"].items():
        # (the reference names its forked children's files ...-fork.pfw.gz)
        files = sorted(glob.glob(os.path.join(folder, "trace-*.pfw*")))
        assert len(files) == 2 * RANKS, files  # a rank's and its worker's
        proc = subprocess.run([_utils_bin("dftracer_validate"), "--files", *files,
                               "--log-level", "error"],
                              capture_output=True, text=True, timeout=300, env=_clean_env())
        assert proc.returncode == 0, (who, proc.stdout, proc.stderr)
        assert f"{len(files)} passed, 0 failed" in proc.stdout, (who, proc.stdout)
