"""Events of an unchanged torch program under `dftracer run` (issue 26,
docs/ai.md "Events of an unchanged script"): the DDP example under torchrun,
a single-process script (two optimizers, gradient accumulation, a
checkpoint, torch.compile), an inference loop, and what happens when the
feature is off or one of its hooks fails."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

import autotrace_ddp as ddp  # noqa: E402
from tracefile import Trace, find_traces, read_trace, run_python  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "autotrace_prog.py")
WARNING = ("dftracer: warning: DFTRACER_TORCH='maybe' is not a boolean "
           "(1/true/yes/on or 0/false/no/off); using 1")


def traced(tmp_path, *command: str, options=(), **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(tmp_path / "t"), *options, "--", *command], cwd=str(tmp_path),
                          env=ddp.clean_env(**env), capture_output=True, text=True, timeout=300)


def plain(tmp_path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), cwd=str(tmp_path), env=ddp.clean_env(),
                          capture_output=True, text=True, timeout=300, check=True)


def one_trace(tmp_path) -> Trace:
    (path,) = find_traces(str(tmp_path), "t")
    return read_trace(path)


def args(e: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in e["args"].items() if k not in ("hhash", "level", "p_idx")}


def end(e: Dict[str, Any]) -> int:
    return e["ts"] + e["dur"]


def within(inner: Dict[str, Any], outer: Dict[str, Any]) -> bool:
    return outer["ts"] <= inner["ts"] and end(inner) <= end(outer)


def torch_events(trace: Trace) -> List[Dict[str, Any]]:
    cats = {"pipeline", "compute", "dataloader", "data", "comm", "checkpoint", "compile"}
    return [e for e in trace.user_events() if e["cat"] in cats]


def check_iterations(trace: Trace, n: int, epoch=None) -> List[Dict[str, Any]]:
    """n iterations, numbered 0.., one after the other on the main thread,
    each holding the step events that belong to it."""
    its = sorted(trace.of(cat="pipeline", name="iteration"), key=lambda e: e["ts"])
    assert [e["args"]["step"] for e in its] == list(range(n))
    for a, b in zip(its, its[1:]):
        assert end(a) <= b["ts"] + 1, (a, b)
    if epoch is not None:
        assert all(e["args"]["epoch"] == epoch for e in its)
    # the thread's CPU time and run-queue wait (docs/trace-format.md): both or
    # neither, never more than the iteration lasted (+ 1 ms: the counters are
    # read around its ends, not at them); every iteration has them, however
    # busy the machine (they are read as each boundary's time is taken)
    timed = [e for e in its if "cpu_us" in e["args"]]
    assert all(("wait_us" in e["args"]) == ("cpu_us" in e["args"]) for e in its)
    assert len(timed) == len(its), [e for e in its if "cpu_us" not in e["args"]]
    for e in timed:
        cpu, wait = e["args"]["cpu_us"], e["args"]["wait_us"]
        assert cpu >= 0 and wait >= 0 and cpu + wait <= e["dur"] + 1000, e
    if its:  # each step event before the last iteration's end is in one iteration
        # (a loader's `iter`, which starts a pass, may come before the first)
        main, last = its[0]["tid"], end(its[-1])
        for e in trace.user_events():
            if e["tid"] == main and e["cat"] in ("compute", "dataloader") and e["ts"] < last \
                    and e["name"] != "iter":
                assert sum(within(e, it) for it in its) == 1, e
    return its


# ---- the DDP example under torchrun ------------------------------------------


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    return ddp.ddp_run(str(tmp_path_factory.mktemp("ddp")))


def test_ddp_every_rank_records_its_steps_data_waits_and_model(ddp_run):
    assert sorted(ddp_run.ranks) == list(range(ddp.RANKS))
    for rank, trace in ddp_run.ranks.items():
        its = check_iterations(trace, ddp.STEPS, epoch=0)
        steps = trace.of(cat="compute", name="optimizer.step")
        assert [args(e) for e in steps] == [{"step": i, "optimizer": "SGD"}
                                            for i in range(ddp.STEPS)]
        for it, step in zip(its, steps):  # an iteration ends with its step
            assert end(it) == end(step)
        fetches = trace.of(cat="dataloader", name="fetch")
        assert [args(e) for e in fetches] == [{"batch": i, "workers": 2, "epoch": 0}
                                              for i in range(ddp.STEPS)]
        for kind in ("forward", "backward"):
            events = trace.of(cat="compute", name=kind)
            assert [args(e) for e in events] == [{"module": "DistributedDataParallel"}] * ddp.STEPS
        assert not trace.of(cat="data"), "the items are fetched by the workers"


def test_ddp_workers_record_each_item_of_their_rank(ddp_run):
    for rank in range(ddp.RANKS):
        workers = ddp_run.workers[rank]
        assert len(workers) == 2
        indices = sorted(e["args"]["index"] for w in workers for e in w.of(cat="data", name="item"))
        # DistributedSampler(shuffle=False): rank r reads r, r + 4, r + 8, ...
        assert indices == list(range(rank, ddp.RANKS * ddp.STEPS * 8, ddp.RANKS))
        for w in workers:
            assert {e["cat"] for e in torch_events(w)} == {"data"}
        # each worker says once which one it is (trace-format.md, "Workers"); the rank does not
        ids = [[(e["args"]["value"], e["args"]["num_workers"]) for e in w.of("M", name="worker")]
               for w in workers]
        assert sorted(ids) == [[(0, 2)], [(1, 2)]], ids
        assert ddp_run.ranks[rank].of("M", name="worker") == []
    assert torch_events(ddp_run.command) == [], "torchrun itself trains nothing"


def sync_comm(trace: Trace) -> List[Dict[str, Any]]:
    return [e for e in trace.of(cat="comm") if "async" not in e["args"]]


def test_ddp_collectives_match_across_ranks(ddp_run):
    per_rank = {r: sync_comm(t) for r, t in ddp_run.ranks.items()}
    expect = []
    for i in range(ddp.STEPS):
        # each step: DDP's bucket (3 i, async), the all_reduce, the barrier
        expect += [("all_reduce", 3 * i + 1, 4), ("barrier", 3 * i + 2, 0)]
    for rank, events in per_rank.items():
        got = [(e["name"], e["args"]["seq"], e["args"]["bytes"]) for e in events]
        assert got == expect, rank
        assert {(e["args"]["group"], e["args"]["group_size"]) for e in events} == {("world", 4)}
    # every rank is inside barrier k at one moment: the sync point is real
    for k in range(len(expect)):
        same = [per_rank[r][k] for r in per_rank]
        assert max(e["ts"] for e in same) <= min(end(e) for e in same) + 50, same


def test_ddp_gradient_all_reduce_is_recorded_per_bucket(ddp_run):
    params = 8 * 32 + 32 + 32 + 1
    for rank, trace in ddp_run.ranks.items():
        buckets = sorted((e for e in trace.of(cat="comm", name="all_reduce")
                          if "ddp_bucket" in e["args"]), key=lambda e: e["ts"])
        assert [args(e) for e in buckets] == [
            {"bytes": 4 * params, "group_size": 4, "ddp_bucket": 0, "async": 1, "group": "world",
             "seq": 3 * i} for i in range(ddp.STEPS)]  # numbered with the step's other two
        for bucket, bwd in zip(buckets, trace.of(cat="compute", name="backward")):
            assert within(bucket, bwd), (bucket, bwd)  # the backward waits for it


# ---- a single process: two optimizers, accumulation, checkpoint, compile ----


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("train")
    proc = traced(base, sys.executable, PROG, "train", str(base))
    assert proc.returncode == 0, proc.stderr
    return base, proc, one_trace(base)


def test_single_process_output_is_unchanged(train_run, tmp_path):
    _, proc, _ = train_run
    off = plain(tmp_path, sys.executable, PROG, "train", str(tmp_path))
    assert proc.stdout == off.stdout and "compiled" in off.stdout
    assert "warning" not in off.stdout, "the script itself warns: the check would be blind"


def test_two_optimizers_make_one_iteration(train_run):
    _, _, trace = train_run
    its = check_iterations(trace, 3)
    steps = trace.of(cat="compute", name="optimizer.step")
    assert [args(e) for e in steps] == [{"step": i, "optimizer": o}
                                        for i in range(3) for o in ("SGD", "Adam")]
    for i, it in enumerate(its):
        sgd, adam = steps[2 * i], steps[2 * i + 1]
        assert within(sgd, it) and within(adam, it) and end(it) == end(adam)


def test_accumulated_backwards_are_each_recorded(train_run):
    _, _, trace = train_run
    its = check_iterations(trace, 3)
    backward = trace.of(cat="compute", name="backward")
    forward = trace.of(cat="compute", name="forward")
    for it in its:  # 2 accumulated micro-batches + the generator's step
        assert sum(within(e, it) for e in backward) == 3
        assert sum(within(e, it) for e in forward) == 6  # gen and disc, top-level each
    assert {args(e)["module"] for e in backward + forward} == {"Sequential"}
    assert len(backward) == 3 * 3 + 1  # + the compiled model's


def test_checkpoint_save_and_load(train_run):
    base, _, trace = train_run
    path = str(base / "ckpt.pt")
    size = os.path.getsize(path)
    assert [(e["name"], args(e)) for e in trace.of(cat="checkpoint")] == [
        ("torch.save", {"bytes": size, "path": path}),
        ("torch.load", {"bytes": size, "path": path})]


def test_compile_time_is_its_own_event_inside_the_first_compiled_call(train_run):
    _, _, trace = train_run
    compiles = trace.of(cat="compile", name="compile")
    assert compiles and args(compiles[0]) == {"trigger": "DYNAMO", "fn": "Sequential.forward"}
    last_forward = trace.of(cat="compute", name="forward")[-1]
    assert within(compiles[0], last_forward) and compiles[0]["dur"] > 0


# ---- inference: no optimizer, iterations are DataLoader batches --------------


@pytest.fixture(scope="module")
def infer_run(tmp_path_factory):
    """With an unusable DFTRACER_TORCH: its default under dftracer run is on."""
    base = tmp_path_factory.mktemp("infer")
    proc = traced(base, sys.executable, PROG, "infer", str(base), DFTRACER_TORCH="maybe")
    assert proc.returncode == 0, proc.stderr
    return proc, one_trace(base)


def test_inference_loop_counts_batches(infer_run):
    _, trace = infer_run
    its = check_iterations(trace, 4, epoch=0)
    fetches = trace.of(cat="dataloader", name="fetch")
    assert [args(e) for e in fetches] == [{"batch": i, "workers": 0, "epoch": 0} for i in range(4)]
    items = trace.of(cat="data", name="item")
    assert [e["args"]["index"] for e in items] == list(range(20))
    for i, fetch in enumerate(fetches):  # num_workers=0: items are read inside next()
        assert sum(within(e, fetch) for e in items) == 5
        assert its[i]["ts"] == fetch["ts"]
    assert trace.of("M", name="worker") == [], "no worker: no worker event"
    assert len(trace.of(cat="compute", name="forward")) == 4
    assert not trace.of(cat="compute", name="backward")
    assert not trace.of(cat="compute", name="optimizer.step")


def test_an_unusable_switch_is_named_once_and_the_default_used(infer_run):
    proc, _ = infer_run
    assert proc.stderr.splitlines() == [WARNING]


# ---- off, the switch, and failures ---------------------------------------------


def test_no_torch_records_nothing_of_torch_and_changes_nothing(infer_run, tmp_path):
    proc = traced(tmp_path, sys.executable, PROG, "infer", str(tmp_path), options=("--no-torch",))
    assert proc.returncode == 0, proc.stderr
    assert torch_events(one_trace(tmp_path)) == []
    assert proc.stdout == infer_run[0].stdout and "inference" in proc.stdout


NO_HOOKS = """
import sys
import dftracer, torch
import torch.nn.modules.module as m
import torch.optim.optimizer as o
assert not m._global_forward_pre_hooks and not m._global_forward_hooks
assert not o._global_optimizer_pre_hooks and not o._global_optimizer_post_hooks
assert "dftracer._autotrace.hooks" not in sys.modules
assert not [f for f in sys.meta_path if type(f).__module__.startswith("dftracer")]
assert torch.save is torch.serialization.save and not hasattr(torch.save, "__wrapped__")
print("no hooks")
"""


def test_tracing_without_the_switch_installs_no_hook(tmp_path):
    env = {"DFTRACER_ENABLE": "1", "DFTRACER_LOG_FILE": str(tmp_path / "t")}
    assert run_python(NO_HOOKS, env).stdout == "no hooks\n"


OPT_IN_THEN_FAIL = """
import warnings
import torch
import dftracer  # a program of the user's that imports dftracer: DFTRACER_TORCH=1 is enough
from dftracer import _core
from dftracer._autotrace import hooks, modules, optim

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(3, 4)).sum().backward()
    opt.step()

