"""The rank of a process (docs/trace-format.md "Rank"), read by both readers
from one table of cases: the C summary (`dftracer summary --json`,
src/reader/summary.c) and merge's scan (the ranks pass's `own_rank`, seen in
the process labels `merge` writes), both through src/reader/identity.c."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tracefile import find_traces, read_lines, run_python

# process_name -> the rank it carries (None: none)
PROCESS_NAMES = [
    ("python rank 3", 3),
    ("rank 3", 3),
    ("x rank 12", 12),
    ("train.py rank 0", 0),
    ("my script.py rank 7", 7),
    ("rank 5.py rank 2", 2),
    ("python rank 007", 7),
    ("rank 2147483647", 2147483647),
    ("frank 3", None),
    ("python_rank 3", None),
    ("--rank 3", None),
    ("rank 3x", None),
    ("RANK 3", None),
    ("Rank 3", None),
    ("rank -1", None),
    ("rank +1", None),
    ("rank  3", None),
    ("x\trank 3", None),
    ("rank 3 ", None),
    ("rank", None),
    ("rank ", None),
    ("python", None),
    ("", None),
    ("python rank 3 [host h, pid 7, rank 3]", None),
    ("rank 2147483648", None),
    ("rank 99999999999999999999999", None),
    ("rank \u0663", None),  # an Arabic-Indic digit three
    ("x" * 600 + " rank 4", 4),  # longer than the 511 bytes the readers keep of a name
]

# `rank` metadata events after a process_name of rank 1 -> the rank read
RANK_EVENTS = [
    ([3], 3),
    (["3"], 3),
    ([0], 0),
    ([4, 6], 6),
    (["-1"], 1),
    ([-1], 1),
    (["3x"], 1),
    ([3.0], 1),
    ([True], 1),
    ([2147483648], 1),
    ([None], 1),
]

CASES = ([(name, [], want) for name, want in PROCESS_NAMES]
         + [("python rank 1", values, want) for values, want in RANK_EVENTS]
         + [("python rank 1", ["first", 5], 5)])  # a rank event before the process_name wins too


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, timeout=120)


def write_case(path: str, pid: int, process_name: str, values: list) -> None:
    def meta(i: int, name: str, args: dict) -> str:
        return json.dumps({"id": i, "name": name, "cat": "dftracer", "pid": pid, "tid": pid,
                           "ph": "M", "args": args})

    first = values[:1] == ["first"]
    events = [meta(2, "PR", {"name": "rank", "value": v}) for v in values if v != "first"]
    head = [meta(1, "HH", {"name": "host", "value": "1"})]
    name = meta(3, "process_name", {"name": process_name, "value": "process_name"})
    lines = head + (events + [name] if first else [name] + events)
    lines.append(json.dumps({"id": 9, "name": "work", "cat": "app", "pid": pid, "tid": pid,
                             "ts": 10, "dur": 5, "ph": "X", "args": {}}))
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n" + "\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def ranks_read(tmp_path_factory):
    """{pid: (rank from summary, rank from merge's scan)} for one file per case."""
    d = tmp_path_factory.mktemp("ranks")
    files = []
    for k, (name, values, _) in enumerate(CASES):
        files.append(str(d / f"case-{k:03d}.pfw"))
        write_case(files[-1], 1000 + k, name, values)
    proc = cli("summary", *files, "--json", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    summary = {p["pid"]: p["rank"] for p in json.loads(proc.stdout)["processes"]}
    out = str(d / "merged.pfw.gz")
    proc = cli("merge", *files, "-o", out, "-j", "1")
    assert proc.returncode == 0, proc.stderr
    merged = {}
    for line in filter(None, read_lines(out)[1:]):
        ev = json.loads(line)
        if ev["name"] == "process_name":
            # docs/cli.md: `<exec> [host H, pid P, rank R]`, no rank part without one
            m = re.search(r"\[host [^,\]]*, pid (\d+)(?:, rank (\d+))?\]$", ev["args"]["name"])
            assert m, ev["args"]["name"]
            merged[int(m.group(1))] = int(m.group(2)) if m.group(2) else None
    assert len(summary) == len(merged) == len(CASES)
    return {pid: (summary[pid], merged[pid]) for pid in summary}


@pytest.mark.parametrize("k", range(len(CASES)),
                         ids=[f"{n!r}+{v}" if v else repr(n) for n, v, _ in CASES])
def test_both_readers_read_the_same_rank(ranks_read, k):
    _, _, want = CASES[k]
    assert ranks_read[1000 + k] == (want, want)


def test_the_tracer_writes_a_name_the_rule_reads(tmp_path):
    """RANK as torchrun sets it, through a real traced process."""
    run_python("from dftracer.python import dftracer\n"
               f"log = dftracer.initialize_log({str(tmp_path / 'trace')!r}, None, -1)\n"
               "log.log_event('work', 'app', log.get_time(), 5)\nlog.finalize()\n",
               env={"DFTRACER_ENABLE": "1", "RANK": "12"}, cwd=str(tmp_path))
    (path,) = find_traces(str(tmp_path))
    proc = cli("summary", path, "--json")
    assert proc.returncode == 0, proc.stderr
    (p,) = json.loads(proc.stdout)["processes"]
    assert p["process_name"].endswith(" rank 12") and p["rank"] == 12
