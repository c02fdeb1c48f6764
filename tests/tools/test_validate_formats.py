"""`dftracer validate` tells the formats it reads apart (docs/trace-format.md,
"Valid files"): dftracer's own files and merge's output (strict rules), and
the files pydftracer 2.0.6 over dftracer 2.2.0 writes (the reference; their
own rules).  Each problem names the rule it breaks.

The 2.x samples in tests/tools/reference/ were written by the reference running
tests/tools/reference/program.py (DFTRACER_INC_METADATA=1 and 0), those in
tests/tools/reference/fork/ by fork_tree.py (a parent, its fork children, a
grandchild: the children use hashes their ancestors defined).  When the
reference is named (DFTRACER_REFERENCE_PYTHON: a python with
pydftracer==2.0.6 dftracer==2.2.0, which `make test` builds once into
build/reference-venv and sets), fresh ones are made and checked too.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import subprocess

import pytest

from test_cli import cli, write_project_traces
from tracefile import read_lines

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "reference")
PROGRAM = os.path.join(SAMPLES, "program.py")
WITH_ARGS = os.path.join(SAMPLES, "pydftracer-2.0.6-metadata.trace.gz")
WITHOUT_ARGS = os.path.join(SAMPLES, "pydftracer-2.0.6-no-metadata.trace.gz")
FORK_PROGRAM = os.path.join(SAMPLES, "fork_tree.py")
FORK_SAMPLES = os.path.join(SAMPLES, "fork")
REFERENCE = os.environ.get("DFTRACER_REFERENCE_PYTHON")  # `make test` builds and sets it


def validate(*paths):
    proc = cli("validate", *map(str, paths), "--json")
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def sample_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def check_reference_file(path, with_args):
    lines = sample_lines(path)
    assert lines[0].startswith('{"name":"HH"')  # no "[" line
    rc, (r,) = validate(path)
    assert rc == 0, r
    assert (r["verdict"], r["format"], r["problem_count"]) == ("ok", "dftracer-2.x", 0), r
    assert r["finalized"] and r["events"] == len(lines)
    end = lines[-1]
    assert '"name":"end"' in end and ('"num_events"' in end) == with_args


@pytest.mark.parametrize("path,with_args", [(WITH_ARGS, True), (WITHOUT_ARGS, False)])
def test_reference_samples_are_valid_and_named(path, with_args):
    check_reference_file(path, with_args)
    text = cli("validate", path).stdout
    assert text.startswith(f"OK         {path}: dftracer 2.x trace (pydftracer 2.0.6 / "
                           "dftracer 2.2.0), ")


def test_reference_sample_summary_bytes():
    """The readers take 2.x's events (numeric ph, unescaped strings) and count
    their bytes by the same rule: read and write ret, sendfile64 ret."""
    moved = 0
    for line in sample_lines(WITH_ARGS):
        if '"cat":"POSIX"' in line:
            e = json.loads(line)
            if e["name"] in ("read", "write", "sendfile64"):
                moved += e["args"]["ret"]
    assert moved == 6 * 3000
    proc = cli("summary", WITH_ARGS, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["overview"]["io_bytes"] == moved
    names = {r["name"] for r in out["by_name"]}
    assert 'say \\"hi\\"' in names or 'say "hi"' in names


def broken(tmp_path, lines, name):
    p = tmp_path / name
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    rc, (r,) = validate(p)
    assert rc == 1 and r["verdict"] == "invalid", r
    return r


def test_reference_rules_still_catch_problems(tmp_path):
    lines = sample_lines(WITH_ARGS)
    step = next(i for i, ln in enumerate(lines) if '"name":"step"' in ln)
    r = broken(tmp_path, lines[:step] + [lines[step]] + lines[step:], "dup.gz")
    assert r["format"] == "dftracer-2.x"
    assert any("duplicate id" in p and "(rule 2: unique ids >= 1)" in p for p in r["problems"])
    assert any("end.num_events is 36 but 37 events with an id precede it (rule 5" in p
               for p in r["problems"]), r["problems"]
    r = broken(tmp_path, [ln for ln in lines if '"name":"HH"' not in ln], "nohh.gz")
    assert any(p.startswith("0 HH events (expected 1) (rule 3:") for p in r["problems"])
    assert any("(rule 4: every hash defined once)" in p for p in r["problems"])
    mixed = [ln.replace('"ph":1', '"ph":"X"') if '"name":"step"' in ln else ln for ln in lines]
    r = broken(tmp_path, mixed, "mixed.gz")
    assert any('a string "ph" in a file whose first event has a numeric one (rule 1' in p
               for p in r["problems"]), r["problems"]
    cut = [ln for ln in lines if '"name":"end"' not in ln] + [
        next(ln for ln in lines if '"name":"end"' in ln), lines[step].replace('"id":17', '"id":99')]
    r = broken(tmp_path, cut, "after.gz")
    assert any(p.startswith("1 events after end (rule 5:") for p in r["problems"])


def test_own_files_keep_the_strict_rules(tmp_path):
    """A file of ours must start with '[' and name its process: the 2.x
    allowances do not apply to it, and each problem names the rule."""
    d = tmp_path / "ours"
    d.mkdir()
    (path,) = write_project_traces(d, ranks=(None,))
    lines = read_lines(path)
    assert lines[0] == "["
    rc, (r,) = validate(path)
    assert rc == 0 and r["format"] == "dftracer" and r["verdict"] == "ok"
    r = broken(tmp_path, lines[1:-1], "nobracket.pfw.gz")
    assert r["format"] == "dftracer"
    assert r["problems"][0] == ("line 1: the file does not start with '[' "
                                "(rule 1: one JSON event per line)")
    r = broken(tmp_path, [ln for ln in lines[:-1] if '"process_name"' not in ln], "noname.pfw.gz")
    assert "no process_name event (rule 3: one HH, process_name and start)" in r["problems"]
    # a string escaped as 2.x writes it is not JSON in a file of ours
    fwd = next(i for i, ln in enumerate(lines) if '"name":"forward"' in ln)
    bad = lines[:fwd] + [lines[fwd].replace('"forward"', '"for"ward"')] + lines[fwd + 1:-1]
    r = broken(tmp_path, bad, "unescaped.pfw.gz")
    assert any(p.startswith(f"line {fwd + 1}: ") and p.endswith("(rule 1: one JSON event per line)")
               for p in r["problems"]), r["problems"]
    # merge's output is recognised as such
    out = tmp_path / "merged.pfw.gz"
    assert cli("merge", str(path), "-o", str(out)).returncode == 0
    rc, (r,) = validate(out)
    assert rc == 0 and r["format"] == "dftracer-merged" and r["merged"]
    assert "dftracer merge output, " in cli("validate", str(out)).stdout


def _reference_python():
    """The reference interpreter, or None when none is named (the test skips);
    one that is named but unusable fails the test: `make test` names the one
    it built (build/reference-venv), so there the comparison always runs."""
    if not REFERENCE:
        return None
    if not os.path.exists(REFERENCE):
        pytest.fail(f"DFTRACER_REFERENCE_PYTHON={REFERENCE}: no such file")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")
           and k != "PYTHONPATH"}
    probe = subprocess.run(
        [REFERENCE, "-c", "import importlib.metadata as m; print(m.version('pydftracer'))"],
        capture_output=True, text=True, env=env, cwd="/")
    if probe.returncode != 0 or probe.stdout.strip() != "2.0.6":
        pytest.fail(f"DFTRACER_REFERENCE_PYTHON={REFERENCE} has no pydftracer 2.0.6 "
                    f"({probe.stdout.strip() or probe.stderr.strip()[-300:]})")
    return REFERENCE


@pytest.mark.parametrize("inc_metadata", ["1", "0"])
def test_fresh_reference_trace_is_valid(tmp_path, inc_metadata):
    python = _reference_python()
    if python is None:
        pytest.skip("DFTRACER_REFERENCE_PYTHON is not set: `make test` builds the reference "
                    "(pydftracer 2.0.6, dftracer 2.2.0) and sets it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")
           and k != "PYTHONPATH"}
    env.update(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA=inc_metadata)
    subprocess.run([python, PROGRAM, str(tmp_path / "trace"), str(tmp_path / "data")],
                   env=env, cwd=str(tmp_path), check=True, capture_output=True, timeout=120)
    (path,) = glob.glob(str(tmp_path / "trace-*.pfw.gz"))
    check_reference_file(path, inc_metadata == "1")


def test_merge_and_view_rewrite_reference_traces_into_dftracer_format(tmp_path):
    """merge gives 2.x's events a string ph and their metadata an id, resolves
    their hashes, and the result is a valid merge output; view serves that."""
    out = tmp_path / "merged.pfw"
    proc = cli("merge", WITH_ARGS, WITHOUT_ARGS, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "["
    events = [json.loads(line) for line in lines[1:]]
    assert all(e["ph"] in ("X", "M") and isinstance(e["id"], int) for e in events)
    assert len({e["id"] for e in events}) == len(events)
    names = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert len(names) == 2 and all("[host " in n and "host ?" not in n for n in names)
    sent = [e for e in events if e["name"] == "sendfile64" and "args" in e]
    assert len(sent) == 2 and all(e["args"]["file"].endswith("/data/b.bin") for e in sent)
    assert not any(k.endswith("hash") for e in events for k in e.get("args", {}))
    rc, (r,) = validate(out)
    assert rc == 0 and r["format"] == "dftracer-merged", r
    # dftracer view serves such a merge, not the 2.x file as it is
    import urllib.request
    from test_view import Viewer

    with Viewer(WITH_ARGS, "--no-browser") as v:
        with urllib.request.urlopen(v.trace_url, timeout=10) as resp:
            body = resp.read()
        v.stop()
    text = gzip.decompress(body).decode()
    assert text.startswith("[\n") and '"ph":1' not in text and '"ph":"X"' in text


# ---- dftracer 2.x fork children: rule 4 across a child and its ancestors ----

HASH_KEYS = ("hhash", "fhash", "cmd_hash", "exec_hash", "cwd")


def hash_tables(path):
    """(pid, ppid, hashes defined, hashes used) of a 2.x file, read here
    with json: what validate must find on its own."""
    pid = ppid = None
    defined, used = set(), set()
    for line in sample_lines(path):
        e = json.loads(line)
        pid = e["pid"] if pid is None else pid
        args = e.get("args", {})
        if e["name"] in ("HH", "FH", "SH") and e["ph"] == 4:
            defined.add(args["value"])
        if e["name"] == "start":
            ppid = args["ppid"]
        used.update(v for k, v in args.items() if k in HASH_KEYS or k.endswith("hash"))
    return pid, ppid, defined, used


def fork_tree(folder):
    """{path: (pid, ppid, defined, used)} of a fork_tree.py run's files, and
    the path of its parent (the -app file)."""
    files = {p: hash_tables(p) for p in sorted(glob.glob(os.path.join(folder, "trace-*.pfw.gz")))}
    (app,) = [p for p in files if p.endswith("-app.pfw.gz")]
    return files, app


def check_fork_tree(folder):
    files, app = fork_tree(folder)
    assert len(files) == 4  # parent, fork child, grandchild, multiprocessing worker
    by_pid = {t[0]: p for p, t in files.items()}
    rc, results = validate(folder)
    assert rc == 0, results
    for r in results:
        pid, ppid, defined, used = files[r["path"]]
        assert (r["verdict"], r["format"], r["problem_count"]) == ("ok", "dftracer-2.x", 0), r
        assert (r["pid"], r["ppid"]) == (pid, ppid)
        assert "undefined_hashes" not in r
        inherited = used - defined
        assert r["undefined"] == r["inherited"] == len(inherited)
        if r["path"] == app:
            assert not inherited and r["ancestors"] == []
            continue
        assert r["path"].endswith("-fork.pfw.gz") and inherited  # the case of issue 67
        # the walk goes parent by parent up to the file that defines them
        chain, p = [], r["path"]
        while p != app:
            p = by_pid[files[p][1]]
            chain.append(p)
        assert [a["path"] for a in r["ancestors"]] == chain
        assert sum(a["hashes"] for a in r["ancestors"]) == len(inherited)
        assert inherited <= files[app][2]
    grandchild = next(r for r in results if len(r["ancestors"]) == 2)
    assert grandchild["ancestors"][0]["hashes"] == 0  # its parent had them from the app too
    text = cli("validate", folder).stdout.splitlines()
    child = next(ln for ln in text if "-fork.pfw.gz" in ln and "its parent's file" in ln)
    assert child.startswith("OK         ") and f"its parent's file {app} (pid " in child
    return files, app


def test_reference_fork_children_validate_with_their_parent():
    check_fork_tree(FORK_SAMPLES)


def test_fork_child_alone_finds_its_parent_beside_it_or_says_it_is_missing(tmp_path):
    files, app = fork_tree(FORK_SAMPLES)
    child = next(p for p, t in files.items() if t[1] == files[app][0])
    # given alone, its parent's file is found beside it and read
    rc, (r,) = validate(child)
    assert rc == 0 and r["verdict"] == "ok" and r["ancestors"][0]["path"] == app, r
    # copied away from its parent: a warning naming the parent's pid, exit 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(child, alone)
    copy = str(alone / os.path.basename(child))
    rc, (r,) = validate(copy)
    assert rc == 0 and r["verdict"] == "parent-missing" and r["problem_count"] == 0, r
    assert r["parent_missing"] == {"pid": files[app][0], "child": copy,
                                   "hashes": len(files[child][3] - files[child][2])}
    line = cli("validate", copy).stdout
    assert line.startswith(f"NO PARENT  {copy}: dftracer 2.x trace") and \
        f"the file of pid {files[app][0]} (its parent) is neither among the files given nor " \
        "beside it" in line, line
    # the grandchild beside its parent only: the hashes are the grandparent's
    by_pid = {t[0]: p for p, t in files.items()}
    grand = next(p for p, t in files.items() if by_pid.get(t[1], app) != app)
    two = tmp_path / "two"
    two.mkdir()
    for p in (grand, by_pid[files[grand][1]]):
        shutil.copy(p, two)
    rc, results = validate(two)
    assert rc == 0 and {r["verdict"] for r in results} == {"parent-missing"}, results
    g = next(r for r in results if r["path"].endswith(os.path.basename(grand)))
    assert g["parent_missing"]["pid"] == files[app][0]
    assert f"(the parent of {os.path.basename(by_pid[files[grand][1]])})" in \
        cli("validate", str(two / os.path.basename(grand))).stdout


def write_gz(path, lines):
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return str(path)


def test_a_hash_defined_nowhere_is_still_invalid(tmp_path):
    """A fork child whose parent is there but defines no such hash, and a
    file that is no fork child with a hash it never defines, break rule 4."""
    files, app = fork_tree(FORK_SAMPLES)
    child = next(p for p, t in files.items() if t[1] == files[app][0])
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(app, d)
    lines = sample_lines(child)
    k = next(i for i, ln in enumerate(lines) if '"fhash":"' in ln)
    fhash = json.loads(lines[k])["args"]["fhash"]
    lines[k] = lines[k].replace(fhash, "00000000deadbeef")
    bad = write_gz(d / os.path.basename(child), lines)
    rc, results = validate(str(d))
    assert rc == 1
    r = next(r for r in results if r["path"] == bad)
    assert r["verdict"] == "invalid" and r["inherited"] == r["undefined"] - 1, r
    assert r["problems"] == ["1 hash values used but never defined, in it nor in its "
                             "ancestors' files (rule 4: every hash defined once)"]
    assert next(r for r in results if r["path"] != bad)["verdict"] == "ok"
    # the parent itself with a definition taken out: no ancestor can help it
    lines = [ln for ln in sample_lines(app) if '"name":"FH"' not in ln or "shared.bin" not in ln]
    r = broken(tmp_path, lines, "trace-0000000000000000-app.pfw.gz")
    assert r["problems"] == ["1 hash values used but never defined (rule 4: every hash "
                             "defined once)"] and r["ancestors"] == []
    # a child renamed so that it is no "-fork" file: alone, nothing says the
    # hashes are a parent's
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(child, lonely / "trace-1-app.pfw.gz")
    rc, (r,) = validate(lonely / "trace-1-app.pfw.gz")
    assert rc == 1 and r["verdict"] == "invalid" and "(rule 4: every hash defined once)" in \
        r["problems"][0], r
    # a "parent" that started after the child is another process with the pid
    late = tmp_path / "late"
    late.mkdir()
    start = json.loads(next(ln for ln in sample_lines(app) if '"name":"start"' in ln))["ts"]
    write_gz(late / os.path.basename(app),
             [ln.replace(f'"ts":{start},', f'"ts":{start + 10**9},') for ln in sample_lines(app)])
    shutil.copy(child, late)
    rc, results = validate(late)
    verdicts = {os.path.basename(r["path"]): r["verdict"] for r in results}
    assert rc == 0 and verdicts == {os.path.basename(app): "ok",
                                    os.path.basename(child): "parent-missing"}, results


def test_own_files_keep_rule_4_per_file(tmp_path):
    """dftracer's own files define every hash they use, a fork child's
    included: one that does not is invalid whatever is beside it."""
    d = tmp_path / "ours"
    d.mkdir()
    (path,) = write_project_traces(d, ranks=(None,))
    lines = read_lines(path)
    k = next(i for i, ln in enumerate(lines) if '"name":"FH"' in ln)
    r = broken(tmp_path, lines[:k] + lines[k + 1:-1], "nofh-fork.pfw.gz")
    assert r["format"] == "dftracer" and "undefined_hashes" not in r
    assert "1 hash values used but never defined (rule 4: every hash defined once)" in \
        r["problems"], r["problems"]


def test_fresh_reference_fork_children_are_valid(tmp_path):
    python = _reference_python()
    if python is None:
        pytest.skip("DFTRACER_REFERENCE_PYTHON is not set: `make test` builds the reference "
                    "(pydftracer 2.0.6, dftracer 2.2.0) and sets it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")
           and k != "PYTHONPATH"}
    env.update(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1")
    run = tmp_path / "run"
    run.mkdir()
    subprocess.run([python, FORK_PROGRAM, str(run / "trace"), str(run / "data")],
                   env=env, cwd=str(run), check=True, capture_output=True, timeout=120)
    files, app = check_fork_tree(str(run))
    # each child alone, away from its parent: a warning, never INVALID
    for p in files:
        if p == app:
            continue
        alone = tmp_path / os.path.basename(p)
        alone.mkdir()
        shutil.copy(p, alone)
        rc, (r,) = validate(alone)
        assert rc == 0 and r["verdict"] == "parent-missing", r