def boom(*a, **k):
    raise RuntimeError("writer broke")

warnings.simplefilter("error")  # failing hooks must not warn either
# what the C forward hook calls of torch breaks (src/torch/autotrace_hooks.c)
_core._at_setup(torch.Tensor, torch.nn.Parameter, torch.nn.modules.loss._Loss,
                torch.is_grad_enabled, boom, modules._search_seen)
before = model.weight.detach().clone()
out = model(torch.ones(2, 4))
out.sum().backward()
opt.step()
assert not torch.equal(before, model.weight), "the step ran"
assert out.shape == (2, 1) and model.weight.grad is not None
status = hooks.status()
print(status["modules"]); print(status["optimizer"]); print(status["dataloader"])
import torch.nn.modules.module as m, torch.optim.optimizer as o
assert not m._global_forward_pre_hooks and not model._forward_pre_hooks
assert "forward" not in vars(model) and type(torch.autograd._engine_run_backward).__name__ == "function"
assert o._global_optimizer_pre_hooks  # the other parts go on
model(torch.ones(2, 4)); opt.step()
print("went on")
"""


def test_opt_in_without_dftracer_run_and_a_failing_hook(tmp_path):
    """DFTRACER_TORCH=1 in a program that imports dftracer; then what the C
    forward hooks call breaks: that part turns off quietly and takes its
    hooks away, the others and the program go on."""
    proc = run_python(OPT_IN_THEN_FAIL, {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1",
                                         "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    assert proc.stdout.splitlines() == ["off: RuntimeError: writer broke", "on", "on", "went on"]
    assert proc.stderr == ""
    trace = one_trace(tmp_path)
    assert len(trace.of(cat="compute", name="optimizer.step")) == 4
    assert [e["args"]["module"] for e in trace.of(cat="compute", name="forward")] == ["Linear"] * 2
    assert len(trace.of(cat="compute", name="backward")) == 2
    check_iterations(trace, 4)


DDP_HOOKS = """
import multiprocessing as mp, os, torch, torch.distributed as dist
import dftracer
from dftracer._autotrace import ddp as ours
from torch.nn.parallel import DistributedDataParallel as DDP

