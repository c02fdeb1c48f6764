"""ProfilerContext, profile_function, @profiler/step_profiler and the CLI flags
on CPU torch (docs/profiler.md)."""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import functools
import inspect
import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from tracefile import find_traces, read_trace, run_python  # noqa: E402

from dftracer.python.torch import (  # noqa: E402
    ProfilerContext,
    add_profiler_args,
    create_profiler_from_args,
    profile_function,
    profiler,
    step_profiler,
)
from dftracer.python.torch import _outputs  # noqa: E402
from dftracer.python.torch._options import PROFILER_DEFAULTS, ProfilerOptions  # noqa: E402

CUDA = torch.cuda.is_available()
NEEDS_CUDA = "needs a CUDA device; this torch/machine has none"
try:
    from dftracer.python.torch import trace_handler  # type: ignore[attr-defined]  # noqa: F401

    HAS_TRACE_HANDLER = True
except ImportError:
    HAS_TRACE_HANDLER = False

TB_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ns>\d+)\.pt\.trace\.json\.gz$")


@pytest.fixture(autouse=True)
def _no_rank_env(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)


MODEL = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
BATCH = torch.randn(8, 16)


def train_step():
    MODEL(BATCH).sum().backward()


def load(path: Path) -> dict:
    """The file must be one complete JSON object inside gzip."""
    with gzip.open(path, "rb") as f:
        data = json.loads(f.read())
    assert isinstance(data, dict)
    assert isinstance(data["traceEvents"], list) and data["traceEvents"]
    for ev in data["traceEvents"]:
        assert isinstance(ev, dict) and "ph" in ev and "name" in ev
    return data


def step_numbers(data: dict) -> list:
    return sorted(int(e["name"].split("#")[1]) for e in data["traceEvents"]
                  if e["name"].startswith("ProfilerStep#") and e["ph"] == "X")


def run_steps(ctx: ProfilerContext, steps: int) -> ProfilerContext:
    with ctx:
        for _ in range(steps):
            train_step()
            ctx.step()
    return ctx


def ctx(tmp_path, **kw) -> ProfilerContext:
    kw.setdefault("summary", False)
    kw.setdefault("profile_name", "p")
    return ProfilerContext(output_dir=tmp_path, **kw)


# ---------------------------------------------------------------- the trace file


def test_default_trace_file_contents(tmp_path):
    c = run_steps(ctx(tmp_path), 6)
    assert c.output_dir == tmp_path
    assert isinstance(c.trace_path, Path)
    assert c.trace_path == tmp_path / "p-rank0.trace.json.gz"
    assert sorted(os.listdir(tmp_path)) == ["p-rank0.trace.json.gz"]
    data = load(c.trace_path)
    assert data["distributedInfo"] == {"rank": 0, "world_size": 1}
    # defaults: wait 0, warmup 1, active 3: step 0 warms up, steps 1-3 recorded
    assert step_numbers(data) == [1, 2, 3]
    names = collections.Counter(e["name"] for e in data["traceEvents"])
    assert names["aten::addmm"] == 2 * 3  # two Linear layers per step
    assert data["record_shapes"] == 1 and data["with_flops"] == 1
    assert "with_stack" not in data and "profile_memory" not in data


@pytest.mark.parametrize(
    "schedule, steps, expected",
    [
        (dict(wait=0, warmup=1, active=3, repeat=1), 8, [[1, 2, 3]]),
        (dict(wait=1, warmup=0, active=2, repeat=2), 10, [[1, 2], [4, 5]]),
        (dict(skip_first=2, wait=0, warmup=2, active=1, repeat=1), 8, [[4]]),
        (dict(wait=1, warmup=1, active=2, repeat=0), 9, [[2, 3], [6, 7]]),
        # leaving in the middle of an active window writes the partial cycle
        (dict(wait=0, warmup=1, active=4, repeat=1), 3, [[1, 2, 3]]),
        (dict(wait=0, warmup=0, active=1, repeat=3), 5, [[0], [1], [2]]),
    ],
)
def test_schedule_decides_which_steps_are_written(tmp_path, schedule, steps, expected):
    c = run_steps(ctx(tmp_path, **schedule), steps)
    names = [f"p-rank0{'' if i == 0 else f'-cycle{i}'}.trace.json.gz" for i in range(len(expected))]
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert c.trace_paths == [tmp_path / n for n in names]
    for path, want in zip(c.trace_paths, expected):
        data = load(path)
        assert step_numbers(data) == want
        ran = [s for s in want if s < steps]  # a step begun at exit is empty
        assert collections.Counter(e["name"] for e in data["traceEvents"])["aten::addmm"] == 2 * len(ran)


