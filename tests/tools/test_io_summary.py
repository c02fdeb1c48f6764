"""`dftracer summary --io` (src/reader/iostats.c, dftracer/tools/iostats.py)
on real jobs under `dftracer run --data-dir`: a DataLoader whose workers
np.load one .npy per sample over two epochs, and a program making reads
with seeks, pread, mmap, sendfile and stdio, its counters checked against
the kernel's (/proc/<pid>/io) and against a reference computed here from
the raw events."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "io_prog.py")
BUCKET_TOPS = [100, 1024, 10240, 102400, 1048576, 4194304, 10485760, 104857600, 1073741824]


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}


def run(cwd, *cmd):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--data-dir", "data",
                           "--log-file", "runs/trace", "--", sys.executable, PROG, *cmd],
                          cwd=str(cwd), env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def io_json(cwd, *extra):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "runs", "--io", "--json",
                           *extra], cwd=str(cwd), env=env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def bucket(n):
    return next((i for i, top in enumerate(BUCKET_TOPS) if n <= top), len(BUCKET_TOPS))


@pytest.fixture(scope="module")
def loader_job(tmp_path_factory):
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("loader")
    (base / "data").mkdir()
    sizes = {}
    for i in range(20):  # 5 sizes, 80 B to ~300 KB of data
        n = (20, 300, 3000, 30000, 75000)[i % 5]
        path = base / "data" / f"s{i:02d}.npy"
        np.save(path, np.full(n, i, dtype=np.float32))
        sizes[str(path)] = path.stat().st_size
    run(base, "loader", "data", "2", "2")
    return base, sizes


def test_loader_files_epochs_workers(loader_job):
    base, sizes = loader_job
    out = io_json(base)
    files = {f["path"]: f for f in out["files"]}
    assert set(sizes) <= set(files)
    for path, size in sizes.items():
        f = files[path]
        assert f["bytes_read"] == 2 * size, (path, f["bytes_read"], size)
        assert sum(f["size_hist_read"].values()) == f["reads"] > 0
        assert f["opens"] == 2 and f["processes"] == 2
    # by_epoch: each epoch reads the data set once; epoch 1 re-reads all of it
    total = sum(sizes.values())
    assert [e["epoch"] for e in out["by_epoch"]] == [0, 1]
    for e in out["by_epoch"]:
        assert e["bytes_read"] == total and e["unique_bytes"] == total
    assert out["by_epoch"][0]["reread_bytes"] == 0
    assert out["by_epoch"][1]["reread_bytes"] == total
    # by_rank: the main process with its 2 workers, each 2 processes (new ones
    # every epoch: persistent_workers=False), which did the reading
    assert len(out["by_rank"]) == 1
    row = out["by_rank"][0]
    assert row["own"]["bytes_read"] == 0
    assert sum(w["bytes_read"] for w in row["workers"]) == row["bytes_read"] == 2 * total
    check_workers(base, row, epochs=2, persistent=False)
    # darshan totals are the sums over files
    for key in ("POSIX_READS", "POSIX_BYTES_READ", "STDIO_READS", "STDIO_BYTES_READ",
                "POSIX_OPENS", "POSIX_SEEKS", "POSIX_SIZE_READ_1K_10K"):
        assert out["darshan"][key] == sum(f["darshan"][key] for f in out["files"]), key
    assert out["darshan"]["POSIX_MAX_BYTE_READ"] == max(
        f["darshan"]["POSIX_MAX_BYTE_READ"] for f in out["files"])


def traces_by_pid(base):
    """Every trace file of the run, decoded and checked (tracefile.read_trace), by pid."""
    out = {}
    for path in find_traces(str(base / "runs")):
        t = read_trace(path)
        out[t.events[0]["pid"]] = t
    return out


def check_workers(base, row, epochs, persistent):
    """row's `workers` against the raw traces: one entry per DataLoader worker
    id (0 and 1 of 2), each the processes whose one `worker` metadata event
    names that id (one process over all epochs when persistent, one a epoch
    otherwise, each started in a different epoch), the main process none; and
    each entry's opens are its processes' dataset items times the job's opens
    per item."""
    traces = traces_by_pid(base)
    main = traces[row["pid"]]
    assert main.of("M", name="worker") == []
    assert [w["worker"] for w in row["workers"]] == [0, 1], row["workers"]
    starts = {}  # epoch -> the main process's first iteration
    for e in main.of("X", cat="pipeline", name="iteration"):
        starts[e["args"]["epoch"]] = min(starts.get(e["args"]["epoch"], e["ts"]), e["ts"])
    assert sorted(starts) == list(range(epochs))
    items = opens = 0
    per_worker = []  # dataset items per worker entry
    for w in row["workers"]:
        assert w["num_workers"] == 2 and w["bytes_read"] > 0 and w["pid"] == w["pids"][0]
        assert len(w["pids"]) == (1 if persistent else epochs), w
        began = []
        for pid in w["pids"]:
            (ev,) = traces[pid].of("M", name="worker")
            assert ev["args"]["name"] == "worker" and ev["args"]["value"] == w["worker"]
            assert ev["args"]["num_workers"] == 2
            assert traces[pid].of("X", cat="dftracer", name="start")[0]["args"]["ppid"] == \
                row["pid"]
            # the epoch of its first item (epoch 0's workers prefetch before
            # the first iteration: the first epoch, as summary --io's rule)
            first = traces[pid].of("X", cat="data", name="item")[0]["ts"]
            began.append(max(0, sum(1 for t in starts.values() if t <= first) - 1))
        if not persistent:  # worker k of epoch 0, then worker k of epoch 1
            assert sorted(began) == list(range(epochs)), (w, began, starts)
        per_worker.append(sum(len(traces[p].of("X", cat="data", name="item"))
                              for p in w["pids"]))
        items += per_worker[-1]
        opens += w["opens"]
    assert opens % items == 0, (opens, items)
    for w, n in zip(row["workers"], per_worker):
        assert w["opens"] == n * (opens // items), (w, n)


def test_ddp_two_ranks_two_workers(tmp_path):
    """The issue's job: torchrun, 2 ranks (gloo) x 2 DataLoader workers,
    DistributedSampler, np.load of one of 160 .npy files (5 sizes, 80 B to
    2.4 MB of data) per sample, 2 epochs.  Rank 0's workers are persistent,
    rank 1's are not (new processes each epoch, torch's default): both kinds
    in one job, each rank listing its 2 workers."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    (tmp_path / "data").mkdir()
    sizes = {}
    for i in range(160):  # 2.4 MB for 4 files only: the run stays short
        n = 2_400_000 if i % 40 == 0 else (80, 2_400, 24_000, 240_000)[i % 4]
        path = tmp_path / "data" / f"f{i:03d}.npy"
        np.save(path, np.zeros(n, dtype=np.uint8))
        sizes[str(path)] = path.stat().st_size
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--data-dir", "data", "--log-file",
         "runs/trace", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node", "2", PROG, "ddp", "data", "2", "2", "rank0"],
        cwd=str(tmp_path), env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = io_json(tmp_path)
    files = {f["path"]: f for f in out["files"]}
    assert set(sizes) <= set(files)
    total = sum(sizes.values())
    for path, size in sizes.items():
        f = files[path]
        assert abs(f["bytes_read"] - 2 * size) <= 0.02 * 2 * size + 1024, (path, f, size)
        assert sum(f["size_hist_read"].values()) == f["reads"] > 0
        # the calls' own bytes: np.load reads the header through Python's
        # buffered file, then header and data again through an fdopen'd dup
        d = f["darshan"]
        assert d["POSIX_BYTES_READ"] + d["STDIO_BYTES_READ"] >= f["bytes_read"]
        assert d["POSIX_READS"] + d["STDIO_READS"] == f["reads"]
    assert [e["epoch"] for e in out["by_epoch"]] == [0, 1]
    for e in out["by_epoch"]:
        assert e["bytes_read"] == e["unique_bytes"] == total, e
    assert out["by_epoch"][0]["reread_bytes"] == 0
    assert out["by_epoch"][1]["reread_bytes"] == total
    ranks = {r["rank"]: r for r in out["by_rank"]}
    assert sorted(ranks) == [0, 1]
    for r in ranks.values():
        assert 0.3 <= r["bytes_read"] / (2 * total) <= 0.7, r
        assert len(r["workers"]) == 2 and all(w["bytes_read"] > 0 for w in r["workers"])
        assert sum(w["bytes_read"] for w in r["workers"]) + r["own"]["bytes_read"] == \
            r["bytes_read"]
        for key in ("reads", "opens", "read_time_us"):
            assert sum(w[key] for w in r["workers"]) + r["own"][key] == r[key], key
        check_workers(tmp_path, r, epochs=2, persistent=r["rank"] == 0)
    for key in ("POSIX_BYTES_READ", "POSIX_READS", "STDIO_BYTES_READ", "STDIO_READS"):
        assert out["darshan"][key] == sum(f["darshan"][key] for f in out["files"]) > 0, key
    # --dask: the same JSON (the persistent workers' traces are read twice, by epoch)
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert io_json(tmp_path, "--dask", cluster.scheduler_address) == out