def rank_main(rank):
    dist.init_process_group("gloo", init_method="file://" + os.path.join({tmp!r}, "store"),
                            rank=rank, world_size=3)
    torch.manual_seed(0)
    net, ref_net = torch.nn.Linear(8, 3), torch.nn.Linear(8, 3)
    ref_net.load_state_dict(net.state_dict())
    model = DDP(net)                   # with our hook
    ours.P.on = False
    reference = DDP(ref_net)           # DDP's own reduction
    ours.P.on = True
    assert model in ours._states and reference not in ours._states
    assert DDP(torch.nn.Linear(2, 2), gradient_as_bucket_view=True) not in ours._states
    x = torch.randn(5, 8) * (rank + 1.37)
    same = True
    for _ in range(2):                 # the second backward accumulates
        for m in (model, reference):
            m(x).pow(2).sum().backward()
        same = same and all(torch.equal(a.grad, b.grad)
                            for a, b in zip(net.parameters(), ref_net.parameters()))
    calls = []

    def mine(state, bucket):           # a hook of the program's: zero gradients
        calls.append(bucket.index())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer() * 0)
        return fut

    model.register_comm_hook(None, mine)
    model.zero_grad()
    model(x).sum().backward()
    theirs = calls == [0] and net.weight.grad.abs().sum().item() == 0
    try:
        model.register_comm_hook(None, mine)
        once = False
    except RuntimeError as exc:        # as without dftracer: one hook per model
        once = "once" in str(exc)
    fp16 = DDP(torch.nn.Linear(8, 3))
    fp16._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    fp16(torch.ones(2, 8)).sum().backward()
    grad = fp16.module.weight.grad
    fp16_ok = grad.dtype == torch.float32 and grad.sum().item() == 48
    pair = dist.new_group([0, 2])      # every rank creates it; rank 1 is not in it
    dist.all_reduce(torch.ones(3), group=pair)
    dist.destroy_process_group()
    os.write(1, f"{{rank}} {{same}} {{theirs}} {{once}} {{fp16_ok}}\\n".encode())  # one line, one write

