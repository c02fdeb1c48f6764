"""tests/torch_integration/ddp_script.py run under `dftracer run -- torchrun` once per test
session (test helper: tests/torch_integration/test_autotrace.py checks its
traces, tests/tools/test_perfetto_browser.py opens their merge)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from tracefile import Trace, find_traces, read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "tests", "torch_integration", "ddp_script.py")
RANKS, STEPS = 4, 3
_RANK = re.compile(r" rank (\d+)$")


def clean_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(extra)
    return env


def torchrun() -> List[str]:
    """torchrun next to this interpreter, else its module."""
    script = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-m", "torch.distributed.run"]


def ddp_command() -> List[str]:
    return torchrun() + ["--standalone", "--nproc_per_node", str(RANKS), EXAMPLE,
                         "--steps", str(STEPS)]


@dataclass
class DDPRun:
    directory: str
    stdout: str
    command: Trace
    ranks: Dict[int, Trace] = field(default_factory=dict)
    workers: Dict[int, List[Trace]] = field(default_factory=dict)
    paths: List[str] = field(default_factory=list)


def process_rank(trace: Trace) -> Optional[int]:
    (meta,) = trace.of("M", name="process_name")
    m = _RANK.search(meta["args"]["name"])
    return int(m.group(1)) if m else None


_cache: Dict[str, DDPRun] = {}


def ddp_run(directory: str) -> DDPRun:
    """Runs the example once (later calls return the same run)."""
    if "run" in _cache:
        return _cache["run"]
    os.makedirs(directory, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "--json", "--log-file",
                           os.path.join(directory, "ddp"), "--"] + ddp_command(),
                          cwd=directory, env=clean_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    paths = find_traces(directory, "ddp")
    command_pid = json.loads(proc.stderr.splitlines()[-1])["pid"]
    run = DDPRun(directory, proc.stdout, command=None, paths=paths)  # type: ignore[arg-type]
    for path in paths:
        trace = read_trace(path)
        pid = trace.of("X", cat="dftracer", name="start")[0]["pid"]
        rank = process_rank(trace)
        if pid == command_pid:
            run.command = trace
        elif trace.of(cat="dataloader"):
            assert rank is not None and rank not in run.ranks, path
            run.ranks[rank] = trace
        else:
            run.workers.setdefault(rank, []).append(trace)  # type: ignore[arg-type]
    _cache["run"] = run
    return run