def test_validation_reads_belong_to_the_epoch_they_ran_in(tmp_path):
    """Each epoch a training pass, then validation over a second loader (both
    with workers): every epoch reads every file once, the validation's
    included (issue 49: epoch 0's validation landed in epoch 1, whose first
    iteration spans it).  The `iter` and `fetch` events carry their loader's
    pass."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    total, part_bytes = 0, {}
    for part, n in (("train", 8), ("val", 4)):
        (tmp_path / "data" / part).mkdir(parents=True)
        for i in range(n):
            path = tmp_path / "data" / part / f"s{i}.npy"
            np.save(path, np.full(1000 * (i + 1), i, dtype=np.float32))
            total += path.stat().st_size
            part_bytes[part] = part_bytes.get(part, 0) + path.stat().st_size
    epochs = 3
    run(tmp_path, "loader_val", "data", str(epochs), "2")
    a = io_json(tmp_path)
    assert [e["epoch"] for e in a["by_epoch"]] == list(range(epochs))
    assert [e["bytes_read"] for e in a["by_epoch"]] == [total] * epochs, a["by_epoch"]
    # labelled by loader: the training loader is the process's loader 0, the
    # validation's loader 1 (both over a dataset of class Files); the main
    # process reads no data file
    for e in a["by_epoch"]:
        assert e["by_loader"] == [{"loader": "loader 0 (Files)", "bytes_read": part_bytes["train"]},
                                  {"loader": "loader 1 (Files)", "bytes_read": part_bytes["val"]}], e
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "runs", "--io"],
                          cwd=str(tmp_path), env=env(), capture_output=True, text=True).stdout
    assert "indented: by loader" in text and text.count("  loader 1 (Files)") == epochs
    if importlib.util.find_spec("plotly") is not None:  # the report's table: the same rows
        subprocess.run([sys.executable, "-m", "dftracer", "report", "runs", "-o", "r.html"],
                       cwd=str(tmp_path), env=env(), capture_output=True, check=True,
                       timeout=300)
        table = (tmp_path / "r.html").read_text().split("<h2>I/O by epoch</h2>", 1)[1]
        table = table.split("</table>", 1)[0]
        assert table.count("loader 0 (Files)") == table.count("loader 1 (Files)") == epochs
    main = [read_trace(p) for p in find_traces(str(tmp_path / "runs"))]
    fetches = [e for t in main for e in t.of(cat="dataloader", name="fetch")]
    # 4 training and 2 validation batches a pass, each pass's number its own
    assert sorted(e["args"]["epoch"] for e in fetches) == sorted(
        [e for e in range(epochs) for _ in range(4 + 2)])
    # one `iter` a pass, before its first fetch: the workers start inside it
    iters = sorted((e for t in main for e in t.of(cat="dataloader", name="iter")),
                   key=lambda e: e["ts"])
    assert [e["args"]["epoch"] for e in iters] == [e for e in range(epochs) for _ in (0, 1)]
    assert all(e["args"]["workers"] == 2 for e in iters)
    assert [e["args"]["loader"] for e in iters] == [0, 1] * epochs
    assert all(e["args"]["dataset"] == "Files" for e in iters)
    # each worker says which loader of its parent it serves
    workers = [t for t in (read_trace(p) for p in find_traces(str(tmp_path / "runs")))
               if t.of("M", name="worker")]
    loaders = sorted(t.of("M", name="worker")[-1]["args"]["loader"] for t in workers)
    assert loaders == sorted([0, 0, 1, 1] * epochs), loaders  # 2 workers a pass, not persistent
    for it in iters:
        first = min(f["ts"] for f in fetches if f["ts"] >= it["ts"])
        assert it["ts"] + it["dur"] <= first


def test_loader_text_and_epoch_from(loader_job):
    base, sizes = loader_job
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "runs", "--io", "--top",
                           "3"], cwd=str(base), env=env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for title in ("Top files by bytes (top 3 of", "Top files by time (top 3 of", "By epoch",
                  "By rank, with its workers", "POSIX_BYTES_READ="):
        assert title in proc.stdout
    # --epoch-from names other events: each optimizer step starts an "epoch"
    # (events without an `epoch` arg count in their order)
    out = io_json(base, "--epoch-from", "compute/optimizer.step")
    assert len(out["by_epoch"]) > 2
    # the fetches' own `epoch` arg (the loader's pass) is the epoch they start
    assert len(io_json(base, "--epoch-from", "dataloader/fetch")["by_epoch"]) == 2
    assert sum(e["bytes_read"] for e in out["by_epoch"]) == 2 * sum(sizes.values())
    bad = subprocess.run([sys.executable, "-m", "dftracer", "summary", "runs", "--epoch-from",
                          "x"], cwd=str(base), env=env(), capture_output=True, text=True)
    assert bad.returncode == 2 and "--epoch-from NAME applies to --io" in bad.stderr


def reference(events, path_of):
    """Darshan's counters per file from the raw events, offsets followed by
    hand (one descriptor at a time, as the program uses them)."""
    ref = {}
    pos, stream, last = {}, {}, {}
    for e in events:
        if e["ph"] != "X" or e["cat"] not in ("POSIX", "STDIO"):
            continue
        a = e["args"]
        name = e["name"]
        for key, fd, off_key in (("fhash", "fd", "offset"), ("out_fhash", "out_fd", None)):
            if key not in a:
                continue
            path = path_of[a[key]]
            r = ref.setdefault(path, {k: 0 for k in (
                "POSIX_OPENS", "POSIX_READS", "POSIX_BYTES_READ", "POSIX_SEQ_READS",
                "POSIX_CONSEC_READS", "POSIX_MMAPS", "POSIX_SEEKS", "POSIX_WRITES",
                "POSIX_BYTES_WRITTEN", "STDIO_OPENS", "STDIO_READS", "STDIO_BYTES_READ",
                "STDIO_SEEKS")})
            r.setdefault("hist", [0] * 10)
            if name.startswith("open"):
                r["POSIX_OPENS"] += 1
                pos[a["ret"]] = 0
            elif name.startswith("mmap"):
                r["POSIX_MMAPS"] += 1
            elif name.startswith("lseek"):
                r["POSIX_SEEKS"] += 1
                pos[a["fd"]] = a["ret"]
            elif name in ("read", "pread64", "pread") or name.startswith("sendfile"):
                if key == "out_fhash":
                    r["POSIX_WRITES"] += 1
                    r["POSIX_BYTES_WRITTEN"] += a["ret"]
                    continue
                off = a["offset"] if name.startswith("pread") else pos[a["fd"]]
                if not name.startswith("pread"):
                    pos[a["fd"]] += a["ret"]
                lb = last.get(path, 0)
                r["POSIX_SEQ_READS"] += off > lb
                r["POSIX_CONSEC_READS"] += off == lb + 1
                last[path] = off + a["ret"] - 1
                r["POSIX_READS"] += 1
                r["POSIX_BYTES_READ"] += a["ret"]
                r["hist"][bucket(a["ret"])] += 1
            elif name.startswith("fopen"):
                r["STDIO_OPENS"] += 1
                stream[a["fd"]] = 0
            elif name == "fread":
                r["STDIO_READS"] += 1
                r["STDIO_BYTES_READ"] += a["size"] * a["ret"]
                r["hist"][bucket(a["size"] * a["ret"])] += 1
            elif name == "fseek":
                r["STDIO_SEEKS"] += 1
    return ref


def test_calls_against_kernel_and_events(tmp_path):
    (tmp_path / "data").mkdir()
    for name, size in (("a.bin", 10000), ("b.bin", 8192), ("c.bin", 3000)):
        (tmp_path / "data" / name).write_bytes(os.urandom(size))
    run(tmp_path, "calls", "data", "proc.json")
    out = io_json(tmp_path)
    files = {os.path.basename(f["path"]): f for f in out["files"]}
    proc = json.loads((tmp_path / "proc.json").read_text())
    traces = [read_trace(p) for p in find_traces(str(tmp_path / "runs"))]
    (trace,) = [t for t in traces if any(e.get("pid") == proc["pid"] for e in t.events)]
    path_of = trace.hashes("FH")
    ref = {os.path.basename(p): r for p, r in reference(trace.events, path_of).items()}

    # against the raw events, by hand
    for name, r in ref.items():
        d = files[name]["darshan"]
        for key, value in r.items():
            if key != "hist":
                assert d[key] == value, (name, key, d[key], value)
        assert list(files[name]["size_hist_read"].values()) == r["hist"], name
    a = files["a.bin"]
    assert a["darshan"]["POSIX_READS"] == 7 and a["darshan"]["POSIX_BYTES_READ"] == 1000 + 1000 + \
        3000 + 500 + 200 + 100 + 4096
    assert a["darshan"]["POSIX_CONSEC_READS"] == 1  # Darshan: read 2 only (read 1 is at 0)
    # sequential (offset past the last byte read): reads 2, 3, the pread, the tail;
    # not read 4 (backwards) nor sendfile's (at 0, after the tail)
    assert a["darshan"]["POSIX_SEQ_READS"] == 4
    # bytes read once per open: [0, 2000) + [5000, 8000) + [9000, 9200) + the last 100
    # (the backwards read is inside [0, 2000)), then sendfile's own open: 4096
    assert a["bytes_read"] == 2000 + 3000 + 200 + 100 + 4096
    # mmap: an open and metadata, no reads
    b = files["b.bin"]["darshan"]
    assert (b["POSIX_OPENS"], b["POSIX_MMAPS"], b["POSIX_READS"]) == (1, 1, 0)
    assert b["POSIX_F_META_TIME"] > 0 or files["b.bin"]["meta_ops"] >= 3
    # stdio: 4 freads, the re-read at 0 counted once in bytes_read
    c = files["c.bin"]
    assert c["darshan"]["STDIO_READS"] == 4 and c["darshan"]["STDIO_BYTES_READ"] == 1050
    assert c["bytes_read"] == 1000 and c["darshan"]["STDIO_SEEKS"] == 2
    # sendfile's destination
    assert files["d.bin"]["darshan"]["POSIX_BYTES_WRITTEN"] == 4096

    # against the kernel: the POSIX part, between two reads of /proc/self/io
    # (the first of which the second counts: its bytes and its syscall)
    delta_r = proc["after"]["rchar"] - proc["before"]["rchar"] - proc["proc_read_bytes"]
    delta_calls = proc["after"]["syscr"] - proc["before"]["syscr"] - 1
    posix = a["darshan"]
    assert delta_r == posix["POSIX_BYTES_READ"]
    assert delta_calls == posix["POSIX_READS"]


def test_report_io_section(loader_job, tmp_path):
    pytest.importorskip("plotly")
    base, sizes = loader_job
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "dftracer", "report", "runs", "-o", str(out)],
                          cwd=str(base), env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    for title in ("I/O: top files by bytes", "I/O by epoch", "I/O by rank, with its workers"):
        assert f"<h2>{title}</h2>" in page
    blob = page.split('id="dftracer-report-data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(blob.replace("<\\/", "</"))
    same = io_json(base)
    assert data["io"]["files"] == same["files"] and data["io"]["by_epoch"] == same["by_epoch"]