if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=rank_main, args=(r,)) for r in range(3)]
    [p.start() for p in procs]
    [p.join() for p in procs]
    assert all(p.exitcode == 0 for p in procs)
"""


def test_ddp_hook_reduces_as_ddp_does_and_gives_way_to_the_programs(tmp_path):
    proc = run_python(DDP_HOOKS.format(tmp=str(tmp_path)),
                      {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1",
                       "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    assert sorted(proc.stdout.splitlines()) == [f"{r} True True True True" for r in range(3)]
    pair_calls = []
    for path in find_traces(str(tmp_path), "t"):
        trace = read_trace(path)
        if trace.of(cat="compute", name="forward"):  # a rank: ours timed 2 backward
            buckets = [e for e in trace.of(cat="comm") if "ddp_bucket" in e["args"]]
            assert [args(e)["group_size"] for e in buckets] == [3] * 2
            pair_calls += [args(e) for e in trace.of(cat="comm", name="all_reduce")
                           if e["args"]["group"] != "world"]
    # the two members record it under one name, as the first call of that group
    assert len(pair_calls) == 2 and pair_calls[0] == pair_calls[1]
    assert pair_calls[0]["group"].endswith("[0,2]") and pair_calls[0]["seq"] == 0
    assert pair_calls[0]["group_size"] == 2 and pair_calls[0]["bytes"] == 12


SEARCH = """
import pickle, torch
import dftracer
import torch.nn.modules.module as m
from torch.utils.data import DataLoader

