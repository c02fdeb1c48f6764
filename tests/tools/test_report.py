"""dftracer report (docs/cli.md): its numbers against dftracer summary and
against the events of traces with a known shape."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from tracefile import find_traces, read_trace, run_python

from test_cli import cli  # noqa: E402

# A train loop of 4 steps (its forward has a name with characters JSON escapes) with explicit times (us after T), one thread:
#   train.iter [0, 100)  waiting for the batch
#   train.block [100, 900): fetch [100, 150) > read [110, 130) (4096 bytes);
#                           forward [200, 500)
TRAIN = """
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
T = log.get_time() + 1000
for s in range(4):
    b = T + s * 1000
    log.log_event("train.iter", "pipeline", b, 100, int_args={{"count": s + 1}})
    log.log_event("read", "POSIX", b + 110, 20, int_args={{"size": 4096}})
    log.log_event("fetch", "dataloader", b + 100, 50)
    log.log_event("forward \\"é\\"", "compute", b + 200, 300)
    log.log_event("train.block", "pipeline", b + 100, 800, int_args={{"count": s + 1}})
log.finalize()
"""

# torch.profiler's events as trace_handler writes them (after the fact,
# children first), two steps: ProfilerStep#N [0, 1000) > DataLoader [10, 110),
# aten::mm [200, 600) > aten::add [250, 300)
PROFILER = """
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
T = log.get_time() + 1000
for n in (3, 4):
    b = T + (n - 3) * 2000
    log.log_event("aten::add", "PP", b + 250, 50)
    log.log_event("aten::mm", "PP", b + 200, 400)
    log.log_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "PP", b + 10, 100)
    log.log_event("ProfilerStep#%d" % n, "PP", b, 1000)
log.finalize()
"""


def write(directory, code, ranks):
    for rank in ranks:
        run_python(code.format(stem=str(directory / "trace")),
                   env={"DFTRACER_ENABLE": "1", "RANK": str(rank)}, cwd=str(directory))
    paths = find_traces(str(directory))
    assert len(paths) == len(ranks)
    return paths


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    return d, write(d, TRAIN, ranks=(0, 1, 2))


@pytest.fixture(scope="module")
def profiler(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiler")
    return d, write(d, PROFILER, ranks=(0,))


needs_plotly = pytest.mark.skipif(importlib.util.find_spec("plotly") is None,
                                  reason="the report extra (plotly) is not installed")


def report(paths, out, *extra):
    proc = cli("report", *map(str, paths), "-o", str(out), *extra)
    assert proc.returncode == 0, proc.stderr
    assert f"report written to {out}" in proc.stderr
    from dftracer.tools.report import read_data

    return read_data(str(out))


def self_times(events):
    """Brute force: each event's duration minus its direct children's, where a
    child is an event of the same thread inside it with no event between."""
    out = {}
    evs = sorted(events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    for e in evs:
        inside = [c for c in evs if c is not e and c["pid"] == e["pid"] and c["tid"] == e["tid"]
                  and e["ts"] <= c["ts"] and c["ts"] + c["dur"] <= e["ts"] + e["dur"]
                  and (c["ts"], -c["dur"]) > (e["ts"], -e["dur"])]
        direct = [c for c in inside if not any(
            o is not c and o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"]
            and (o["ts"], -o["dur"]) < (c["ts"], -c["dur"]) for o in inside)]
        key = (e["cat"], e["name"])
        out[key] = out.get(key, 0) + e["dur"] - sum(c["dur"] for c in direct)
    return out


@needs_plotly
def test_numbers_agree_with_summary(train, tmp_path):
    d, paths = train
    data = report([d], tmp_path / "r.html")
    proc = cli("summary", str(d), "--by", "cat", "--by", "name", "--by", "pid", "--json")
    assert proc.returncode == 0, proc.stderr
    assert data["summary"] == json.loads(proc.stdout)
    # page order: the steps chart under the verdict (issue 71), then the rest
    assert data["charts"] == ["chart-steps", "chart-category", "chart-process", "chart-top-total",
                              "chart-top-self", "chart-io", "chart-wait",
                              "chart-rank-steps", "chart-rank-breakdown"]  # three ranks


@needs_plotly
def test_charts_show_the_summary_totals(train, tmp_path):
    """The bars of the category and top-function charts are the summary's totals."""
    import plotly.graph_objects as go

    from dftracer.tools.report import build_figures, read_data

    d, _ = train
    data = report([d], tmp_path / "r.html")
    figs = {cid: fig for cid, _, fig, _ in build_figures(go, data, 20)}
    summ = json.loads(cli("summary", str(d), "--by", "cat", "--by", "name", "--json").stdout)
    bar = figs["chart-category"].data[0]
    assert dict(zip(bar.y, bar.x)) == {r["cat"]: r["total_us"] / 1e3 for r in summ["by_cat"]}
    bar = figs["chart-top-total"].data[0]
    assert dict(zip(bar.y, bar.x)) == {f"{r['name']} [{r['cat']}]": r["total_us"] / 1e3
                                       for r in summ["by_name"]}
    # the same numbers in the page's own chart data
    html = (tmp_path / "r.html").read_text()
    assert read_data(str(tmp_path / "r.html"))["summary"]["by_cat"] == data["summary"]["by_cat"]
    assert html.count('class="plotly-graph-div"') == len(data["charts"])


