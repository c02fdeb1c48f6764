"""Every ```python and ```bash block of README.md, run as written, in order,
in one temporary directory: what a newcomer copying them would get; then
every command of docs/ (a ```bash block, or the `$ ` lines of a sample
session) in the same directory, on what the README's commands left there.

- A python block whose first line is `# NAME.py` is the file the README asks
  to save: it is written as NAME.py (the bash blocks after it run it).  Other
  python blocks run as they are, with DFTRACER_ENABLE=1.
- bash blocks run under `bash -e` with `python`, `dftracer`, `pip` and
  `make` on PATH: `python` is this interpreter, `dftracer` its command line
  from this checkout, `pip` a stand-in that checks each requirement names this
  project and extras it declares (nothing is downloaded), `make` a dry run
  (`make -n`) of the repository's Makefile (the Quick start targets set up a
  venv and run this very suite).
- `dftracer view` serves until Ctrl-C: the block runs until the trace is
  served, the trace URL is fetched, then it gets SIGINT.
- Blocks that need torch (or a file such a block wrote) skip without torch;
  `dftracer report` blocks skip without plotly (the `report` extra).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tracefile import find_traces, read_trace

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# The distribution's name in the README's install lines, until the rename
# lands: the stand-in pip accepts it as the name in pyproject.toml.
PLACEHOLDER = "DISTNAME"

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks():
    text = README.read_text()
    out = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang in ("python", "bash"):
            line = text.count("\n", 0, m.start()) + 1
            out.append((line, lang, body))
    return out


BLOCKS = blocks()


def doc_blocks():
    """(page, line, commands) of each docs/ page's ```bash blocks and sample
    sessions (the `$ ` lines of a block; their output lines are left out)."""
    out = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        for m in FENCE.finditer(text):
            lang, body = m.group(1), m.group(2)
            cmds = [ln[2:] for ln in body.splitlines() if ln.startswith("$ ")]
            if lang == "bash" or cmds:
                line = text.count("\n", 0, m.start()) + 1
                out.append((f"docs/{page.name}", line, body if lang == "bash" else "\n".join(cmds)))
    return out


DOC_BLOCKS = doc_blocks()
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_PLOTLY = importlib.util.find_spec("plotly") is not None


def file_name(body: str):
    m = re.match(r"#\s*(\w+\.py)\s*$", body.splitlines()[0]) if body.strip() else None
    return m.group(1) if m else None


PIP = r'''#!{python}
"""pip stand-in for the README test: checks `pip install NAME[extras]...`."""
import re, sys
try:
    import tomllib
except ImportError:
    tomllib = None
args = sys.argv[1:]
if not args or args[0] != "install":
    sys.exit("pip stand-in: only 'pip install' is expected in README.md: %r" % args)
text = open({pyproject!r}).read()
name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M).group(1)
extras = set(re.findall(r'^(\w+)\s*=\s*\[', text.split("[project.optional-dependencies]")[1]
                        .split("\n[")[0], re.M))
for req in args[1:]:
    if req.startswith("-"):
        sys.exit("pip stand-in: unexpected option %s" % req)
    m = re.fullmatch(r"([A-Za-z0-9_./-]+)(?:\[([\w,]+)\])?", req)
    if not m:
        sys.exit("pip stand-in: not a requirement: %r" % req)
    what = m.group(1)
    dist = name.replace("-", "_")
    # the project's name, a clone's root, or what `make wheel` writes to dist/
    built = re.fullmatch(r"dist/%s-[0-9][^/]*(?:\.whl|\.tar\.gz)" % re.escape(dist), what)
    if what not in (name, {placeholder!r}, ".") and not built:
        sys.exit("pip stand-in: %s is not this project (%s)" % (what, name))
    for extra in (m.group(2) or "").split(","):
        if extra and extra not in extras:
            sys.exit("pip stand-in: %s has no extra %r (it has %s)" % (name, extra,
                                                                      sorted(extras)))
print("pip stand-in: would install", " ".join(args[1:]))
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    bin_dir = d / ".bin"
    bin_dir.mkdir()
    tools = {
        "python": f'#!/bin/sh\nexec {sys.executable} "$@"\n',
        "dftracer": f'#!/bin/sh\nexec {sys.executable} -m dftracer "$@"\n',
        "torchrun": f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n',
        "make": f'#!/bin/sh\nexec {shutil.which("make") or "false"} -n -C {ROOT} "$@"\n',
        "pip": PIP.format(python=sys.executable, pyproject=str(ROOT / "pyproject.toml"),
                          placeholder=PLACEHOLDER),
        "torchrun": f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n',
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # the README's folder of one's own, in a clone: its examples are ../examples
    clone = d / "clone"
    work = clone / "try"
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "examples", clone / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               BROWSER="true")  # dftracer view opens no browser here
    return {"dir": work, "env": env, "skipped_files": set()}


def needs(body: str, lang: str, state) -> str:
    """Why the block cannot run here, or ''."""
    uses_torch = lang == "python" and re.search(r"^\s*(import torch|from torch)", body, re.M)
    if (uses_torch or "torchrun" in body) and not HAS_TORCH:
        return "torch is not installed"
    for f in state["skipped_files"]:
        if f in body:
            return f"{f} was not written (its block was skipped)"
    if re.search(r"^\s*dftracer report ", body, re.M) and not HAS_PLOTLY:
        return "the report extra (plotly) is not installed"
    if re.search(r"^\s*dftracer view ", body, re.M):
        help_ = subprocess.run(["dftracer", "view", "--help"], env=state["env"],
                               capture_output=True, text=True)
        if help_.returncode != 0:
            return "this checkout has no `dftracer view` yet"
    return ""


def run_view(body: str, state):
    proc = subprocess.Popen(["bash", "-e", "-c", body], cwd=state["dir"], env=state["env"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 120
        url = None
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"http://127\.0\.0\.1:\d+/\S*", line)
            if m:
                url = m.group(0)
        assert url, "".join(seen)
        base = re.match(r"http://127\.0\.0\.1:\d+", url).group(0)
        m = re.search(r"url=([^&\s]+)", "".join(seen))
        trace_url = urllib.request.unquote(m.group(1)) if m else base + "/trace"
        with urllib.request.urlopen(trace_url, timeout=30) as r:
            data = r.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        assert b'"ph"' in data[:4096]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode in (0, 130, -signal.SIGINT), "".join(seen)


def check_after(body: str, state, output: str):
    """What a block promises, checked on what it left behind."""
    work = state["dir"]
    assert "Traceback" not in output, output
    for out in re.findall(r"-o (\S+\.html)", body):
        html = (work / out).read_text()
        assert "Plotly.newPlot" in html
    if "python first.py" in body:
        paths = find_traces(str(work / "traces"), "first")
        assert len(paths) == 1
        assert f"trace: traces/{os.path.basename(paths[0])}" in output
        t = read_trace(paths[0])
        assert len(t.of(name="forward")) == 16 and len(t.of(name="train.block")) == 16
        assert any(e["cat"] == "POSIX" for e in t.user_events())
    if "examples/ddp_train.py" in body:  # 4 ranks, 2 DataLoader workers each, all saying their rank
        paths = find_traces(str(work / "runs" / "ddp"))
        ranks = sorted(e["args"]["value"] for p in paths for e in read_trace(p).events
                       if e["ph"] == "M" and e["name"] == "rank" and e["args"]["source"] == "RANK")
        assert ranks == sorted(list(range(4)) * 3), ranks
        assert "Ranks: 4 ranks on 1 host" in output
    elif "dftracer run --data-dir" in body:
        paths = find_traces(str(work / "runs"), "train")
        assert len(paths) >= 3  # the script and its two DataLoader workers
        assert f"{len(paths)} trace files (one per process) in runs/" in output
        root = int(re.search(r"pid (\d+)  \(the command\)", output).group(1))
        readers = {e["pid"] for p in paths for e in read_trace(p).user_events()
                   if e["cat"] == "POSIX" and e["name"] in ("read", "pread64", "read64")}
        assert readers and root not in readers  # the workers read the samples
    if "runs/steps" in body:  # torch events of the unchanged train.py
        traces = [read_trace(p) for p in find_traces(str(work / "runs"), "steps")]
        main = [t for t in traces if t.of(cat="dataloader")]
        assert len(main) == 1 and len(traces) == 3  # the script, its two workers
        assert [e["args"]["step"] for e in main[0].of(name="iteration")] == list(range(8))
        assert len(main[0].of(cat="compute", name="optimizer.step")) == 8
        assert sum(len(t.of(cat="data", name="item")) for t in traces) == 256
        assert "iteration" in output and "fetch" in output
    if "--log-file runs/ddp --" in body:  # the unchanged DDP script
        ranks = [t for t in map(read_trace, find_traces(str(work / "runs"), "ddp"))
                 if t.of(cat="dataloader")]
        assert len(ranks) == 4
        for t in ranks:  # 512 samples / 4 ranks / 32 per batch
            assert [e["args"]["step"] for e in t.of(name="iteration")] == list(range(4))
            assert [e["args"]["module"] for e in t.of(name="backward")] == [
                "DistributedDataParallel"] * 4
            comm = t.of(cat="comm", name="all_reduce")
            assert sum("ddp_bucket" in e["args"] for e in comm) == 4
            # one numbering: each step's bucket, then the script's all_reduce
            assert sorted(e["args"]["seq"] for e in comm if "ddp_bucket" in e["args"]) == [0, 2, 4, 6]
            assert [e["args"]["seq"] for e in comm if "ddp_bucket" not in e["args"]] == [1, 3, 5, 7]
    if "python profiled.py" in body:
        (path,) = find_traces(str(work / "traces"), "profiled")
        steps = {e["name"] for e in read_trace(path).of(cat="PP") if
                 e["name"].startswith("ProfilerStep#")}
        assert steps == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}
    if "python compiled.py" in body:
        (path,) = find_traces(str(work / "traces"), "compiled")
        assert any(e["name"].startswith("function.addmm") for e in read_trace(path).of(
            cat="dynamo"))
    if "dftracer summary" in body and "--json" in body:
        json.loads(output)


@pytest.mark.parametrize("line,lang,body", BLOCKS,
                         ids=[f"line{b[0]}-{b[1]}" + (f"-{file_name(b[2])}" if file_name(b[2])
                                                     else "") for b in BLOCKS])
def test_readme_block(line, lang, body, workdir):
    why = needs(body, lang, workdir)
    name = file_name(body) if lang == "python" else None
    if why:
        if name:
            workdir["skipped_files"].add(name)
        for stem in re.findall(r"--log-file (\S+)", body):  # what a skipped run would write
            workdir["skipped_files"].add(stem)
            if "/" in os.path.dirname(stem):  # a folder of its own (runs/ddp/trace)
                workdir["skipped_files"].add(os.path.dirname(stem))
        pytest.skip(f"README.md line {line}: {why}")
    work = workdir["dir"]
    if name:
        (work / name).write_text(body)
        proc = subprocess.run([sys.executable, "-m", "py_compile", name], cwd=work,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return
    if lang == "python":
        env = dict(workdir["env"], DFTRACER_ENABLE="1")
        proc = subprocess.run([sys.executable, "-c", body], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
    elif "dftracer view" in body:
        run_view(body, workdir)
        return
    else:
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=work,
                              env=workdir["env"], capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"README.md line {line}:\n{body}\n---\n{output}"
    check_after(body, workdir, output)


def _gpu_here() -> bool:
    try:
        from dftracer.python import cupti

        return bool(cupti.available())
    except Exception:
        return False


def doc_inputs(body: str, state) -> str:
    """Makes what a docs session reads but no command before it writes (two
    runs to diff, a crashed and an old-format trace to validate); why it
    cannot, or ''."""
    work = state["dir"]
    for run in ("monday", "tuesday"):
        if f"runs/{run}" in body and not (work / "runs" / run).is_dir():
            if not (work / "train.py").exists():
                return "the README's train.py was not written"
            proc = subprocess.run(["dftracer", "run", "-q", "--log-file", f"runs/{run}/trace", "--",
                                   "python", "train.py"], cwd=work, env=state["env"],
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    if "crashed/" in body and not (work / "crashed").is_dir():
        paths = find_traces(str(work / "traces"), "trace") or find_traces(str(work / "traces"), "first")
        if not paths:
            return "no trace in traces/ to crash"
        data = Path(paths[0]).read_bytes()
        (work / "crashed").mkdir()
        (work / "crashed" / "trace-vm-4242-app.pfw.gz").write_bytes(data[:len(data) * 2 // 3])
    if "old-run/" in body and not (work / "old-run").is_dir():
        (work / "old-run").mkdir()
        shutil.copy(ROOT / "tests" / "tools" / "reference" / "pydftracer-2.0.6-metadata.trace.gz",
                    work / "old-run" / "trace-2d3ce525343fa4e3-app.pfw.gz")
    return ""


@pytest.mark.parametrize("page,line,body", DOC_BLOCKS,
                         ids=[f"{b[0]}-line{b[1]}" for b in DOC_BLOCKS])
def test_docs_commands(page, line, body, workdir):
    """Each command of docs/, as written, after the README's (issue 52: a
    session that wrote no trace)."""
    if page == "docs/gpu.md" and not _gpu_here():
        pytest.skip(f"{page} line {line}: no GPU with CUPTI here")
    why = needs(body, "bash", workdir) or doc_inputs(body, workdir)
    if why:
        pytest.skip(f"{page} line {line}: {why}")
    if "dftracer view" in body:
        run_view(body, workdir)
        return
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=workdir["dir"],
                          env=workdir["env"], capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    # validate exits 1 when a file it names is not valid: the session shows one
    ok = (0, 1) if "dftracer validate" in body and "crashed/" in body else (0,)
    assert proc.returncode in ok, f"{page} line {line}:\n{body}\n---\n{output}"
    check_after(body, workdir, output)
    if "dftracer run -q --log-file traces/trace" in body:  # the short session's traces
        assert len(find_traces(str(workdir["dir"] / "traces"), "trace")) >= 3


def test_readme_blocks_cover_the_newcomer_path():
    """The commands the issue asks the README to show are all in run blocks."""
    text = "\n".join(b for _, _, b in BLOCKS)
    name = re.search(r'^name\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                     re.M).group(1)
    # the package index has no release yet: from a clone, and from a built wheel
    assert "pip install ." in text
    assert f"pip install dist/{name.replace('-', '_')}-" in text
    for needle in ("[report]", "make demo", "make test",
                   "python first.py", "dftracer summary", "dftracer report", "dftracer view",
                   "trace_handler", 'backend="dftracer"', "dftracer run", "-- python train.py",
                   "torchrun --standalone", "dftracer summary runs/ddp --ranks"):
        assert needle in text, needle
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    cmds = [ln.split("#")[0].strip() for b in FENCE.findall(quick) for ln in b[1].splitlines()]
    assert [c for c in cmds if c] == ["make demo", "make test"]
    for link in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (ROOT / link).exists(), link