model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(torch.randn(12, 4), batch_size=4)
for x in loader:        # 3 steps: the search for top-level modules ends after 2
    model(x).sum().backward()
    opt.step()
print(len(m._global_forward_hooks), len(model._forward_hooks), len(model[0]._forward_hooks),
      type(vars(model).get("forward")).__name__)
print(b"dftracer" in pickle.dumps(model), type(torch.jit.script(model)).__name__,
      type(vars(model).get("forward")).__name__)
it = iter(loader)       # a new pass over a DataLoader searches again
print(len(m._global_forward_hooks))
model(next(it)).sum().backward()
opt.step()
"""


def test_the_search_for_top_level_modules_ends_and_leaves_no_trace_in_the_model(tmp_path):
    proc = run_python(SEARCH, {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1",
                               "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    # the search ended: no hook left, the top-level module's forward is ours; a
    # pickle holds none of it, torch.jit.script compiles the class's forward
    # and the model has its forward timing back afterwards
    assert proc.stdout.splitlines() == ["0 0 0 _AtForward",
                                        "False RecursiveScriptModule _AtForward", "1"]
    trace = one_trace(tmp_path)
    assert [args(e) for e in trace.of(cat="compute", name="forward")] == [
        {"module": "Sequential"}] * 4
    assert len(trace.of(cat="compute", name="backward")) == 4
    check_iterations(trace, 4, epoch=None)


UNCHANGED = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
"""