@needs_plotly
def test_self_time_matches_the_events(train, tmp_path):
    d, paths = train
    data = report([d], tmp_path / "r.html")
    events = []
    for p in paths:
        events += read_trace(p).user_events()
    expected = self_times(events)
    got = {(r["cat"], r["name"]): r["self_us"] for r in data["self_by_name"]}
    assert got == expected
    # the loop's shape: 3 ranks x 4 steps
    assert got[("pipeline", "train.block")] == 3 * 4 * 450
    assert got[("dataloader", "fetch")] == 3 * 4 * 30
    per_proc = {}
    for r in data["self_by_process_cat"]:
        per_proc.setdefault(r["pid"], {})[r["cat"]] = r["self_us"]
    assert len(per_proc) == 3
    for cats in per_proc.values():
        assert cats == {"pipeline": 4 * 550, "dataloader": 4 * 30, "POSIX": 4 * 20,
                        "compute": 4 * 300}


@needs_plotly
def test_steps_and_waiting_of_a_train_loop(train, tmp_path):
    d, _ = train
    data = report([d], tmp_path / "r.html")
    steps = data["steps"]
    assert len(steps) == 12
    assert sorted(s["step"] for s in steps) == sorted(list(range(4)) * 3)
    for s in steps:
        assert s["kind"] == "train" and s["dur_us"] == 800
        assert s["wait_before_us"] == 100
        assert s["by_cat"] == {"untraced": 450, "dataloader": 30, "POSIX": 20, "compute": 300}
    ranks = sorted(v for v in data["ranks"].values())
    assert ranks == [0, 1, 2]
    assert len(data["wait_compute"]) == 3
    for w in data["wait_compute"]:
        assert (w["wait_us"], w["compute_us"], w["busy_us"]) == (4 * 150, 4 * 300, 4 * 900)


@needs_plotly
def test_profiler_steps(profiler, tmp_path):
    d, _ = profiler
    data = report([d], tmp_path / "r.html")
    steps = data["steps"]
    assert [s["step"] for s in steps] == [3, 4]
    for s in steps:
        assert s["kind"] == "profiler" and s["dur_us"] == 1000
        assert s["by_cat"] == {"untraced": 500, "PP data loading": 100, "PP ops": 400}
    (w,) = data["wait_compute"]
    assert (w["wait_us"], w["compute_us"], w["busy_us"]) == (200, 800, 2000)
    assert "chart-steps" in data["charts"] and "chart-io" not in data["charts"]


