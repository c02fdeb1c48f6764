"""DDP's bucket hook (issue 35), the C one (src/torch/ddp_hook.c) and the
native one built against this torch (src/libtorch/ddp_native.cpp): three gloo
ranks train the same models traced and untraced for a few SGD steps, with
several buckets, torch's built-in ALLREDUCE hook and a Join context over
uneven inputs (divide_by_initial_world_size=False): the parameters must be
bit-identical; the trace holds one comm/all_reduce event per bucket per
backward, numbered in order; a hook registered in a DDP subclass's __init__
(before the program can see the model) wins over ours."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tracefile import find_traces, read_trace, run_python  # noqa: E402

STEPS = 3
SCRIPT = """
import multiprocessing as mp, os, torch, torch.distributed as dist
import dftracer
from dftracer._autotrace import ddp as ours
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = {steps}

def pair(seed):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.ReLU(), torch.nn.Linear(64, 3))
    ref = torch.nn.Sequential(*[torch.nn.Linear(m.in_features, m.out_features) if
                                isinstance(m, torch.nn.Linear) else torch.nn.ReLU() for m in net])
    ref.load_state_dict(net.state_dict())
    return net, ref

def ddp(net, traced, **kw):
    ours.P.on = traced
    try:
        return DDP(net, bucket_cap_mb=0.01, **kw)   # 10 KB: several buckets
    finally:
        ours.P.on = True

def train(model, rank, steps, join=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(5, 8, generator=g) * (rank + 1.37) for _ in range(steps)]
    def loop():
        for x in xs:
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
    if join:
        with Join([model], divide_by_initial_world_size=False):
            loop()
    else:
        loop()

def same(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))

def rank_main(rank):
    dist.init_process_group("gloo", init_method="file://" + os.path.join({tmp!r}, "store"),
                            rank=rank, world_size=3)
    torch.set_num_threads(1)
    out = []
    net, ref = pair(0)                               # DDP's own reduction
    a, b = ddp(net, True), ddp(ref, False)
    out.append(a in ours._states and b not in ours._states and ours._native[a] == {native})
    train(a, rank, STEPS)
    train(b, rank, STEPS)
    out.append(same(net, ref))
    net, ref = pair(1)                               # torch's built-in ALLREDUCE hook
    a, b = ddp(net, True), ddp(ref, False)
    for m in (a, b):
        m._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    train(a, rank, STEPS)
    train(b, rank, STEPS)
    out.append(same(net, ref))
    net, ref = pair(2)                               # uneven inputs: rank r has STEPS + r
    a, b = ddp(net, True), ddp(ref, False)
    train(a, rank, STEPS + rank, join=True)
    train(b, rank, STEPS + rank, join=True)
    out.append(same(net, ref))
    calls = []

    class Mine(DDP):                                 # its hook, before any program code
        def __init__(self, module):
            super().__init__(module)
            self.register_comm_hook(None, self.zero)

        @staticmethod
        def zero(state, bucket):
            calls.append(bucket.index())
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer() * 0)
            return fut

    mine = Mine(torch.nn.Linear(4, 2))
    mine(torch.ones(1, 4)).sum().backward()
    out.append(calls == [0] and mine.module.weight.grad.abs().sum().item() == 0)
    dist.destroy_process_group()
    os.write(1, (str(rank) + " " + " ".join(map(str, out)) + "\\n").encode())

if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=rank_main, args=(r,)) for r in range(3)]
    [p.start() for p in procs]
    [p.join() for p in procs]
    assert all(p.exitcode == 0 for p in procs)
"""


@pytest.mark.parametrize("hook", ["c", "native"])
def test_ddp_hook_keeps_parameters_bit_identical_and_records_each_bucket(tmp_path, hook):
    # native: the build conftest.py made for this session (DFTRACER_DDP_HOOK=native
    # would build one now if it were missing: the test checks it was used)
    proc = run_python(SCRIPT.format(tmp=str(tmp_path), steps=STEPS, native=hook == "native"),
                      {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1", "DFTRACER_DDP_HOOK": hook,
                       "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    # traced model hooked, same parameters plain / built-in / Join, the subclass's hook won
    assert sorted(proc.stdout.splitlines()) == [f"{r} True True True True True"
                                                for r in range(3)]
    params = [8 * 64 + 64, 64 * 64 + 64, 64 * 3 + 3]
    ranks = groups = 0
    for path in find_traces(str(tmp_path), "t"):
        trace = read_trace(path)
        buckets = [e for e in trace.of(cat="comm", name="all_reduce") if "ddp_bucket" in e["args"]]
        if not buckets:
            continue
        ranks += 1
        ordered = sorted(buckets, key=lambda e: e["args"]["seq"])
        # one numbering with the group's other collectives (Join's all_reduces)
        numbered = sorted(e["args"]["seq"] for e in trace.of(cat="comm") if "seq" in e["args"])
        assert numbered == list(range(len(numbered))), "none skipped, none twice"
        assert len(numbered) > len(buckets)
        for e in buckets:
            a = e["args"]
            assert (e["ph"], a["async"], a["group"], a["group_size"]) == ("X", 1, "world", 3)
            assert e["dur"] >= 0 and a["bytes"] > 0 and a["bytes"] % 4 == 0
        # in seq order, each backward's buckets 0, 1, ... hold every gradient once
        backward, size, most = [], 0, 0
        for e in ordered:
            assert e["args"]["ddp_bucket"] == len(backward), e
            backward.append(e)
            size += e["args"]["bytes"]
            if size == 4 * sum(params):
                most = max(most, len(backward))
                backward, size = [], 0
                groups += 1
        assert backward == [] and most >= 2, "bucket_cap_mb=0.01 makes several buckets"
    # each rank: STEPS backward plain, STEPS built-in, STEPS + 2 with Join (the
    # ranks that finish first join the others' last all-reduces with zeros)
    assert ranks == 3 and groups == 3 * (3 * STEPS + 2)
