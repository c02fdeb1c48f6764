"""`dftracer validate` tells the formats it reads apart (docs/trace-format.md,
"Valid files"): dftracer's own files and merge's output (strict rules), and
the files pydftracer 2.0.6 over dftracer 2.2.0 writes (the reference; their
own rules).  Each problem names the rule it breaks.

The 2.x samples in tests/tools/reference/ were written by the reference running
tests/tools/reference/program.py (DFTRACER_INC_METADATA=1 and 0).  When the
reference is named (DFTRACER_REFERENCE_PYTHON: a python with
pydftracer==2.0.6 dftracer==2.2.0, which `make test` builds once into
build/reference-venv and sets), a fresh pair is made and checked too.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess

import pytest

from test_cli import cli, write_project_traces
from tracefile import read_lines

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "reference")
PROGRAM = os.path.join(SAMPLES, "program.py")
WITH_ARGS = os.path.join(SAMPLES, "pydftracer-2.0.6-metadata.trace.gz")
WITHOUT_ARGS = os.path.join(SAMPLES, "pydftracer-2.0.6-no-metadata.trace.gz")
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