@needs_plotly
def test_io_bins_add_up_to_the_summary(train, tmp_path):
    d, _ = train
    data = report([d], tmp_path / "r.html", "--bins", "7")
    total = sum(b["bytes"] for b in data["io_bins"])
    assert total == pytest.approx(data["summary"]["overview"]["io_bytes"], rel=1e-9)
    assert data["summary"]["overview"]["io_bytes"] == 3 * 4 * 4096
    assert max(b["bin"] for b in data["io_bins"]) < 7
    assert sum(b["busy_us"] for b in data["io_bins"]) == pytest.approx(3 * 4 * 20)


@needs_plotly
def test_same_report_with_one_process_and_many(train, tmp_path):
    d, _ = train
    one = report([d], tmp_path / "a.html", "-j", "1")
    many = report([d], tmp_path / "b.html", "-j", "3")
    for key in ("summary", "self_by_name", "self_by_process_cat", "io_bins", "steps",
                "wait_compute"):
        assert one[key] == many[key], key


@needs_plotly
def test_dask_cluster_gives_the_same_report(train, tmp_path):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    d, _ = train
    local = report([d], tmp_path / "a.html")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        remote = report([d], tmp_path / "b.html", "--dask", cluster.scheduler_address)
    for key in ("summary", "self_by_name", "io_bins", "steps", "wait_compute"):
        assert local[key] == remote[key], key


@needs_plotly
def test_page_needs_no_network(train, tmp_path):
    from dftracer.tools.report import read_data

    d, _ = train
    report([d], tmp_path / "r.html")
    import plotly.offline

    html = (tmp_path / "r.html").read_text()
    js = plotly.offline.get_plotlyjs()
    assert html.count(js) == 1  # plotly.js inline, once
    rest = html.replace(js, "")
    assert "src=" not in rest and "http://" not in rest and "https://" not in rest
    assert rest.count("Plotly.newPlot") == len(read_data(str(tmp_path / "r.html"))["charts"])


def test_missing_plotly_names_the_extra(train, tmp_path):
    d, _ = train
    blocker = tmp_path / "block"
    (blocker / "plotly").mkdir(parents=True)
    (blocker / "plotly" / "__init__.py").write_text("raise ImportError('no plotly here')\n")
    proc = cli("report", str(d), "-o", str(tmp_path / "r.html"),
               env={"PYTHONPATH": os.pathsep.join(
                   p for p in (str(blocker), os.environ.get("PYTHONPATH")) if p)})
    assert proc.returncode == 3
    # The hint is a command that works where the package is (a clone's or a
    # local wheel's NAME[report] is on no index): the extra's requirements.
    assert "pip install 'plotly>=5.0' (the 'report' extra)" in proc.stderr, proc.stderr
    assert not (tmp_path / "r.html").exists()


