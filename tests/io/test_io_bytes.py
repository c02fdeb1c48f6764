"""Every call that moves file data is intercepted, and `dftracer summary`
counts the bytes each one really moved (docs/io-tracing.md, "Intercepted
calls"; docs/cli.md, "I/O bytes").

tests/io/moves.py moves data with each kind of call, one operation per
thread, and measures what the thread really moved (its rchar/wchar, or what
splice returned); the summary's bytes per thread must be the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tracefile import find_traces, read_trace, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "io-tracing.md")
MOVES = os.path.join(HERE, "moves.py")


def has(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"],
                          capture_output=True).returncode == 0


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, env=env, timeout=300, **kw)


def docs_table():
    """{name: cat} from the table under "### Intercepted calls"."""
    text = open(DOCS).read()
    section = text.split("### Intercepted calls", 1)[1].split("\n\n`dftracer.io_calls()`", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[1] not in ("POSIX", "STDIO"):
            continue
        for name in re.findall(r"`([A-Za-z_0-9]+)`", cells[0]):
            assert name not in rows, f"{name} listed twice"
            rows[name] = cells[1]
    return rows


def test_io_calls_is_the_docs_table_and_every_call_is_installed(tmp_path):
    """dftracer.io_calls() (the wrapper tables of src/io/) names exactly the
    functions of the docs table, each with its category; while a trace with a
    data directory runs, looking any of them up (as ctypes does) yields
    dftracer's wrapper: each is installed."""
    code = """
    import ctypes, json, os, sys
    import dftracer
    from dftracer import _core
    from dftracer.python import dftracer as logger
    log = logger.initialize_log(None, os.getcwd(), -1)
    libc = ctypes.CDLL(None)
    rows = []
    for name, cat, defined in dftracer.io_calls():
        looked_up = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value if defined else None
        rows.append([name, cat, defined, looked_up == _core._io_wrapper(name)])
    log.finalize()
    print(json.dumps(rows))
    """
    proc = run_python(code, env={"DFTRACER_ENABLE": "1", "DFTRACER_LOG_FILE": str(tmp_path / "t")},
                      cwd=str(tmp_path))
    rows = json.loads(proc.stdout)
    assert {name: cat for name, cat, _, _ in rows} == docs_table()
    assert len(rows) == len({r[0] for r in rows})
    assert [name for name, _, defined, installed in rows if defined and not installed] == []
    # glibc defines every one of them (the tests run on glibc >= 2.34)
    assert [name for name, _, defined, _ in rows if not defined] == []


def test_docs_example_runs():
    block = open(DOCS).read().split("```python\n", 1)[1].split("```", 1)[0]
    proc = run_python(block)
    assert re.match(r"\d+ calls; \['fopen', 'fopen64', 'fdopen', 'fclose'\]", proc.stdout)