def test_block_that_never_steps_is_profiled_whole(tmp_path):
    with ctx(tmp_path, skip_first=1, wait=1) as c:
        train_step()
        train_step()
    data = load(c.trace_path)
    assert step_numbers(data) == []
    assert collections.Counter(e["name"] for e in data["traceEvents"])["aten::addmm"] == 4


def test_nothing_written_when_the_schedule_never_records(tmp_path):
    c = run_steps(ctx(tmp_path, wait=5), 3)
    assert c.trace_paths == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "option, key, category",
    [
        ("with_stack", "with_stack", "python_function"),
        ("profile_memory", "profile_memory", "cpu_instant_event"),
    ],
)
def test_recording_options_change_the_events(tmp_path, option, key, category):
    def categories(**kw):
        c = run_steps(ctx(tmp_path / str(kw), warmup=0, active=1, **kw), 1)
        data = load(c.trace_path)
        return data, collections.Counter(e.get("cat") for e in data["traceEvents"])

    off, off_cats = categories()
    on, on_cats = categories(**{option: True})
    assert key not in off and on[key] == 1
    assert off_cats[category] == 0 and on_cats[category] > 0


def test_record_shapes_and_flops_off(tmp_path):
    c = run_steps(ctx(tmp_path, warmup=0, active=1, record_shapes=False, with_flops=False), 1)
    data = load(c.trace_path)
    assert "record_shapes" not in data and "with_flops" not in data
    addmm = [e for e in data["traceEvents"] if e["name"] == "aten::addmm"]
    assert addmm and all("Input Dims" not in e.get("args", {}) for e in addmm)
    c = run_steps(ctx(tmp_path, profile_name="q", warmup=0, active=1), 1)
    addmm = [e for e in load(c.trace_path)["traceEvents"] if e["name"] == "aten::addmm"]
    assert addmm and all("Input Dims" in e["args"] for e in addmm)


def test_export_chrome_off_and_tensorboard_on(tmp_path):
    c = run_steps(ctx(tmp_path, export_chrome=False, tensorboard=True, wait=1, warmup=0, active=1, repeat=2), 5)
    assert c.trace_paths == []
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and [tmp_path / f for f in files] == sorted(c.tensorboard_paths)
    for name in files:
        match = TB_NAME.match(name)
        assert match, name
        assert match["worker"].endswith("_p-rank0")
        assert load(tmp_path / name)["distributedInfo"]["rank"] == 0
    assert [step_numbers(load(p)) for p in c.tensorboard_paths] == [[1], [3]]


def test_no_uncompressed_copy_is_written(tmp_path, monkeypatch):
    """torch's own `.gz` export goes through tempfile; ours must not."""
    import tempfile

    def refuse(*a, **k):
        raise AssertionError("a temporary file was created")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    c = run_steps(ctx(tmp_path, warmup=0, active=2), 2)
    assert step_numbers(load(c.trace_path)) == [0, 1]