def test_opt_in_for_an_unchanged_script_through_the_installed_start_up_hook(tmp_path):
    """DFTRACER_ENABLE=1 DFTRACER_TORCH=1 python train.py, without dftracer run
    and without importing dftracer: the .pth installed with the package."""
    import dftracer
    from dftracer.tools import run

    parent = os.path.dirname(os.path.dirname(os.path.abspath(dftracer.__file__)))
    if not run._pth_installed(parent):
        pytest.skip("the start-up hook (.pth) is installed with the package, not in a source tree")
    run_python(UNCHANGED, {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1",
                           "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    trace = one_trace(tmp_path)
    assert len(trace.of(cat="compute", name="optimizer.step")) == 3
    check_iterations(trace, 3)


P2P = """
import multiprocessing as mp, os, torch, torch.distributed as dist
import dftracer

def rank_main(rank):
    dist.init_process_group("gloo", init_method="file://" + os.path.join({tmp!r}, "store"),
                            rank=rank, world_size=2)
    t = torch.zeros(4)                 # 16 bytes
    if rank == 0:
        dist.send(t + 1, dst=1)
        dist.send(t + 2, dst=1)
        dist.isend(t + 3, dst=1).wait()
        dist.send(t + 4, dst=1)
    else:
        dist.recv(t, src=0)
        dist.recv(t, src=0)
        dist.irecv(t, src=0).wait()
        dist.recv(t)                   # from any source: the sender is what it returns
    ok = t.sum().item() == (16 if rank == 1 else 0)
    dist.destroy_process_group()
    os.write(1, f"{{rank}} {{ok}}\\n".encode())

if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=rank_main, args=(r,)) for r in range(2)]
    [p.start() for p in procs]
    [p.join() for p in procs]
    assert all(p.exitcode == 0 for p in procs)
"""


def test_point_to_point_calls_pair_up_across_ranks(tmp_path):
    """Each send and its receive carry the same p2p_seq (counted per direction
    and group), the peer's global rank (a receive from any source: the sender
    it returned) and the bytes moved."""
    proc = run_python(P2P.format(tmp=str(tmp_path)),
                      {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1",
                       "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    assert sorted(proc.stdout.splitlines()) == ["0 True", "1 True"]
    sides = {}
    for path in find_traces(str(tmp_path), "t"):
        comm = [args(e) | {"name": e["name"]} for e in read_trace(path).of(cat="comm")]
        if comm:
            sides[comm[0]["name"] in ("send", "isend")] = comm
    sent, got = sides[True], sides[False]
    assert [e["name"] for e in sent] == ["send", "send", "isend", "send"]
    assert [e["name"] for e in got] == ["recv", "recv", "irecv", "recv"]
    assert [e["p2p_seq"] for e in sent] == [e["p2p_seq"] for e in got] == [0, 1, 2, 3]
    assert {e["peer"] for e in sent} == {1} and {e["peer"] for e in got} == {0}
    assert {e["bytes"] for e in sent + got} == {16} and {e["group_size"] for e in sent} == {2}
    assert [e.get("async", 0) for e in sent] == [0, 0, 1, 0]
