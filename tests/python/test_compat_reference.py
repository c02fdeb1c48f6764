"""Same program, equivalent trace: tests/python/compat/program.py (decorators, the ai
tree, log_event, metadata) and tests/python/compat/program_torch.py (torch.profiler
with trace_handler, a function compiled with the Dynamo backend) run under
pydftracer 2.0.6 over dftracer 2.2.0 and under dftracer; the events must carry
the same names, categories and args keys, apart from the differences
docs/compat.md documents (KNOWN below).

The reference runs in its own interpreter, DFTRACER_REFERENCE_PYTHON: a
python that has ``pydftracer==2.0.6 dftracer==2.2.0`` installed, which
`make test` builds once (build/reference-venv) and sets.  Without the
variable the tests are skipped, saying so; with an unusable one they fail.
The torch program runs the reference with this interpreter's torch on its
PYTHONPATH (same Python version needed), so the reference venv needs no torch.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(ROOT, "tests", "python", "compat", "program.py")
REFERENCE = os.environ.get("DFTRACER_REFERENCE_PYTHON")  # `make test` builds and sets it
TRACER_KEYS = {"hhash", "level", "p_idx"}
PROGRAM_METADATA = {"train.start", "train.end", "run"}

# (name, cat) -> args keys dftracer writes beyond pydftracer's, each a row of
# docs/compat.md.
KNOWN = {
    # "Arguments given to a decorator call": pydftracer put them on the node,
    # not on the decorated function's events.
    ("backward", "compute"): {"layers", "lr", "opt"},
    # "A node called without a function (with node(...), node.init())":
    # pydftracer returned a fresh node without the values update() had set.
    ("all_reduce.init", "comm"): {"epoch"},
}
# (name, cat) -> args keys pydftracer writes and dftracer does not.
KNOWN_MISSING = {
    # "Arguments of one decorated function leaking into another's events":
    # pydftracer's dft_fn kept one args dict for all functions it decorates.
    ("Loader.__init__", "IO"): {"epoch", "step"},
}


def _reference_python():
    """The reference interpreter, or None when none is named (the test skips);
    one that is named but unusable fails the test: `make test` names the one
    it built (build/reference-venv), so there the comparison always runs."""
    if not REFERENCE:
        return None
    if not os.path.exists(REFERENCE):
        pytest.fail(f"DFTRACER_REFERENCE_PYTHON={REFERENCE}: no such file")
    # From "/": a checkout's own metadata in the working directory would answer.
    probe = subprocess.run(
        [REFERENCE, "-c", "import importlib.metadata as m; print(m.version('pydftracer'))"],
        capture_output=True, text=True, env=_clean_env(), cwd="/")
    if probe.returncode != 0 or probe.stdout.strip() != "2.0.6":
        pytest.fail(f"DFTRACER_REFERENCE_PYTHON={REFERENCE} has no pydftracer 2.0.6 "
                    f"({probe.stdout.strip() or probe.stderr.strip()[-300:]})")
    return REFERENCE


# Ours runs with this interpreter's PYTHONPATH (an in-place or sanitized build
# is found through it; an installed wheel needs none): the reference never.
OURS = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


def _clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("DFTRACER_") and k != "PYTHONPATH"}


def _run(python, directory, extra_env, program=PROGRAM):
    env = {**_clean_env(), "DFTRACER_ENABLE": "1", **extra_env}
    subprocess.run([python, program, os.path.join(directory, "trace.pfw")], env=env,
                   cwd=directory, check=True, capture_output=True, text=True, timeout=300)
    (path,) = glob.glob(os.path.join(directory, "trace*.pfw*"))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip() not in ("", "[", "]")]
    events = collections.Counter()
    metadata = collections.Counter()
    # dftracer 2.2.0 writes numeric phases ("ph":1); this project "X": tells
    # the two runs apart, so neither can silently be the other.
    events[("<numeric ph>", "", frozenset())] = int(any(ev["ph"] == 1 for ev in lines))
    for ev in lines:
        if ev["ph"] in ("X", 1) and ev["cat"] != "dftracer":
            keys = frozenset(set(ev.get("args", {})) - TRACER_KEYS)
            events[(ev["name"], ev["cat"], keys)] += 1
        elif ev["ph"] in ("M", 4) and ev["name"] == "CM" and ev["args"]["name"] in PROGRAM_METADATA:
            metadata[ev["args"]["name"]] += 1
    return events, metadata


def _normalize(events, adjust):
    out = collections.Counter()
    for (name, cat, keys), n in events.items():
        out[(name, cat, frozenset(keys - adjust.get((name, cat), set())))] += n
    return out


def test_same_program_equivalent_trace(tmp_path):
    reference = _reference_python()
    if reference is None:
        pytest.skip("DFTRACER_REFERENCE_PYTHON is not set: `make test` builds the reference "
                    "(pydftracer 2.0.6, dftracer 2.2.0) and sets it")
    (tmp_path / "ref").mkdir()
    (tmp_path / "ours").mkdir()
    # dftracer 2.2.0 writes args only with DFTRACER_INC_METADATA=1.
    ref_events, ref_meta = _run(reference, str(tmp_path / "ref"), {"DFTRACER_INC_METADATA": "1"})
    our_events, our_meta = _run(sys.executable, str(tmp_path / "ours"), OURS)
    assert ref_events.pop(("<numeric ph>", "", frozenset())) == 1
    assert our_events.pop(("<numeric ph>", "", frozenset())) == 0
    assert sum(ref_events.values()) > 30
    assert _normalize(our_events, KNOWN) == _normalize(ref_events, KNOWN_MISSING)
    assert our_meta == ref_meta


PROGRAM_TORCH = os.path.join(ROOT, "tests", "python", "compat", "program_torch.py")
# Documented differences of the torch integrations (docs/compat.md,
# docs/torch-profiler.md, docs/dynamo.md): extra args keys by category, our
# per-call span of a compiled function, Kineto's step names.
TORCH_EXTRA_KEYS = {"PP": {"device_index", "flops"}, "dynamo": {"graph", "phase"}}
TORCH_EXTRA_EVENTS = {("step", "dynamo")}


def _torch_normalize(events, ours):
    out = collections.Counter()
    for (name, cat, keys), n in events.items():
        if ours and (name, cat) in TORCH_EXTRA_EVENTS:
            continue
        if ours:
            keys = keys - TORCH_EXTRA_KEYS.get(cat, set())
            name = re.sub(r"^ProfilerStep#\d+$", "ProfilerStep*", name)
        out[(name, cat, frozenset(keys))] += n
    return out


def test_same_torch_program_equivalent_trace(tmp_path):
    torch = pytest.importorskip("torch")
    reference = _reference_python()
    if reference is None:
        pytest.skip("DFTRACER_REFERENCE_PYTHON is not set: `make test` builds the reference "
                    "(pydftracer 2.0.6, dftracer 2.2.0) and sets it")
    version = subprocess.run([reference, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, env=_clean_env(),
                             cwd="/").stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"the reference python is {version}; this torch needs {sys.version_info[:2]}")
    # torch for the reference, from this interpreter's site-packages, but not
    # our own dftracer installed there (it would shadow pydftracer's).
    site = tmp_path / "site"
    site.mkdir()
    torch_site = os.path.dirname(os.path.dirname(torch.__file__))
    for entry in os.listdir(torch_site):
        if not entry.lower().startswith("dftracer"):
            os.symlink(os.path.join(torch_site, entry), site / entry)
    site = str(site)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ours").mkdir()
    ref_events, _ = _run(reference, str(tmp_path / "ref"),
                         {"DFTRACER_INC_METADATA": "1", "PYTHONPATH": site}, PROGRAM_TORCH)
    our_events, _ = _run(sys.executable, str(tmp_path / "ours"), OURS,
                         PROGRAM_TORCH)
    assert ref_events.pop(("<numeric ph>", "", frozenset())) == 1
    assert our_events.pop(("<numeric ph>", "", frozenset())) == 0
    ref = _torch_normalize(ref_events, ours=False)
    assert {cat for _, cat, _ in ref} == {"PP", "dynamo"}
    assert _torch_normalize(our_events, ours=True) == ref