@pytest.fixture(scope="module")
def moves(tmp_path_factory):
    d = tmp_path_factory.mktemp("moves")
    data = d / "data"
    data.mkdir()
    env = {"DFTRACER_ENABLE": "1", "DFTRACER_DATA_DIR": str(data),
           "DFTRACER_LOG_FILE": str(d / "trace")}
    proc = subprocess.run([sys.executable, MOVES, str(data), str(d / "moves.json")],
                          env={**{k: v for k, v in os.environ.items()
                                  if not k.startswith("DFTRACER_")}, **env},
                          cwd=str(d), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # nothing printed: no warning, no error
    result = json.loads((d / "moves.json").read_text())
    (path,) = find_traces(str(d))
    return data, result, read_trace(path)


def test_bytes_per_call_are_what_the_program_moved(moves):
    """summary --by tid: each operation's thread moved as many bytes as the
    kernel says it did."""
    data, result, trace = moves
    proc = cli("summary", trace.path, "--by", "tid", "--json")
    assert proc.returncode == 0, proc.stderr
    by_tid = {r["tid"]: r for r in json.loads(proc.stdout)["by_tid"]}
    ops = result["ops"]
    expected = {"write", "read", "pwrite_writev", "pread_readv", "sendfile", "copy_file_range",
                "splice", "shutil_copyfile", "sizes_and_syncs", "fwrite", "fread",
                "fputs_fputc_fprintf", "fgets", "getline", "fgetc", "fortified"}
    if has("numpy"):
        expected |= {"numpy_save", "numpy_load"}
    if has("torch"):
        expected |= {"torch_save", "torch_load"}
    assert set(ops) == expected
    for name, op in ops.items():
        row = by_tid[op["tid"]]
        if op["kind"] == "copy":
            assert op["rchar"] == op["wchar"] > 0, (name, op)
        if op["kind"] == "none":
            assert op["rchar"] == op["wchar"] == 0 and row["io_bytes"] == 0, (name, op, row)
            continue
        assert op["moved"] > 0, (name, op)
        if name == "numpy_load":
            # fread counts what it delivered; stdio's buffer read a little more
            assert op["moved"] * 0.99 <= row["io_bytes"] <= op["moved"], (name, op, row)
        else:
            assert row["io_bytes"] == op["moved"], (name, op, row)


def names_by_tid(trace):
    out = {}
    for e in trace.events:
        if e["ph"] == "X" and e["cat"] in ("POSIX", "STDIO"):
            out.setdefault(e["tid"], []).append(e)
    return out


def test_each_operation_went_through_its_calls(moves):
    _, result, trace = moves
    events = names_by_tid(trace)
    calls = {name: {e["name"] for e in events[op["tid"]]} for name, op in result["ops"].items()}
    assert {"write"} <= calls["write"] and {"read"} <= calls["read"]
    assert {"pwrite64", "writev"} <= calls["pwrite_writev"]
    assert any(n.startswith("pwritev") for n in calls["pwrite_writev"])
    assert {"pread64", "readv"} <= calls["pread_readv"]
    assert any(n.startswith("preadv") for n in calls["pread_readv"])
    assert calls["sendfile"] & {"sendfile", "sendfile64"}
    assert calls["shutil_copyfile"] & {"sendfile", "sendfile64"}
    assert "copy_file_range" in calls["copy_file_range"]
    assert "splice" in calls["splice"]
    assert {"fwrite"} <= calls["fwrite"] and {"fread"} <= calls["fread"]
    assert {"fputs", "fputc", "fprintf"} <= calls["fputs_fputc_fprintf"]
    assert "fgets" in calls["fgets"] and "getline" in calls["getline"]
    assert "fgetc" in calls["fgetc"]
    assert {"__read_chk", "__pread64_chk", "__fgets_chk", "__fread_chk"} <= calls["fortified"]
    base = {n[:-2] if n.endswith("64") else n for n in calls["sizes_and_syncs"]}
    assert {"posix_fallocate", "fallocate", "ftruncate", "truncate", "fsync", "fdatasync",
            "sync_file_range", "msync", "mmap"} <= base


def test_two_descriptor_events_name_source_and_destination(moves):
    data, result, trace = moves
    fh = {v: k for k, v in trace.hashes("FH").items()}
    events = names_by_tid(trace)
    src = fh[str(data / "posix.bin")]
    for op, dst in (("sendfile", "sent.bin"), ("copy_file_range", "ranged.bin"),
                    ("shutil_copyfile", "copied.bin")):
        evs = [e for e in events[result["ops"][op]["tid"]]
               if e["name"] in ("sendfile", "sendfile64", "copy_file_range")]
        assert evs, op
        for e in evs:
            a = e["args"]
            assert a["fhash"] == src and a["out_fhash"] == fh[str(data / dst)], (op, a)
            assert isinstance(a["fd"], int) and isinstance(a["out_fd"], int) and a["fd"] != a["out_fd"]
            assert a["ret"] <= a["count"]
        assert sum(e["args"]["ret"] for e in evs) == os.path.getsize(data / dst) == 230400
    sent = [e for e in events[result["ops"]["sendfile"]["tid"]] if "sendfile" in e["name"]]
    assert [e["args"]["offset"] for e in sent] == [0, 100000, 200000, 230400]
    # splice: file -> pipe has only the source's hash, pipe -> file only the destination's
    spl = [e["args"] for e in events[result["ops"]["splice"]["tid"]] if e["name"] == "splice"]
    into_pipe = [a for a in spl if "fhash" in a]
    out_of_pipe = [a for a in spl if "out_fhash" in a]
    assert len(into_pipe) + len(out_of_pipe) == len(spl)
    assert all(a["fhash"] == src and "out_fhash" not in a for a in into_pipe)
    assert all(a["out_fhash"] == fh[str(data / "spliced.bin")] for a in out_of_pipe)
    assert sum(a["ret"] for a in out_of_pipe) == 230400


def test_calls_that_move_no_data(moves):
    data, result, trace = moves
    fh = {v: k for k, v in trace.hashes("FH").items()}
    sized = fh[str(data / "sized.bin")]
    evs = {}
    for e in names_by_tid(trace)[result["ops"]["sizes_and_syncs"]["tid"]]:
        evs.setdefault(e["name"][:-2] if e["name"].endswith("64") else e["name"], []).append(
            e["args"])
    assert all(a["fhash"] == sized for v in evs.values() for a in v)
    ok, failed = evs["posix_fallocate"]
    assert ok == {**ok, "offset": 0, "size": 8192, "ret": 0} and "errno" not in ok
    # posix_fallocate returns the error number: ret and errno say it, and the
    # program saw the same error
    assert failed["ret"] == failed["errno"] == result["errors"]["posix_fallocate"] > 0
    (fa,) = evs["fallocate"]
    assert fa == {**fa, "mode": 0, "offset": 0, "size": 16384, "ret": 0}
    assert [a["size"] for a in evs["ftruncate"]] == [4096]
    assert [a["size"] for a in evs["truncate"]] == [8192]
    (sfr,) = evs["sync_file_range"]
    assert sfr == {**sfr, "offset": 0, "size": 4096, "flags": 2, "ret": 0}
    (ms,) = evs["msync"]
    assert ms["size"] == 8192 and ms["ret"] == 0
    assert os.path.getsize(data / "sized.bin") == 8192


DATALOADER = """
import json, os, sys
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

DATA = sys.argv[1]

def thread_read():
    with open("/proc/thread-self/io", "rb", buffering=0) as f:
        text = f.read()
    return int(dict(l.split(b": ") for l in text.splitlines())[b"rchar"]), len(text)

class Arrays(Dataset):
    def __init__(self):
        self.files = sorted(os.listdir(DATA))
    def __len__(self):
        return len(self.files)
    def __getitem__(self, i):
        r0, n0 = thread_read()
        a = np.load(os.path.join(DATA, self.files[i]))
        r1, _ = thread_read()
        return torch.from_numpy(a).sum(), r1 - r0 - n0

if __name__ == "__main__":
    loader = DataLoader(Arrays(), batch_size=8, num_workers=4)
    total = sum(int(moved.sum()) for _, moved in loader)
    print(json.dumps({"read": total}))
"""


@pytest.mark.skipif(not (has("torch") and has("numpy")), reason="needs torch and numpy")
def test_dataloader_bytes_within_one_percent(tmp_path):
    """`dftracer run` of a DataLoader with 4 workers over .npy files (numpy
    reads their data with one fread each): summary's I/O is what the
    workers' np.load calls read, within 1%."""
    import numpy as np

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(120):
        np.save(data / f"{i:04d}.npy", rng.random(int(rng.integers(1000, 60000)), dtype=np.float32))
    (tmp_path / "load.py").write_text(DATALOADER)
    (tmp_path / "runs").mkdir()
    proc = cli("run", "-q", "--data-dir", "data", "--log-file", "runs/dl", "--",
               sys.executable, "load.py", str(data), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    read = json.loads(proc.stdout)["read"]
    assert read > sum(os.path.getsize(p) for p in data.iterdir())
    out = cli("summary", str(tmp_path / "runs"), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["overview"]["processes"] == 5  # the script and its 4 workers
    traced = summary["overview"]["io_bytes"]
    assert abs(traced - read) <= 0.01 * read, (traced, read)
    fread = {r["name"]: r for r in summary["by_name"] if r["cat"] == "STDIO"}["fread"]
    assert fread["count"] == 120 and fread["io_bytes"] > 0.9 * read


def test_merge_names_both_files(moves, tmp_path):
    """merge resolves out_fhash to out_file (and rename's new_fhash to new_file)."""
    data, _, trace = moves
    out = tmp_path / "merged.pfw"
    proc = cli("merge", trace.path, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    merged = [json.loads(line) for line in out.read_text().splitlines()[1:] if line.strip()]
    sent = [e["args"] for e in merged if e["name"] in ("sendfile", "sendfile64")]
    assert sent and all(a["file"] == str(data / "posix.bin") for a in sent)
    assert {a["out_file"] for a in sent} == {str(data / "sent.bin"), str(data / "copied.bin")}
    assert not any(k.endswith("hash") for e in merged for k in e.get("args", {}))


def docs_bytes_rule():
    """{name: the "bytes" column} of the docs table."""
    text = open(DOCS).read()
    section = text.split("### Intercepted calls", 1)[1].split("\n\n`dftracer.io_calls()`", 1)[0]
    rules = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("POSIX", "STDIO"):
            for name in re.findall(r"`([A-Za-z_0-9]+)`", cells[0]):
                rules[name] = (cells[1], cells[3])
    return rules


def test_summary_counts_every_call_as_the_docs_table_says(tmp_path):
    """One event per intercepted call, each with size=4, count=10, ret=3 (and
    one more with ret=-1, a failure): summary's bytes per name follow the
    table's last column, for every call dftracer intercepts."""
    rules = docs_bytes_rule()
    code = f"""
    from dftracer.python import dftracer
    log = dftracer.initialize_log({str(tmp_path / "t")!r}, None, -1)
    t = log.get_time()
    for name, cat in {sorted((n, c) for n, (c, _) in rules.items())!r}:
        log.log_event(name, cat, t, 1, int_args={{"size": 4, "count": 10, "ret": 3}})
        log.log_event(name, cat, t, 1, int_args={{"size": 4, "count": 10, "ret": -1}})
    log.finalize()
    """
    run_python(code, env={"DFTRACER_ENABLE": "1"}, cwd=str(tmp_path))
    proc = cli("summary", str(tmp_path), "--json", "--by", "name", "--top", "0")
    rows = {r["name"]: r for r in json.loads(proc.stdout)["by_name"]}
    expect = {"`ret`": (3, 2), "`size` × `ret`": (12, 2), "1 (0 at the end)": (1, 2),
              "`count` (0 on failure)": (10, 2), "-": (0, 0)}
    for name, (_, rule) in rules.items():
        got = (rows[name]["io_bytes"], rows[name]["io_events"])
        assert got == expect[rule], (name, rule, got)