@needs_plotly
def test_bad_inputs(tmp_path):
    proc = cli("report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and "nope" in proc.stderr
    proc = cli("report", str(tmp_path), "-o", str(tmp_path / "missing" / "r.html"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_what_counts_as_waiting_and_computing():
    from dftracer.tools.analysis import COMPUTE, WAIT, event_class, step_kind

    assert event_class("dataloader", "fetch.iter") == WAIT
    assert event_class("dataloader", "fetch") == WAIT
    assert event_class("dataloader", "fetch.block") == 0  # the loop body, not the wait
    assert event_class("pipeline", "train.iter") == WAIT
    assert event_class("PP", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__") == WAIT
    assert event_class("PP", "aten::mm") == COMPUTE
    assert event_class("PP", "ProfilerStep#7") == 0
    assert event_class("PP", "[memory]") == 0
    assert event_class("compute", "forward") == COMPUTE
    assert event_class("dynamo", "function.mm.default") == COMPUTE
    assert event_class("POSIX", "read") == 0
    assert step_kind("PP", "ProfilerStep#12") == "profiler"
    assert step_kind("PP", "ProfilerStep*") is None
    assert step_kind("pipeline", "train.block") == "train"
    assert step_kind("pipeline", "epoch.block") is None


# ---- the C event reader ------------------------------------------------------

def test_event_reader_yields_the_complete_events(train):
    from dftracer import _core
    from dftracer.tools.line_keys import unescape as _unescape

    _, paths = train
    # cat and name come as written, JSON escapes and all
    got = [(_unescape(c), _unescape(n), *rest) for batch in _core._EventReader(paths[0])
           for c, n, *rest in batch]
    assert any("\\" in n for batch in _core._EventReader(paths[0]) for _, n, *_ in batch)
    want = [(e["cat"], e["name"], e["pid"], e["tid"], e["ts"], e["dur"],
             e["args"]["size"] if e["name"] == "read" else -1)
            for e in read_trace(paths[0]).user_events()]
    assert got == want


def test_event_reader_on_odd_files(tmp_path):
    import gzip as gz

    from dftracer import _core

    lines = ['[',
             '{"id":1,"name":"a\\u00e9","cat":"c","pid":1,"tid":2,"ts":10,"dur":5,"ph":"X"}',
             'not json',
             '{"id":2,"name":"i","cat":"c","pid":1,"tid":2,"ts":11,"ph":"i"}',
             '{"id":3,"name":"start","cat":"dftracer","pid":1,"tid":2,"ts":1,"dur":0,"ph":"X"}',
             '{"id":4,"name":"read","cat":"POSIX","pid":1,"tid":2,"ts":12,"dur":1,"ph":"X",'
             '"args":{"ret":7,"count":9}}']
    old = b'{"id":5,"name":"x\xff","cat":"c","pid":1,"tid":2,"ts":13,"dur":2,"ph":"X"}\n'
    p = tmp_path / "t.pfw"
    p.write_bytes(("\n".join(lines) + "\n").encode() + old)
    r = _core._EventReader(str(p))
    got = [ev for batch in r for ev in batch]
    assert r.status == "ok"
    # escapes are left as written (as summary keys them); bad UTF-8 is replaced
    assert got == [("c", "a\\u00e9", 1, 2, 10, 5, -1), ("POSIX", "read", 1, 2, 12, 1, 7),
                   ("c", "x\ufffd", 1, 2, 13, 2, -1)]
    # a torn gzip tail: the readable events, then status "truncated"
    many = "".join('{"id":%d,"name":"n%d","cat":"c","pid":1,"tid":1,"ts":%d,"dur":1,"ph":"X"}\n'
                   % (i, i % 7, i) for i in range(10000)).encode()
    data = gz.compress(many)
    q = tmp_path / "torn.pfw.gz"
    q.write_bytes(data[: len(data) - 50])
    r = _core._EventReader(str(q))
    batches = list(r)
    assert r.status == "truncated" and r.message
    assert all(len(b) <= 4096 for b in batches)
    n = sum(len(b) for b in batches)
    assert 5000 < n < 10000
    assert [ev[4] for b in batches for ev in b] == list(range(n))
    with pytest.raises(FileNotFoundError):
        _core._EventReader(str(tmp_path / "missing.pfw"))
    with pytest.raises(TypeError):
        _core._EventReader(3.5)


def _slow(x):
    import time as _t

    _t.sleep(1.6)
    return {"events": x}


def test_progress_moves_while_one_long_file_is_read(capsys):
    """On a terminal (--progress) the bar is drawn while a single long file is
    still being read, not only when it is done."""
    from dftracer.tools import runner

    assert runner.run(_slow, [7], jobs=1, label="report", progress=True) == [{"events": 7}]
    err = capsys.readouterr().err
    assert "\rreport [" in err and "0/1 files, 0 events" in err  # drawn before the end
    assert "1/1 files, 7 events" in err and err.endswith("\n")
    assert runner.run(_slow, [1], jobs=1, progress=False) == [{"events": 1}]
    assert capsys.readouterr().err == ""


def test_sort_spans_orders_by_start_longest_first():
    from array import array

    from dftracer import _core

    ts = array("q", [5, 1, 5, 3, 1, 5])
    dur = array("q", [1, 2, 9, 0, 7, 1])
    order = array("q", bytes(8 * len(ts)))
    _core._sort_spans(ts, dur, order)
    assert list(order) == [4, 1, 3, 2, 0, 5]  # equal spans keep their file order
    empty = array("q")
    _core._sort_spans(empty, empty, array("q"))
    with pytest.raises(ValueError, match="length"):
        _core._sort_spans(ts, dur, array("q", [0]))
    with pytest.raises(TypeError, match="int64"):
        _core._sort_spans(array("i", [1] * 6), dur, order)
    with pytest.raises(TypeError, match="order"):
        _core._sort_spans(ts, dur, bytes(48))  # not writable
    with pytest.raises(TypeError):
        _core._sort_spans(ts, dur)


# One process, no rank: a train loop whose every step reads one of 20 sample
# files of the same size (the I/O section's table of files has 20 rows)
SAMPLES = """
import os, time
from dftracer.python import ai, dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
for i in range(20):
    with open(os.path.join("data", f"sample{{i:02d}}.bin"), "wb") as f:
        f.write(bytes(4096))
for step in ai.pipeline.train.iter(range(20)):
    with open(os.path.join("data", f"sample{{step:02d}}.bin"), "rb") as f:
        f.read()
    with ai.compute.forward:
        time.sleep(0.005)
log.finalize()
"""


@needs_plotly
def test_a_single_process_report_answers_first(tmp_path):
    """issue 71: the first screen of one process's report says where its
    traced time went (the classes' shares of the events' self time, as the
    events give them) and the per-step chart comes right after, before the
    tables (the 20 identical sample files of the I/O section)."""
    import re

    from dftracer.tools import classes, ranks

    d = tmp_path / "job"
    (d / "data").mkdir(parents=True)
    run_python(SAMPLES.format(stem=str(d / "trace")),
               env={"DFTRACER_ENABLE": "1", "DFTRACER_DATA_DIR": str(d / "data")}, cwd=str(d))
    (path,) = find_traces(str(d))
    data = report([path], tmp_path / "r.html")
    assert data["rank_analysis"] is None and len(data["steps"]) == 20
    page = (tmp_path / "r.html").read_text()
    page = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # plotly.js, the data
    heads = re.findall(r"<h2[^>]*>(.*?)</h2>", page)
    assert heads[:3] == ["Verdict", "Time per step", "By category"], heads
    files_head = next(h for h in heads if h.startswith("I/O: top files"))
    assert heads.index("Time per step") < heads.index(files_head)
    files_table = page.split(files_head, 1)[1].split("</table>", 1)[0]
    assert files_table.count("<tr>") == 1 + 20  # the tables' rows come after the chart
    # the shares, from the events: self time per class, the tracer's own in none
    by = dict.fromkeys(classes.CLASSES, 0)
    for (cat, name), v in self_times(read_trace(path).user_events()).items():
        cls = classes.traced_class(cat, name)
        if cls is not None:
            by[cls] += v
    total = sum(by.values())
    assert by["compute"] >= 0.5 * total  # the sleeps: 20 x 5 ms
    items = re.findall(r"<li[^>]*>(.*?)</li>", page.split("<h2>Time per step</h2>", 1)[0])
    (line,) = [i for i in items if i.startswith("Traced time")]
    want = [f"{100 * v / total:.0f} % {ranks.LABELS[c]}"
            for c, v in sorted(by.items(), key=lambda kv: -kv[1]) if v >= 0.05 * total]
    assert re.findall(r"\d+ % [a-zI/ ]+?(?=, |\s\(|\.$)", line.replace("&#x27;", "'")) == want, line
