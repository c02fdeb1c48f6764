"""dftracer diff: what changed between two runs (docs/cli.md, "diff").

Synthetic jobs written through the tracer (every rank's steps, data waits,
forward and all_reduce, with seeded step-to-step noise) give exact
expectations; one real training job under `dftracer run` checks the whole
chain on torch's own events."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace, run_python

HERE = os.path.dirname(os.path.abspath(__file__))

WRITE = """
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
T = log.get_time() + 1000
for name, cat, ts, dur, ints in {events!r}:
    log.log_event(name, cat, T + ts, dur, int_args=ints,
                  string_args={{"group": "world"}} if cat == "comm" else None)
log.finalize()
"""


def job(directory, ranks=4, steps=40, seed=0, data_us=1000, compute_us=5000, io_us=0,
        slow_rank=None, slow_compute_us=0, noise=0.08, wait_us=None):
    """A synchronous job: each step, every rank waits for its batch (fetch),
    computes (forward), may read (POSIX read inside the fetch), then waits in
    the all_reduce for the slowest rank.  wait_us: each rank's forward also
    waits that long for a CPU (a busier machine), and its iterations carry
    their cpu_us and wait_us."""
    rng = random.Random(seed)
    per_rank = {r: [] for r in range(ranks)}
    t = 0
    for k in range(steps):
        parts = {}
        for r in range(ranks):
            d = int(data_us * (1 + noise * rng.uniform(-1, 1)))
            c = int(compute_us * (1 + noise * rng.uniform(-1, 1)))
            if r == slow_rank:
                c += slow_compute_us
            w = 0
            if wait_us is not None:
                w = int(wait_us * (1 + noise * rng.uniform(-1, 1)))
                c += w
            io = int(io_us * (1 + noise * rng.uniform(-1, 1)))
            parts[r] = (d + io, c, w)
        arrive = max(d + c for d, c, _ in parts.values())
        end = arrive + 100
        for r, (d, c, w) in parts.items():
            ev = per_rank[r]
            sched = {} if wait_us is None else {"cpu_us": d + c - w, "wait_us": w}
            ev.append(("iteration", "pipeline", t, end, {"step": k, "epoch": 0, **sched}))
            ev.append(("fetch", "dataloader", t, d, {"batch": k}))
            if io_us:
                ev.append(("read", "POSIX", t + 10, d - 20, {"ret": 4096}))
            ev.append(("forward", "compute", t + d, c, {}))
            ev.append(("all_reduce", "comm", t + d + c, end - d - c, {"seq": k, "bytes": 8}))
        t += end + 50
    directory.mkdir(parents=True, exist_ok=True)
    for r, events in per_rank.items():
        run_python(WRITE.format(stem=str(directory / "trace"), events=events),
                   {"DFTRACER_ENABLE": "1", "RANK": str(r), "WORLD_SIZE": str(ranks)})
    return str(directory)


def diff(base, new, *extra):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "diff", base, new, "--json",
                           *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def check_rows_add_up(d):
    """The main rows of each class add up to the class (docs/cli.md, "Names")."""
    for c in d["classes"]:
        for side in ("base_us_per_step", "new_us_per_step"):
            rows = sum(r[side] for r in d["changes"] if r["where"] == "main"
                       and r["cls"] == c["cls"])
            assert abs(rows - c[side]) <= 1 + 0.001 * c[side], (c, side, rows)


def significant(d):
    return sorted(c["cls"] for c in d["classes"] if c["significant"])


def test_data_wait_slowed_on_every_rank_is_the_change(tmp_path):
    base = job(tmp_path / "base", seed=1)
    new = job(tmp_path / "new", seed=2, data_us=21000)
    d = diff(base, new)
    real = d["step"]["new_us"] - d["step"]["base_us"]
    assert 18000 < real < 22000, d["step"]
    first = d["changes"][0]
    assert (first["cls"], first["cat"], first["name"], first["where"]) == (
        "data", "dataloader", "fetch", "main")
    assert abs(first["change_us_per_step"] - real) <= 0.1 * real, (first, real)
    assert first["significant"] and d["step"]["significant"]
    assert significant(d) == ["data"], d["classes"]
    check_rows_add_up(d)
    assert d["verdict"].startswith(f"step +{real / 1e3:.1f} ms"), d["verdict"]
    assert "data wait +" in d["verdict"] and "dataloader/fetch" in d["verdict"]
    assert d["verdict"].endswith("everything else within noise"), d["verdict"]
    # every (cat, name) of the main processes is there, with its count per step
    rows = {(r["where"], r["cat"], r["name"]): r for r in d["changes"]}
    for key in (("main", "dataloader", "fetch"), ("main", "compute", "forward"),
                ("main", "comm", "all_reduce")):
        assert rows[key]["base_count_per_step"] == rows[key]["new_count_per_step"] == 1.0
    # per rank: each rank's data wait grew by about the same
    assert [r["rank"] for r in d["by_rank"]] == [0, 1, 2, 3]
    for r in d["by_rank"]:
        assert r["by_class"]["data"]["significant"], r


def test_two_runs_with_no_change_have_nothing_significant(tmp_path):
    base = job(tmp_path / "base", seed=3)
    new = job(tmp_path / "new", seed=4)
    d = diff(base, new)
    assert significant(d) == [] and not d["step"]["significant"], d["classes"]
    assert abs(d["step"]["change_us"]) <= d["step"]["noise_us"]
    assert not any(r["significant"] for r in d["changes"])
    assert "within noise" in d["verdict"] and "nothing changed" in d["verdict"], d["verdict"]


def test_a_new_compute_straggler_is_named_first(tmp_path):
    base = job(tmp_path / "base", seed=5)
    new = job(tmp_path / "new", seed=6, slow_rank=1, slow_compute_us=15000)
    d = diff(base, new)
    # named first, by its own event that grew (not the waiting ranks' backward)
    assert d["verdict"].split(": ", 1)[1].startswith("rank 1 is a new straggler, +"), d["verdict"]
    assert "a step over the others (compute: compute/forward +" in d["verdict"], d["verdict"]
    first = d["changes"][0]
    assert (first["cls"], first["name"]) == ("compute", "forward"), first
    # on the critical path (rank 1's own time), not the mean over the ranks
    assert 13000 <= first["change_us_per_step"] <= 17000, first
    assert significant(d) == ["compute"], d["classes"]
    check_rows_add_up(d)
    (s,) = d["stragglers"]["new"]
    assert s["rank"] == 1 and d["stragglers"]["base"] == []
    rank1 = next(r for r in d["by_rank"] if r["rank"] == 1)
    assert rank1["straggler_new"] and not rank1["straggler_base"]


def test_a_busier_machine_is_told_from_more_work(tmp_path):
    """Every rank's forward takes 4 ms longer, all of it waiting for a CPU
    (the iterations' wait_us), its CPU time unchanged: the verdict says the
    machine was busier, and nobody is a straggler."""
    base = job(tmp_path / "base", seed=21, wait_us=200)
    new = job(tmp_path / "new", seed=22, wait_us=4200)
    d = diff(base, new)
    assert d["sched"]["wait"]["significant"] and not d["sched"]["cpu"]["significant"], d["sched"]
    assert 3500 <= d["sched"]["wait"]["change_us_per_step"] <= 4500, d["sched"]
    assert "the machine was busier: the step threads waited 4.0 ms a step more for a CPU" \
        in d["verdict"], d["verdict"]
    assert d["stragglers"]["new"] == []
    # the same work done by one more forward's CPU time: not a busier machine
    more = job(tmp_path / "more", seed=23, wait_us=200, compute_us=9000)
    d = diff(base, more)
    assert d["sched"]["cpu"]["significant"] and "busier" not in d["verdict"], d["verdict"]


def test_a_rank_whose_class_moved_is_in_the_verdict(tmp_path):
    """The verdict never says "nothing changed" while the by-rank table marks
    a class of a rank significant: a rank 2.5 ms slower in its forward in 2
    of 4 ranks' jobs is named even when the step median moves within noise."""
    base = job(tmp_path / "base", seed=31, ranks=4, steps=40, noise=0.02)
    new = job(tmp_path / "new", seed=32, ranks=4, steps=40, noise=0.02, slow_rank=3,
              slow_compute_us=2500)
    d = diff(base, new)
    moved = [(r["rank"], c) for r in d["by_rank"] for c, v in r["by_class"].items()
             if v["significant"] and c != "comm"]
    assert moved, d["by_rank"]
    assert "nothing changed" not in d["verdict"] and "within noise (" not in d["verdict"], \
        d["verdict"]
    assert "rank 3" in d["verdict"], d["verdict"]


def test_slower_io_is_named(tmp_path):
    base = job(tmp_path / "base", seed=7, io_us=500, ranks=2)
    new = job(tmp_path / "new", seed=8, io_us=8000, ranks=2)
    d = diff(base, new)
    first = d["changes"][0]
    assert (first["cls"], first["cat"], first["name"]) == ("io", "POSIX", "read"), first
    assert significant(d) == ["io"], d["classes"]
    assert "I/O +" in d["verdict"]


def test_text_output_and_the_tables(tmp_path):
    base = job(tmp_path / "base", seed=9, ranks=2, steps=20)
    new = job(tmp_path / "new", seed=10, ranks=2, steps=20, data_us=11000)
    for by in ("cat", "name", "rank"):
        proc = subprocess.run([sys.executable, "-m", "dftracer", "diff", base, new, "--by", by],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("step +") and "data wait" in lines[0]
        assert "By class, per step" in proc.stdout
        if by == "rank":
            assert "By rank: step time" in proc.stdout
        else:
            assert "dataloader" in proc.stdout.split("By class, per step")[1]


def test_report_with_a_base_run_has_the_comparison(tmp_path):
    pytest.importorskip("plotly")
    from dftracer.tools import report

    base = job(tmp_path / "base", seed=11, ranks=2, steps=20)
    new = job(tmp_path / "new", seed=12, ranks=2, steps=20, data_us=11000)
    out = str(tmp_path / "r.html")
    proc = subprocess.run([sys.executable, "-m", "dftracer", "report", new, "--base", base,
                           "-o", out], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = open(out, encoding="utf-8").read()
    data = report.read_data(out)
    assert data["diff"] == diff(base, new)  # the numbers of `dftracer diff`
    assert "Compared with the base run" in page and "dataloader/fetch" in page
    assert data["diff"]["verdict"].split(" (")[0] in page
    proc = subprocess.run([sys.executable, "-m", "dftracer", "report", new, "--base",
                           str(tmp_path / "missing"), "-o", out], capture_output=True, text=True)
    assert proc.returncode == 2 and "missing" in proc.stderr, proc.stderr


READER = """
import os
from dftracer.python import dftracer
log = dftracer.initialize_log(None, {data!r}, -1)
for name in ("a.bin", "b.bin"):
    with open(os.path.join({data!r}, name), "rb") as f:
        f.read()
log.finalize()
"""


def test_by_file_compares_the_io_of_each_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    runs = {}
    for run, size in (("base", 4096), ("new", 65536)):  # a.bin grew between the runs
        (data / "a.bin").write_bytes(b"x" * size)
        (data / "b.bin").write_bytes(b"y" * 100)
        out = tmp_path / run
        out.mkdir()
        run_python(READER.format(data=str(data)),
                   {"DFTRACER_ENABLE": "1", "DFTRACER_LOG_FILE": str(out / "trace"),
                    "DFTRACER_DATA_DIR": str(data)})
        runs[run] = str(out)
    d = diff(runs["base"], runs["new"], "--by", "file")
    rows = {os.path.basename(r["path"]): r for r in d["by_file"]}
    assert set(rows) == {"a.bin", "b.bin"} and {r["status"] for r in d["by_file"]} == {"changed"}
    assert (rows["a.bin"]["base_bytes_read"], rows["a.bin"]["new_bytes_read"]) == (4096, 65536)
    assert (rows["b.bin"]["base_bytes_read"], rows["b.bin"]["new_bytes_read"]) == (100, 100)
    for r in d["by_file"]:
        assert r["change_time_us"] == r["new_time_us"] - r["base_time_us"]
        assert r["base_time_us"] > 0 and r["new_time_us"] > 0
    proc = subprocess.run([sys.executable, "-m", "dftracer", "diff", runs["base"], runs["new"],
                           "--by", "file"], capture_output=True, text=True)
    assert proc.returncode == 0 and "By file" in proc.stdout and "a.bin" in proc.stdout


def test_bad_paths_are_named(tmp_path):
    base = job(tmp_path / "base", ranks=1, steps=3)
    missing = str(tmp_path / "nothing-here")
    proc = subprocess.run([sys.executable, "-m", "dftracer", "diff", base, missing],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and missing in proc.stderr, proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "dftracer", "diff", str(empty), base],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and str(empty) in proc.stderr, proc.stderr


def test_runs_without_steps_compare_as_such(tmp_path):
    d0 = tmp_path / "a"
    d0.mkdir()
    run_python(WRITE.format(stem=str(d0 / "trace"), events=[("work", "app", 0, 100, {})]),
               {"DFTRACER_ENABLE": "1"})
    d = diff(str(d0), str(d0))
    assert d["step"]["base_us"] is None and "no steps" in d["verdict"]
    assert any("no steps" in w for w in d["warnings"])


def test_a_real_training_job_with_slower_data_loading_then_slower_reads(tmp_path):
    """diff_prog.py under `dftracer run` three times: as it is, with every
    sample 6 ms slower to load (4 samples a batch, one worker), and with a
    file of 64 MiB instead of 16 KiB read per sample (in the worker).  The
    data wait is the change, as large as the step time's change; with the
    bigger file the worker's reads are named behind it."""
    pytest.importorskip("torch")
    runs = {}
    for name, ms, kib in (("base", "0", "16"), ("new", "6", "16"), ("io", "0", "65536")):
        out = tmp_path / name
        data = tmp_path / f"data-{name}"
        data.mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", str(out / "t"),
             "--data-dir", str(data), "--", sys.executable, os.path.join(HERE, "diff_prog.py"),
             "--steps", "40", "--data-ms", ms, "--file-kib", kib, "--dir", str(data)],
            capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr
        runs[name] = str(out)
        paths = find_traces(str(out), "t")
        assert len(paths) >= 2  # the training process and its worker
        for path in paths:
            read_trace(path)  # every line parses
    d = diff(runs["base"], runs["new"])
    real = d["step"]["new_us"] - d["step"]["base_us"]
    assert real > 10000, d["step"]  # 4 x 6 ms a batch, less what the worker overlaps
    first = d["changes"][0]
    assert (first["cls"], first["cat"], first["name"]) == ("data", "dataloader", "fetch"), first
    assert abs(first["change_us_per_step"] - real) <= 0.3 * real, (first, real)
    item = next(r for r in d["changes"] if (r["where"], r["name"]) == ("workers", "item"))
    assert item["new_count_per_step"] == item["base_count_per_step"] == 4.0
    assert item["significant"] and "each in the workers" in d["verdict"], d["verdict"]
    d = diff(runs["base"], runs["io"])
    first = d["changes"][0]
    assert (first["cls"], first["name"]) == ("data", "fetch"), first
    reads = [r for r in d["changes"] if r["where"] == "workers" and r["cat"] == "POSIX"
             and r["significant"]]
    assert reads, [r for r in d["changes"] if r["where"] == "workers"]
    assert "in the workers" in d["verdict"] and "POSIX/" in d["verdict"], d["verdict"]
