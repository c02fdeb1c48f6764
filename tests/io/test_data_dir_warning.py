"""DFTRACER_DATA_DIR entries that never exist while the program runs are
warned about at the end (issue 20); entries that exist, or that the program
creates after starting the tracer (a newcomer's first trace, issue 52), are
not.  The warning is one line per job, naming every missing entry (issue 67):
a DataLoader or Pool worker (fork, spawn or forkserver) leaves it to the
traced program that started it, a rank other than 0 to rank 0, a rank under
a traced launcher to the launcher (docs/io-tracing.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def warnings_in(*stderrs):
    return [ln for err in stderrs for ln in err.splitlines() if "DFTRACER_DATA_DIR" in ln]


def one_line(entries):
    names = ", ".join(f"'{e}'" for e in entries)
    if len(entries) == 1:
        return (f"dftracer: warning: DFTRACER_DATA_DIR entry {names} does not exist; nothing "
                "under it was traced")
    return (f"dftracer: warning: DFTRACER_DATA_DIR entries {names} do not exist; nothing "
            "under them was traced")


def test_missing_data_dir_entries_get_one_warning_line(tmp_path):
    (tmp_path / "data").mkdir()
    entries = [str(tmp_path / "data"), str(tmp_path / "nope"), "relative/missing",
               str(tmp_path / "data" / "later")]
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        import os
        os.makedirs({str(tmp_path / 'data' / 'later')!r})
        with open({str(tmp_path / 'data' / 'later' / 'f.txt')!r}, "w") as f:
            f.write("x")
        log.finalize()
        # a second trace of the same process: warned already
        log = dftracer.initialize_log({str(tmp_path / 'again.pfw')!r})
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1", "DFTRACER_DATA_DIR": ":".join(entries)},
        cwd=str(tmp_path),
    )
    assert warnings_in(proc.stderr) == [one_line(entries[1:3])], proc.stderr
    # The entry created later is traced.
    (path,) = find_traces(str(tmp_path))
    files = read_trace(path).hashes("FH")
    assert str(tmp_path / "data" / "later" / "f.txt") in files.values()


WORKERS = """
import multiprocessing as mp, os, sys
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r})
def work(i):
    with open(os.path.join({data!r}, f"{{i}}.bin"), "wb") as f:
        f.write(b"x")
    return i
if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as pool:
        assert pool.map(work, range(8)) == list(range(8))
    log.finalize()
"""

LOADER = """
import os, torch
from torch.utils.data import DataLoader, Dataset
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r})
class Files(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        with open(os.path.join({data!r}, f"{{i}}.bin"), "wb") as f:
            f.write(b"x")
        return torch.tensor(i)
if __name__ == "__main__":
    seen = sorted(int(x) for b in DataLoader(Files(), batch_size=2, num_workers=2) for x in b)
    assert seen == list(range(8))
    log.finalize()
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_workers_leave_the_warning_to_their_program(tmp_path, method):
    (tmp_path / "data").mkdir()
    script = tmp_path / "pool.py"
    script.write_text(WORKERS.format(stem=str(tmp_path / "logs" / "trace"),
                                     data=str(tmp_path / "data")))
    missing = [str(tmp_path / "nope"), ".//ckpt"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(DFTRACER_ENABLE="1",
               DFTRACER_DATA_DIR=":".join([str(tmp_path / "data")] + missing))
    proc = subprocess.run([sys.executable, str(script), method], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stderr) == [one_line(missing)], proc.stderr
    # the workers traced their I/O all the same: the program opens no file
    opened = [e for p in find_traces(str(tmp_path / "logs")) for e in read_trace(p).events
              if e.get("cat") == "POSIX" and e["name"].startswith("open")]
    assert len(opened) >= 8


def test_dataloader_workers_leave_the_warning_to_their_program(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "data").mkdir()
    script = tmp_path / "loader.py"
    script.write_text(LOADER.format(stem=str(tmp_path / "logs" / "trace"),
                                    data=str(tmp_path / "data")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(DFTRACER_ENABLE="1",
               DFTRACER_DATA_DIR=f"{tmp_path / 'data'}:{tmp_path / 'ckpt'}")
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stderr) == [one_line([str(tmp_path / "ckpt")])], proc.stderr
    traces = find_traces(str(tmp_path / "logs"))
    assert len(traces) == 3  # the program and its two workers
    worker_io = sum(1 for p in traces for e in read_trace(p).events
                    if e.get("cat") == "POSIX" and e["name"].startswith("open"))
    assert worker_io >= 8


RANK = """
import os
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r})
with open(os.path.join({data!r}, os.environ["RANK"] + ".bin"), "wb") as f:
    f.write(b"x")
log.finalize()
"""


def _job_env(tmp_path, missing):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(DFTRACER_ENABLE="1", WORLD_SIZE="2",
               DFTRACER_DATA_DIR=":".join([str(tmp_path / "data")] + missing))
    return env


def test_a_job_of_two_ranks_warns_once_from_rank_0(tmp_path):
    (tmp_path / "data").mkdir()
    script = tmp_path / "rank.py"
    script.write_text(RANK.format(stem=str(tmp_path / "logs" / "trace"),
                                  data=str(tmp_path / "data")))
    missing = [str(tmp_path / "ckpt")]
    procs = []
    for rank in ("1", "0"):
        env = dict(_job_env(tmp_path, missing), RANK=rank, LOCAL_RANK=rank)
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs = {}
    for rank, p in zip(("1", "0"), procs):
        _, errs[rank] = p.communicate(timeout=180)
        assert p.returncode == 0, errs[rank]
    assert warnings_in(errs["0"]) == [one_line(missing)], errs
    assert warnings_in(errs["1"]) == [], errs["1"]
    assert len(find_traces(str(tmp_path / "logs"))) == 2


LAUNCHER = """
import os, subprocess, sys
procs = [subprocess.Popen([sys.executable, {script!r}], env=dict(os.environ, RANK=r))
         for r in ("0", "1")]
sys.exit(max(p.wait() for p in procs))
"""


def test_ranks_under_a_traced_launcher_leave_the_warning_to_it(tmp_path):
    """`dftracer run` traces every Python process: the launcher (no rank, as
    torchrun's agent) warns, its ranks (0 included) do not."""
    (tmp_path / "data").mkdir()
    script = tmp_path / "rank.py"
    script.write_text(RANK.format(stem=str(tmp_path / "logs" / "trace"),
                                  data=str(tmp_path / "data")))
    (tmp_path / "launch.py").write_text(LAUNCHER.format(script=str(script)))
    missing = [str(tmp_path / "ckpt")]
    env = _job_env(tmp_path, missing)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), os.path.join(ROOT, "dftracer", "_startup"))
        if p)
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(tmp_path / "logs" / "trace"), "--", sys.executable, "launch.py"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stderr) == [one_line(missing)], proc.stderr
    assert len(find_traces(str(tmp_path / "logs"))) == 3  # the launcher and both ranks