def test_fallback_for_torch_without_streaming_export(tmp_path, monkeypatch):
    """Older torch: Kineto writes into RAM (/dev/shm), we gzip from there,
    adding distributedInfo, and leave no scratch behind."""
    monkeypatch.setattr(_outputs, "_streams_gzip", lambda inner: False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    c = run_steps(ctx(tmp_path, warmup=0, active=2, tensorboard=True), 2)
    assert c.trace_path.name == "p-rank3.trace.json.gz"
    data = load(c.trace_path)
    assert data["distributedInfo"] == {"rank": 3, "world_size": 4}
    assert step_numbers(data) == [0, 1]
    assert load(c.tensorboard_paths[0]) == data
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not {n for n in after - before if n.startswith("dftracer-prof-")}
    assert sorted(os.listdir(tmp_path)) == sorted(["p-rank3.trace.json.gz", c.tensorboard_paths[0].name])


def test_rank_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert _outputs.resolve_rank() == (2, 3)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert _outputs.resolve_rank() == (5, 8)
    monkeypatch.setenv("RANK", "junk")
    assert _outputs.resolve_rank() == (2, 8)


def test_enabled_false_does_nothing(tmp_path):
    out = tmp_path / "never"
    c = ProfilerContext(enabled=False, output_dir=out)
    with c:
        train_step()
        c.step()
        step_profiler()
    assert not out.exists() and c.trace_paths == []


def test_env_sets_default_output_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_PROFILER_DIR", str(tmp_path / "envdir"))
    c = run_steps(ProfilerContext(profile_name="e", summary=False, warmup=0, active=1), 1)
    assert c.output_dir == tmp_path / "envdir"
    assert c.trace_path.parent == tmp_path / "envdir" and c.trace_path.exists()
    monkeypatch.delenv("DFTRACER_PROFILER_DIR")
    monkeypatch.chdir(tmp_path)
    assert ProfilerContext(enabled=False).output_dir == Path("./profiler_logs")


# ---------------------------------------------------------------- summary


def test_summary_on_rank0_with_flops(tmp_path, capsys):
    run_steps(ctx(tmp_path, summary=True, warmup=0, active=2), 2)
    out = capsys.readouterr().out
    assert "p rank 0 cycle 0: top" in out and "by self cpu time" in out
    assert "GFLOP/s" in out and "FLOPs total:" in out
    row = [line for line in out.splitlines() if line.startswith("aten::addmm")]
    assert row and re.search(r"\d+\.\d+K\s+\d+\.\d+$", row[0]), row
    # calls column: two addmm per step, two steps
    assert row[0].split()[2] == "4"


def test_summary_without_flops_and_off(tmp_path, capsys):
    run_steps(ctx(tmp_path, summary=True, with_flops=False, warmup=0, active=1), 1)
    out = capsys.readouterr().out
    assert "top" in out and "GFLOP/s" not in out and "FLOPs" not in out
    run_steps(ctx(tmp_path, profile_name="s", summary=False, warmup=0, active=1), 1)
    assert capsys.readouterr().out == ""


def test_summary_only_on_rank0(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    c = run_steps(ctx(tmp_path, summary=True, warmup=0, active=1), 1)
    assert capsys.readouterr().out == ""
    assert c.trace_path.name == "p-rank1.trace.json.gz"


# ---------------------------------------------------------------- CUDA-only parts


def test_mem_and_nsight_say_they_need_cuda(tmp_path, capfd):
    if CUDA:
        pytest.skip("this machine has CUDA; the CPU message is not printed")
    c = run_steps(ctx(tmp_path, activities=["CPU", "MEM"], nsight_enabled=True, warmup=0, active=1), 1)
    err = capfd.readouterr().err.splitlines()
    assert sum("MEM activity needs CUDA" in line for line in err) == 1
    assert sum("nsight_enabled needs CUDA" in line for line in err) == 1
    assert c.memory_paths == [] and os.listdir(tmp_path) == ["p-rank0.trace.json.gz"]


def test_mem_only_on_cpu_profiles_nothing(tmp_path, capfd):
    if CUDA:
        pytest.skip("this machine has CUDA; the CPU message is not printed")
    c = run_steps(ctx(tmp_path, activities=["mem"], warmup=0, active=1), 1)
    assert c.trace_paths == [] and os.listdir(tmp_path) == []
    assert "MEM activity needs CUDA" in capfd.readouterr().err


def test_torch_profiler_already_running(tmp_path, capfd):
    """A user's own torch.profiler holds Kineto: ours says so and the block runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as theirs:
        with ctx(tmp_path, warmup=0, active=2) as c:
            for _ in range(2):
                train_step()
                c.step()
    assert any(e.name == "aten::addmm" for e in theirs.events())
    assert "profiling is off" in capfd.readouterr().err
    assert c.trace_paths == []


@pytest.mark.skipif(not CUDA, reason=NEEDS_CUDA)
def test_mem_on_cuda_writes_snapshot_and_summary(tmp_path):
    model = torch.nn.Linear(64, 64).cuda()
    with ctx(tmp_path, activities=["CPU", "GPU", "MEM"], warmup=0, active=2) as c:
        for _ in range(2):
            model(torch.randn(8, 64, device="cuda")).sum().backward()
            c.step()
    pickles = [p for p in c.memory_paths if p.suffix == ".pickle"]
    texts = [p for p in c.memory_paths if p.suffix == ".txt"]
    assert len(pickles) == 1 and pickles[0].name.startswith("p-rank0-memory-")
    import pickle

    assert "segments" in pickle.loads(pickles[0].read_bytes())
    assert "PyTorch CUDA memory summary" in texts[0].read_text()
    data = load(c.trace_path)
    assert any(e.get("cat") == "kernel" for e in data["traceEvents"])


@pytest.mark.skipif(not CUDA, reason=NEEDS_CUDA)
def test_nsight_on_cuda_runs_and_summary_by_device_time(tmp_path, capsys):
    model = torch.nn.Linear(64, 64).cuda()
    with ctx(tmp_path, summary=True, nsight_enabled=True, warmup=1, active=2) as c:
        for _ in range(4):
            model(torch.randn(8, 64, device="cuda")).sum().backward()
            c.step()
    assert "by self device time" in capsys.readouterr().out
    assert step_numbers(load(c.trace_path)) == [1, 2]


# ---------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(active=0), "active"),
        (dict(active=-2), "active"),
        (dict(active=1.5), "active"),
        (dict(wait=-1), "wait"),
        (dict(warmup=-1), "warmup"),
        (dict(repeat=-1), "repeat"),
        (dict(skip_first=-3), "skip_first"),
        (dict(activities=["CPU", "TPU"]), "TPU"),
        (dict(activities=[]), "activities"),
        (dict(profile_name="a/b"), "profile_name"),
    ],
)
def test_bad_options_raise_value_error(tmp_path, kw, word):
    for make in (
        lambda: ProfilerContext(output_dir=tmp_path / "x", **kw),
        lambda: profile_function(output_dir=tmp_path / "x", **kw),
        lambda: profiler(output_dir=tmp_path / "x", **kw),
    ):
        with pytest.raises(ValueError, match=word):
            make()
    assert not (tmp_path / "x").exists()


def test_unwritable_output_dir_raises_before_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError, match=re.escape(str(blocker / "sub"))):
        ProfilerContext(output_dir=blocker / "sub")
    with pytest.raises(OSError, match="is not a directory"):
        ProfilerContext(output_dir=blocker)
    ran = []

    @profiler(output_dir=blocker / "sub")
    def train():
        ran.append(1)

    with pytest.raises(OSError, match="output_dir"):
        train()
    assert ran == []


# ---------------------------------------------------------------- one definition of the options

DOCS = Path(__file__).resolve().parents[2] / "docs" / "profiler.md"
FIELDS = {f.name: f for f in dataclasses.fields(ProfilerOptions)}
PROSE = object()


def docs_table(heading: str) -> list:
    section = DOCS.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return rows[2:]  # after the header and its |---| line


def literal(cell: str):
    m = re.fullmatch(r"`([^`]*)`", cell)
    try:
        return ast.literal_eval(m.group(1)) if m else PROSE
    except (ValueError, SyntaxError):
        return PROSE


def test_options_table_in_the_docs_is_the_options_dataclass():
    rows = {row[0].strip("`"): row for row in docs_table("Options")}
    assert set(rows) == set(FIELDS)
    for name, f in FIELDS.items():
        _, default, profiler_default, _ = rows[name]
        if f.default is None:  # the docs say what None means
            if f.metadata["env"]:
                assert f"${f.metadata['env']}" in default, name
            continue
        assert literal(default) == f.default, name
        got = f.default if profiler_default == "same" else literal(profiler_default)
        assert got == PROFILER_DEFAULTS.get(name, f.default), name


def test_flags_table_in_the_docs_is_the_parser():
    parser = add_profiler_args(argparse.ArgumentParser())
    flags = {s for a in parser._actions for s in a.option_strings
             if s.startswith(("--profile", "--track-memory"))}
    flags.discard("--no-profile-record-shapes")  # argparse's other half of the switch
    documented = {flag for row in docs_table("Command-line flags")
                  for flag in re.findall(r"`(--profile[a-z-]*|--track-memory)", row[0])}
    assert documented == flags == {f.metadata["flag"] for f in FIELDS.values() if f.metadata["flag"]}


def test_parameter_lists_are_the_options(tmp_path):
    sig = inspect.signature(ProfilerContext)
    assert list(sig.parameters) == list(FIELDS)
    # callers pass these by position: the field order must not change
    positional = [n for n, p in sig.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["enabled", "activities", "output_dir", "profile_name", "with_stack",
                          "record_shapes", "profile_memory", "with_flops", "wait", "warmup",
                          "active", "repeat", "skip_first", "export_chrome", "tensorboard",
                          "summary"]
    assert {n: p.default for n, p in sig.parameters.items()} == {n: f.default for n, f in FIELDS.items()}
    for fn, defaults in ((profile_function, {}), (profiler, PROFILER_DEFAULTS)):
        params = inspect.signature(fn).parameters
        assert list(params) == ["_func", *FIELDS]
        assert all(p.kind is p.KEYWORD_ONLY for n, p in params.items() if n != "_func")
        assert {n: p.default for n, p in params.items() if n != "_func"} == {
            n: defaults.get(n, f.default) for n, f in FIELDS.items()}
    c = ProfilerContext(False, "cuda", tmp_path, "pos", True, False, True, False, 2, 0, 4, 5, 1,
                        False, True, False, nsight_output="n")
    assert c._opts == ProfilerOptions(
        enabled=False, activities=["GPU"], output_dir=tmp_path, profile_name="pos", with_stack=True,
        record_shapes=False, profile_memory=True, with_flops=False, wait=2, warmup=0, active=4,
        repeat=5, skip_first=1, export_chrome=False, tensorboard=True, summary=False,
        nsight_output="n")


def test_bad_calls_raise_type_error_naming_the_function(tmp_path):
    for make, owner in ((lambda: ProfilerContext(bogus=1), "ProfilerContext"),
                        (lambda: profile_function(bogus=1), "profile_function"),
                        (lambda: profiler(bogus=1), "profiler")):
        with pytest.raises(TypeError, match=rf"^{owner}\(\) got an unexpected keyword argument 'bogus'"):
            make()
    with pytest.raises(TypeError, match="too many positional"):
        profile_function(train_step, True)
    with pytest.raises(TypeError, match="too many positional"):
        ProfilerContext(*[True] * 17)


# ---------------------------------------------------------------- decorators


def test_profile_function_names_file_after_function(tmp_path):
    @profile_function(output_dir=tmp_path, summary=False, warmup=0, active=2)
    def forward_pass(n):
        for _ in range(n):
            train_step()
            step_profiler()
        return "done"

    assert forward_pass(3) == "done"
    assert forward_pass.__name__ == "forward_pass"
    assert step_numbers(load(tmp_path / "forward_pass-rank0.trace.json.gz")) == [0, 1]


def test_profiler_decorator_defaults(tmp_path, monkeypatch):
    """Seed 002 defaults: skip_first 1, wait 1, warmup 1, active 3, TensorBoard on."""
    monkeypatch.chdir(tmp_path)

    @profiler(summary=False)
    def train_model():
        for _ in range(10):
            train_step()
            step_profiler()

    train_model()
    out = tmp_path / "profiler_logs"
    chrome = load(out / "train_model-rank0.trace.json.gz")
    assert step_numbers(chrome) == [3, 4, 5]
    tb = [n for n in os.listdir(out) if TB_NAME.match(n)]
    assert len(tb) == 1 and step_numbers(load(out / tb[0])) == [3, 4, 5]


def test_bare_decorators(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_PROFILER_DIR", str(tmp_path))

    @profile_function
    def a():
        train_step()

    @profiler
    def b():
        train_step()

    a()
    b()
    assert (tmp_path / "a-rank0.trace.json.gz").exists()
    assert (tmp_path / "b-rank0.trace.json.gz").exists()


def test_decorators_compose_and_exceptions_propagate(tmp_path):
    calls = []

    def outer(func):
        @functools.wraps(func)
        def wrapper(*a, **k):
            calls.append("outer")
            return func(*a, **k)

        return wrapper

    @outer
    @profiler(output_dir=tmp_path, summary=False, tensorboard=False, skip_first=0, wait=0, warmup=0, active=5)
    @outer
    def failing(steps):
        for _ in range(steps):
            train_step()
            step_profiler()
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        failing(2)
    assert calls == ["outer", "outer"]
    assert failing.__wrapped__.__wrapped__.__name__ == "failing"
    # the partial window was still written
    assert step_numbers(load(tmp_path / "failing-rank0.trace.json.gz")) == [0, 1, 2]
    step_profiler()  # no profiler running: nothing happens


def test_nested_profiler_records_nothing(tmp_path, capfd):
    with ctx(tmp_path, warmup=0, active=1) as outer:
        with ctx(tmp_path, profile_name="inner") as inner:
            train_step()
            inner.step()
    assert inner.trace_paths == [] and outer.trace_paths
    assert "another profiler is already running" in capfd.readouterr().err


# ---------------------------------------------------------------- CLI


def test_cli_defaults_match_seed():
    args = add_profiler_args(argparse.ArgumentParser()).parse_args([])
    assert (args.profile, args.profile_name, args.profile_dir) == (False, None, None)
    assert args.profile_activities == ["CPU", "GPU"]
    assert (args.profile_with_stack, args.profile_record_shapes) == (False, True)
    assert (args.profile_wait, args.profile_warmup, args.profile_active, args.profile_repeat) == (0, 1, 3, 1)
    assert create_profiler_from_args(args).enabled is False


def test_cli_flags_reach_the_context(tmp_path):
    parser = add_profiler_args(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--profile", "--profile-name", "flux_test", "--profile-dir", str(tmp_path),
         "--profile-activities", "cpu", "MEM", "--profile-with-stack", "--no-profile-record-shapes",
         "--profile-wait", "1", "--profile-warmup", "0", "--profile-active", "2", "--profile-repeat", "2"]
    )
    c = create_profiler_from_args(args, profile_name="ignored_when_flag_given")
    assert c.enabled and c.profile_name == "flux_test" and c.output_dir == tmp_path
    run_steps(c, 6)
    assert [step_numbers(load(p)) for p in c.trace_paths] == [[1, 2], [4, 5]]
    data = load(c.trace_paths[0])
    assert data["with_stack"] == 1 and "record_shapes" not in data
    assert create_profiler_from_args(parser.parse_args(["--profile", "--profile-dir", str(tmp_path)]),
                                     profile_name="flux_inference").profile_name == "flux_inference"


@pytest.mark.parametrize("argv", [["--profile-active", "0"], ["--profile-wait", "-1"],
                                  ["--profile-activities", "TPU"]])
def test_cli_rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit):
        add_profiler_args(argparse.ArgumentParser()).parse_args(argv)
    assert argv[0] in capsys.readouterr().err


# ---------------------------------------------------------------- ranks and distributed

RANK_SCRIPT = """
import sys, torch
from dftracer.python.torch import ProfilerContext
m = torch.nn.Linear(8, 8)
with ProfilerContext(output_dir=sys.argv[1], profile_name="job", warmup=0, active=2) as c:
    for _ in range(2):
        m(torch.randn(4, 8)).sum().backward()
        c.step()
print("TRACE", c.trace_path)
"""


def _env(extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update(extra)
    return env


def test_two_ranks_as_subprocesses(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(tmp_path)], env=_env(
        {"RANK": str(r), "WORLD_SIZE": "2"}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(os.listdir(tmp_path)) == ["job-rank0.trace.json.gz", "job-rank1.trace.json.gz"]
    infos = [load(tmp_path / f"job-rank{r}.trace.json.gz")["distributedInfo"] for r in (0, 1)]
    assert infos == [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]
    assert "top" in outs[0][0] and "top" not in outs[1][0]  # summary on rank 0 only
    assert f"TRACE {tmp_path}/job-rank1.trace.json.gz" in outs[1][0]


DIST_SCRIPT = """
import sys, torch, torch.distributed as dist
from dftracer.python.torch import profiler, step_profiler

@profiler(output_dir=sys.argv[1], skip_first=0, wait=0, warmup=0, active=2, tensorboard=True)
def distributed_train(rank):
    # the function starts torch.distributed itself, after the decorator ran
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    t = torch.ones(4)
    for _ in range(2):
        dist.all_reduce(t)
        step_profiler()
    dist.destroy_process_group()
    return float(t[0])

print("RESULT", distributed_train(int(sys.argv[3])))
"""


def test_function_that_starts_torch_distributed(tmp_path):
    out, store = tmp_path / "out", tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", DIST_SCRIPT, str(out), str(store), str(r)],
                              env=_env({}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("RESULT 4.0" in o for o, _ in outs)
    for r in (0, 1):
        info = load(out / f"distributed_train-rank{r}.trace.json.gz")["distributedInfo"]
        assert info["rank"] == r and info["world_size"] == 2 and info["backend"] == "gloo"
    workers = sorted(TB_NAME.match(n)["worker"] for n in os.listdir(out) if TB_NAME.match(n))
    assert len(workers) == 2
    assert [w.endswith(f"_distributed_train-rank{r}") for r, w in enumerate(workers)] == [True, True]


# ---------------------------------------------------------------- PP events


@pytest.mark.skipif(not HAS_TRACE_HANDLER, reason="dftracer.python.torch.trace_handler is not available "
                    "in this build (issue 4); PP events cannot be written")
def test_pp_events_for_the_profiled_steps(tmp_path):
    run_python(
        """
        import torch
        from dftracer.python import dftracer
        from dftracer.python.torch import ProfilerContext
        log = dftracer.initialize_log("run.pfw", None, -1)
        m = torch.nn.Linear(8, 8)
        with ProfilerContext(output_dir="out", profile_name="pp", summary=False, wait=1, warmup=1, active=2) as c:
            for _ in range(6):
                m(torch.randn(4, 8)).sum().backward()
                c.step()
        log.finalize()
        """,
        env={"DFTRACER_ENABLE": "1"}, cwd=str(tmp_path),
    )
    paths = find_traces(str(tmp_path), "run")
    assert len(paths) == 1
    pp = read_trace(paths[0]).of("X", cat="PP")
    chrome = load(tmp_path / "out" / "pp-rank0.trace.json.gz")
    steps = sorted(e["name"] for e in pp if e["name"].startswith("ProfilerStep"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    cpu_ops = collections.Counter(e["name"] for e in chrome["traceEvents"] if e.get("cat") == "cpu_op")
    assert collections.Counter(e["name"] for e in pp)["aten::addmm"] == cpu_ops["aten::addmm"] == 2


# ---------------------------------------------------------------- seed usage patterns


@pytest.fixture
def run_seed(monkeypatch, capfd):
    """Runs a seed's code unchanged as __main__ in `cwd` with `args` as argv;
    returns what it printed (.out, .err)."""

    def run(code: str, cwd: Path, args=()):
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["seed.py", *args])
        capfd.readouterr()
        exec(compile(textwrap.dedent(code), "seed.py", "exec"), {"__name__": "__main__"})
        return capfd.readouterr()

    return run


def test_seed_002_basic_usage(tmp_path, run_seed):
    run_seed(
        """
        import torch
        from dftracer.python.torch import profiler, step_profiler
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = torch.randn(4, 8)

        @profiler()  # Uses sensible defaults: with_flops=True, active=3 steps
        def train_model(args):
            # Your training code here
            for step in range(100):
                # Training step
                loss = model(batch).sum()
                loss.backward()
                optimizer.step()

                # Important: Step the profiler
                step_profiler()

        train_model(None)
        """,
        tmp_path,
    )
    data = load(tmp_path / "profiler_logs" / "train_model-rank0.trace.json.gz")
    assert step_numbers(data) == [3, 4, 5]


def test_seed_002_composed_with_other_decorator(tmp_path, run_seed):
    proc = run_seed(
        """
        import functools
        from dftracer.python.torch import profiler

        def ray(num_nodes, gpus_per_node):  # stands in for the launcher decorator
            def deco(fn):
                @functools.wraps(fn)
                def run(*a, **k):
                    return fn(*a, **k)
                return run
            return deco

        @ray(num_nodes=2, gpus_per_node=4)
        @profiler(
            enabled=True,
            output_dir="./profiles",
            active=10,
            with_flops=True,
            nsight_enabled=True
        )
        def distributed_train(args):
            # Distributed training code
            pass

        distributed_train(None)
        """,
        tmp_path,
    )
    assert (tmp_path / "profiles" / "distributed_train-rank0.trace.json.gz").exists()
    if not CUDA:
        assert "nsight_enabled needs CUDA" in proc.err


def test_seed_003_basic_usage_and_direct_api(tmp_path, run_seed):
    proc = run_seed(
        """
        import argparse, torch
        from dftracer.python.torch import ProfilerContext, add_profiler_args, create_profiler_from_args, profile_function

        parser = argparse.ArgumentParser()
        parser.add_argument("--steps", type=int, default=None)
        add_profiler_args(parser)
        args = parser.parse_args()
        model = torch.nn.Linear(8, 8)
        input = torch.randn(2, 8)

        def pipe(num_inference_steps):
            for _ in range(num_inference_steps):
                model(input)
            return [model(input)]

        def run_pipe():
            # Reduce steps when profiling to keep trace file small
            steps = args.steps if args.steps is not None else 28
            if args.profile and args.steps is None:
                steps = 3
            image = pipe(num_inference_steps=steps)[0]
            return image

        # Only create and use profiler when --profile is enabled
        if args.profile:
            profiler = create_profiler_from_args(args, profile_name="flux_inference")
            with profiler:
                image = run_pipe()
            print(f"Profiler traces saved to: {profiler.output_dir}/{profiler.trace_path.name}")
        else:
            image = run_pipe()

        with ProfilerContext(
            enabled=True,
            activities=["CPU", "GPU"],
            output_dir="profiles",
            profile_name="my_inference",
            with_stack=False,
            record_shapes=True,
        ):
            output = model(input)

        @profile_function(enabled=True, profile_name="forward_pass")
        def my_function():
            return model(input)

        my_function()
        """,
        tmp_path,
        args=["--profile", "--profile-dir", "profiles", "--profile-activities", "CPU", "GPU", "MEM"],
    )
    assert "Profiler traces saved to: profiles/flux_inference-rank0.trace.json.gz" in proc.out
    data = load(tmp_path / "profiles" / "flux_inference-rank0.trace.json.gz")
    assert collections.Counter(e["name"] for e in data["traceEvents"])["aten::addmm"] == 4
    assert (tmp_path / "profiles" / "my_inference-rank0.trace.json.gz").exists()
    assert (tmp_path / "profiler_logs" / "forward_pass-rank0.trace.json.gz").exists()


# Seed 004 exercises 1 and 4 unchanged; exercise 3 with the CPU activity
# (its CUDA-only form runs in test_seed_004_cuda_patterns).
SEED_004_CPU = """
import torch
from torch.profiler import profile, record_function, ProfilerActivity
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
input = torch.randn(4, 8)

with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    record_shapes=True,
) as prof:
    with record_function("model_inference"):
        output = model(input)

print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))

with profile(
    activities=[ProfilerActivity.CPU],
    profile_memory=True,
    with_stack=True,
) as prof:
    model(input)

# Memory timeline
print(prof.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=10))

# Export to Chrome trace format
prof.export_chrome_trace("trace.json")

# Export to TensorBoard
prof.export_stacks("stacks.txt", "self_cuda_time_total")

schedule = torch.profiler.schedule(
    wait=1,      # Steps to skip
    warmup=1,    # Warmup steps
    active=3,    # Steps to profile
    repeat=1     # Number of cycles
)

prof.key_averages(group_by_input_shape=True)
prof.key_averages(group_by_stack_n=5)
"""


def test_seed_004_cpu_patterns(tmp_path, run_seed):
    proc = run_seed(SEED_004_CPU, tmp_path)
    assert "model_inference" in proc.out and "Self CPU Mem" in proc.out
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


def test_seed_004_training_loop_with_profiler_context(tmp_path, run_seed):
    """Exercise 2's schedule (wait 1, warmup 1, active 3, repeat 2, memory,
    stacks, TensorBoard) through ProfilerContext on CPU."""
    c = ctx(tmp_path, wait=1, warmup=1, active=3, repeat=2, profile_memory=True, with_stack=True,
            tensorboard=True)
    run_steps(c, 12)
    assert [step_numbers(load(p)) for p in c.trace_paths] == [[2, 3, 4], [7, 8, 9]]
    assert [step_numbers(load(p)) for p in c.tensorboard_paths] == [[2, 3, 4], [7, 8, 9]]


@pytest.mark.skipif(not CUDA, reason=NEEDS_CUDA + " (seed 004 exercises 2-3 move data to .cuda())")
def test_seed_004_cuda_patterns(tmp_path, run_seed):
    run_seed(
        """
        import torch
        from torch.profiler import profile, ProfilerActivity
        model = torch.nn.Linear(8, 8).cuda()
        criterion = torch.nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(12)]
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
            on_trace_ready=torch.profiler.tensorboard_trace_handler('./logs'),
            record_shapes=True, profile_memory=True, with_stack=True,
        ) as prof:
            for step, (data, target) in enumerate(train_loader):
                optimizer.zero_grad()
                output = model(data.cuda())
                loss = criterion(output, target.cuda())
                loss.backward()
                optimizer.step()
                prof.step()

        def memory_profile(fn):
            def wrapper(*args, **kwargs):
                torch.cuda.reset_peak_memory_stats()
                result = fn(*args, **kwargs)
                peak_mem = torch.cuda.max_memory_allocated() / 1e9
                print(f"Peak memory: {peak_mem:.2f} GB")
                return result
            return wrapper

        memory_profile(model)(torch.randn(4, 8).cuda())

        input = torch.randn(4, 8).cuda()
        with profile(
            activities=[ProfilerActivity.CUDA],
            profile_memory=True,
        ) as prof:
            model(input)

        # Memory timeline
        print(prof.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=10))

        def profile_impl(name, fn, *args):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(100):
                    fn(*args)

            total_time = sum(e.cuda_time for e in prof.key_averages())
            print(f"{name}: {total_time/1000:.2f} ms")

        profile_impl("linear", model, input)
        """,
        tmp_path,
    )
    assert len(os.listdir(tmp_path / "logs")) == 2
