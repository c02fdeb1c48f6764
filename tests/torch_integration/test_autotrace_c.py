"""The zero-code torch events written by C hooks (issue 35, part A;
src/torch/autotrace_*.c): the hooks torch calls are C objects, every event
of a short training loop is there with its name, category and args, once
per step, and a forward, a dataset or an optimizer that raises gets its
exception back while the trace stays right."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from tracefile import Trace, find_traces, read_trace, run_python  # noqa: E402

ENV = {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1"}


def one_trace(tmp_path) -> Trace:
    (path,) = find_traces(str(tmp_path), "t")
    return read_trace(path)


def args(e: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in e["args"].items() if k not in ("hhash", "level", "p_idx")}


def end(e: Dict[str, Any]) -> int:
    return e["ts"] + e["dur"]


def within(inner: Dict[str, Any], outer: Dict[str, Any]) -> bool:
    return outer["ts"] <= inner["ts"] and end(inner) <= end(outer)


def by_ts(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return sorted(events, key=lambda e: e["ts"])


LOOP = """
import torch
from dftracer import _core
import torch.nn.modules.module as m, torch.optim.optimizer as o
from torch.utils.data import DataLoader, TensorDataset, dataloader as dl
from torch.utils.data._utils import fetch as f
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(12, 8), torch.randn(12, 2)), batch_size=4)
kinds = set()
kinds.add(type(dl._BaseDataLoaderIter.__dict__["__next__"]))
kinds.add(type(f._MapDatasetFetcher.__dict__["fetch"]))
kinds.update(type(h) for h in m._global_forward_pre_hooks.values())
kinds.update(type(h) for h in m._global_forward_hooks.values())
kinds.update(type(h) for h in o._global_optimizer_pre_hooks.values())
kinds.update(type(h) for h in o._global_optimizer_post_hooks.values())
for x, y in loader:
    opt.zero_grad()
    out = model(x)
    torch.nn.functional.mse_loss(out, y).backward()
    opt.step()
kinds.update(type(h) for h in model._forward_pre_hooks.values())
kinds.update(type(h) for h in model._forward_hooks.values())
kinds.add(type(vars(model).get("forward")))
print(sorted(f"{k.__module__}.{k.__name__}" for k in kinds))
print(len(m._global_forward_hooks), len(model._forward_hooks), len(model[0]._forward_hooks))
"""


def test_the_hooks_are_c_objects_and_a_loop_gets_every_event_once_a_step(tmp_path):
    proc = run_python(LOOP, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    kinds, hooks = proc.stdout.splitlines()
    assert eval(kinds) == ["dftracer._core._AtForward", "dftracer._core._AtMapFetch",
                           "dftracer._core._AtNext", "dftracer._core._TorchHook"]
    # the search ended: no module hook is left; the top-level module's forward is ours
    assert hooks == "0 0 0"
    trace = one_trace(tmp_path)
    its = by_ts(trace.of(cat="pipeline", name="iteration"))
    fetches = by_ts(trace.of(cat="dataloader", name="fetch"))
    items = by_ts(trace.of(cat="data", name="item"))
    fwd = by_ts(trace.of(cat="compute", name="forward"))
    bwd = by_ts(trace.of(cat="compute", name="backward"))
    steps = by_ts(trace.of(cat="compute", name="optimizer.step"))
    # (cpu_us and wait_us: the thread's scheduling, checked in test_autotrace.py;
    # sampled and sampled_us: there only when a stack sample landed in the
    # iteration's untraced time, as one can on a busy machine, and the
    # sampler's counters when it read a stack in it: test_sampler.py)
    varying = ("cpu_us", "wait_us", "sampled", "sampled_us", "sampled_n", "sampled_dropped",
               "sampled_cut", "sampled_missed")
    assert [{k: v for k, v in args(e).items() if k not in varying}
            for e in its] == [{"step": i, "epoch": 0} for i in range(3)]
    for a in (e["args"] for e in its):  # a sample here is the loop's own code (`python -c`)
        assert ("sampled" in a) == ("sampled_us" in a), a
        assert a.get("sampled", "<string>:").startswith("<string>:"), a
    assert [args(e) for e in fetches] == [{"batch": i, "workers": 0, "epoch": 0} for i in range(3)]
    assert [args(e) for e in items] == [{"index": i} for i in range(12)]
    assert [args(e) for e in fwd] == [{"module": "Sequential"}] * 3
    assert [args(e) for e in bwd] == [{"module": "Sequential"}] * 3
    assert [args(e) for e in steps] == [{"step": i, "optimizer": "SGD"} for i in range(3)]
    for i, it in enumerate(its):
        # each step's events lie in its iteration, in the order the loop ran them
        assert within(fetches[i], it) and within(fwd[i], it) and within(steps[i], it)
        assert all(within(e, fetches[i]) for e in items[4 * i:4 * i + 4])
        assert end(fetches[i]) <= fwd[i]["ts"] and end(fwd[i]) <= bwd[i]["ts"]
        assert end(bwd[i]) <= steps[i]["ts"]
    for e in its + fetches + items + fwd + bwd + steps:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["tid"] == its[0]["tid"]


RAISES = """
import torch
from torch.utils.data import DataLoader, Dataset
from dftracer._autotrace import hooks

class Boom(Exception):
    pass

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        y = self.inner(x)
        if self.calls in (2, 5):
            raise Boom(f"forward {self.calls}")
        return y.sum()

class Data(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        if i == 2:
            raise KeyError(i)
        return torch.ones(4) * i

net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
seen = []
for step in range(6):
    try:
        net(torch.ones(2, 4)).backward()
    except Boom as exc:
        seen.append(str(exc))
    opt.step()
try:
    for batch in DataLoader(Data(), batch_size=1):
        seen.append(int(batch[0, 0]))
except KeyError as exc:
    seen.append(f"KeyError {exc}")
def closure():
    raise Boom("step")
try:
    opt.step(closure)  # raises inside step(): its post-hook never runs
except Boom as exc:
    seen.append(str(exc))
opt.step()
print(seen)
print(hooks.status()["modules"], hooks.status()["optimizer"], hooks.status()["dataloader"])
"""


def test_exceptions_propagate_and_the_trace_stays_right(tmp_path):
    proc = run_python(RAISES, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    seen, status = proc.stdout.splitlines()
    assert eval(seen) == ["forward 2", "forward 5", 0, 1, "KeyError 2", "step"]
    assert status == "on on on" and proc.stderr == ""
    trace = one_trace(tmp_path)
    fwd = by_ts(trace.of(cat="compute", name="forward"))
    # the forwards that raised end their event too (always_call), those that
    # returned have a backward each; the nested Linear is never top-level
    assert [args(e) for e in fwd] == [{"module": "Net"}] * 6
    assert len(trace.of(cat="compute", name="backward")) == 4
    items = by_ts(trace.of(cat="data", name="item"))
    assert [args(e) for e in items] == [{"index": 0}, {"index": 1}]  # 2 raised: no event
    steps = by_ts(trace.of(cat="compute", name="optimizer.step"))
    # the step that raised wrote none, and the next step of that optimizer is
    # still an event
    assert [args(e)["optimizer"] for e in steps] == ["SGD"] * 7
    assert [args(e)["step"] for e in steps] == list(range(7))


BACKWARD = """
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
loss_fn = torch.nn.MSELoss()  # a loss module: top-level too, never the backward's name
opt = torch.optim.SGD(model.parameters(), lr=0.1)
marks = []
def mark(what):
    marks.append(what)
for step in range(4):  # the search for top-level modules ends in the first steps
    x = torch.randn(8, 4, requires_grad=True)
    loss = loss_fn(model(x), torch.zeros(8, 1))
    # a gradient penalty: torch.autograd.grad, then backward() over both
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    (loss + g.pow(2).sum()).backward()
    opt.step()
    opt.zero_grad()
# an autograd pass with no model forward since the step: no event
w = torch.ones(3, requires_grad=True)
(w * 2).sum().backward()
# a pass that raises (backward twice without retain_graph) still ends its event
loss = loss_fn(model(torch.randn(8, 4)), torch.zeros(8, 1))
loss.backward()
try:
    loss.backward()
except RuntimeError:
    marks.append("raised")
opt.step()
# reentrant activation checkpointing runs a backward inside the backward: one event
y = checkpoint(lambda t: model(t), torch.randn(8, 4, requires_grad=True), use_reentrant=True)
loss_fn(y, torch.zeros(8, 1)).backward()
opt.step()
print(marks, type(torch.autograd._engine_run_backward).__name__,
      torch.autograd.graph._engine_run_backward is torch.autograd._engine_run_backward)
"""


def test_backward_is_each_call_into_the_engine_after_a_model_forward(tmp_path):
    proc = run_python(BACKWARD, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    assert proc.stdout.split() == ["['raised']", "_AtEngineRun", "True"], proc.stderr
    trace = one_trace(tmp_path)
    bwd = by_ts(trace.of(cat="compute", name="backward"))
    # 4 steps x (grad + backward), the two calls of the step that raised, the
    # checkpointed step's one; none for the pass without a model
    assert len(bwd) == 4 * 2 + 2 + 1
    # the checkpointed model forwards under no_grad (reentrant checkpointing):
    # its output needs no grad, so the pass is named after the loss module
    assert [args(e)["module"] for e in bwd] == ["Sequential"] * 10 + ["MSELoss"]
    steps = by_ts(trace.of(cat="compute", name="optimizer.step"))
    assert len(steps) == 6
    for i in range(4):  # each step's two passes come before its optimizer step
        assert end(bwd[2 * i + 1]) <= steps[i]["ts"]
        assert i == 0 or end(steps[i - 1]) <= bwd[2 * i]["ts"]
    # the forward recomputed inside the checkpointed backward is no event
    fwd = trace.of(cat="compute", name="forward")
    assert sum(args(e)["module"] == "Sequential" for e in fwd) == 4 + 1 + 1
    for e in bwd:
        assert e["ph"] == "X" and e["dur"] >= 0


LIFETIME = """
import gc, weakref, torch
gc.disable()  # what is freed must be freed by reference counting, as without dftracer

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.lin(x)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):  # the search ends: the model gets its C forward
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
kind = type(vars(model).get("forward")).__name__
# a forward replaced on the class later is the one called (and timed)
def doubled(self, x):
    return self.lin(x) * 2
Net.forward = doubled
x = torch.ones(1, 4)
same = torch.equal(model(x), model.lin(x) * 2)
# the module does not keep itself alive through its C forward
ref = weakref.ref(model)
del model
print(kind, same, ref() is None)
"""


def test_the_c_forward_follows_the_class_and_keeps_no_module_alive(tmp_path):
    plain = run_python(LIFETIME, {})
    assert plain.stdout.split() == ["NoneType", "True", "True"], plain.stderr
    proc = run_python(LIFETIME, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    assert proc.stdout.split() == ["_AtForward", "True", "True"], proc.stderr
    fwd = one_trace(tmp_path).of(cat="compute", name="forward")
    assert [args(e)["module"] for e in fwd] == ["Net"] * 4


ITERABLE = """
import json
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torch.utils.data._utils import fetch as f

class Stream(IterableDataset):
    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at
    def __iter__(self):
        info = get_worker_info()
        first, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(first, self.n, step):
            if i == self.fail_at:
                raise ValueError(f"sample {i}")
            yield torch.tensor([float(i)])

out = {"kind": type(f._IterableDatasetFetcher.__dict__["fetch"]).__name__}
out["batched"] = [b.flatten().tolist() for b in DataLoader(Stream(10), batch_size=4)]
out["drop_last"] = [b.flatten().tolist()
                    for b in DataLoader(Stream(10), batch_size=4, drop_last=True)]
out["single"] = [b.tolist() for b in DataLoader(Stream(3), batch_size=None)]
try:
    list(DataLoader(Stream(6, fail_at=3), batch_size=2))
except ValueError as exc:
    out["error"] = str(exc)
class GoesOn(IterableDataset):  # raises for one sample, then goes on
    def __iter__(self):
        return self
    def __init__(self):
        self.i = -1
    def __next__(self):
        self.i += 1
        if self.i == 3:
            raise ValueError("sample 3")
        if self.i == 6:
            raise StopIteration
        return torch.tensor([float(self.i)])

it, out["goes_on"] = iter(DataLoader(GoesOn(), batch_size=2)), []
while True:
    try:
        out["goes_on"].append(next(it).flatten().tolist())
    except ValueError as exc:
        out["goes_on"].append(str(exc))
    except StopIteration:
        break
out["workers"] = sorted(b.flatten().tolist()
                        for b in DataLoader(Stream(8), batch_size=2, num_workers=2))
print(json.dumps(out))
"""


def test_an_iterable_dataset_gets_one_item_per_sample_from_c(tmp_path):
    """_IterableDatasetFetcher.fetch is a C callable too: one `item` per
    next() on the dataset's iterator, `index` counting what that fetcher
    (one per loader iterator and worker) yielded; batches, drop_last, the
    end of the data and a dataset's exception are what torch gives."""
    plain = run_python(ITERABLE, {})
    traced = run_python(ITERABLE, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    seen = json.loads(traced.stdout)
    assert seen.pop("kind") == "_AtIterFetch"
    want = json.loads(plain.stdout)
    assert want.pop("kind") == "function"
    assert seen == want
    assert want["batched"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert want["error"] == "sample 3"
    assert want["goes_on"] == [[0, 1], "sample 3", [4, 5]]
    main, workers = None, []
    for path in find_traces(str(tmp_path), "t"):
        trace = read_trace(path)
        if trace.of(cat="dataloader", name="fetch"):
            main = trace
        else:
            workers.append(trace)
    assert main is not None and len(workers) == 2
    items = by_ts(main.of(cat="data", name="item"))
    # batched: 10 samples; drop_last: the same 10 read (the last 2 then
    # dropped, as torch reads them); single: 3; the failing stream: 3 read
    # before sample 3 raised (no event for it); the stream that goes on
    # after its sample 3 raised: 5 read, the count going on over the batch
    # that raised
    assert [args(e) for e in items] == \
        [{"index": i} for i in list(range(10)) * 2 + [0, 1, 2] * 2 + list(range(5))]
    fetches = by_ts(main.of(cat="dataloader", name="fetch"))
    # each lies in its batch's `fetch`, but for the samples of a next() that
    # ended the data (drop_last's last 2) or raised (the failing stream's
    # sample 2, the other's sample 2): such a next() is no `fetch` event
    outside = [n for n, i in enumerate(items) if not any(within(i, f) for f in fetches)]
    assert outside == [18, 19, 25, 28]
    for w in workers:  # each worker's fetcher counts its own 4 samples
        assert [args(e) for e in by_ts(w.of(cat="data", name="item"))] == \
            [{"index": i} for i in range(4)]
    for e in items:
        assert e["ph"] == "X" and e["dur"] >= 0


BIG_BATCHES = """
import json, torch
from dftracer.python import dftracer
from torch.utils.data import DataLoader, Dataset, IterableDataset
log = dftracer.get_instance()

class Samples(Dataset):  # each sample logs an event of its own while it is read
    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        log.log_event("read", "app", log.get_time(), 1, {"sample": i})
        if i == self.fail_at:
            raise ValueError(f"sample {i}")
        return torch.tensor([float(i)])

class Stream(IterableDataset):
    def __iter__(self):
        for i in range(75):
            log.log_event("read", "app", log.get_time(), 1, {"sample": 1000 + i})
            yield torch.tensor([float(i)])

out = {"map": [len(b) for b in DataLoader(Samples(150), batch_size=70)]}
try:
    list(DataLoader(Samples(80, fail_at=45), batch_size=80))
except ValueError as exc:
    out["error"] = str(exc)
out["iterable"] = [len(b) for b in DataLoader(Stream(), batch_size=75)]
print(json.dumps(out))
"""


def test_items_of_batches_larger_than_those_held_are_each_written_once(tmp_path):
    """A batch's `item` events are held while its samples are read and
    written after (32 at a time, src/torch/autotrace_data.c): batches of 70,
    80 and 75 samples get one event per sample, in order, each around what
    its sample's own code logged, and a sample that raises after more than
    32 were read leaves the events of those before it."""
    proc = run_python(BIG_BATCHES, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    assert json.loads(proc.stdout) == {"map": [70, 70, 10], "error": "sample 45",
                                       "iterable": [75]}
    trace = one_trace(tmp_path)
    items = by_ts(trace.of(cat="data", name="item"))
    reads = by_ts(trace.of(cat="app", name="read"))
    want = list(range(150)) + list(range(45)) + list(range(75))
    assert [args(e) for e in items] == [{"index": i} for i in want]
    # every sample read logged once (the one that raised too, without an item)
    assert [e["args"]["sample"] for e in reads] == \
        list(range(150)) + list(range(46)) + [1000 + i for i in range(75)]
    del reads[150 + 45]  # sample 45 of the failing batch: no item
    for item, read in zip(items, reads):
        assert within(read, item), (item, read)
    for a, b in zip(items, items[1:]):  # one sample after the other
        assert end(a) <= b["ts"]


DATA_AND_MODEL = """
import json
import torch
from dftracer import _core
from torch.utils.data import DataLoader, Dataset

class Scale(torch.nn.Module):  # a transform: data loading
    def forward(self, x):
        return x * 2

class Stack(torch.nn.Module):  # run by the collate_fn: the model's
    def forward(self, xs):
        return torch.stack(xs)

scale, stack = Scale(), Stack()
got, in_collate = [], []

class Each(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return scale(torch.full((2,), float(i)))

class Many(Each):
    def __getitems__(self, indices):
        got.append(type(indices).__name__)
        return [self[i] for i in indices]

def collate(batch):
    in_collate.append(_core._at_thread()[2])
    return stack(batch)

for ds in (Each(), Many()):
    for b in DataLoader(ds, batch_size=4, collate_fn=collate):
        assert b.shape == (4, 2)
print(json.dumps({"got": got, "in_collate": in_collate, "after": _core._at_thread()[2]}))
"""


def test_a_module_in_a_dataset_is_data_loading_one_in_collate_the_models(tmp_path):
    """torch's own fetch reads a batch sample by sample through C-timed
    indices (src/torch/autotrace_data.c, _TimedIndices): a module a sample's
    __getitem__ runs is data loading (no `forward`), the collate_fn's is the
    model's, as with __getitems__, which gets the indices as torch passes
    them (a list), never ours; the thread is out of data loading after."""
    proc = run_python(DATA_AND_MODEL, dict(ENV, DFTRACER_LOG_FILE=str(tmp_path / "t")))
    assert json.loads(proc.stdout) == {"got": ["list", "list"], "in_collate": [0, 0, 0, 0],
                                       "after": 0}
    trace = one_trace(tmp_path)
    fwd = by_ts(trace.of(cat="compute", name="forward"))
    assert [args(e) for e in fwd] == [{"module": "Stack"}] * 4
    items = by_ts(trace.of(cat="data", name="item"))
    # one per sample, then one per __getitems__ call (its first index)
    assert [args(e) for e in items] == [{"index": i} for i in range(8)] + \
        [{"index": 0}, {"index": 4}]
    fetches = by_ts(trace.of(cat="dataloader", name="fetch"))
    assert len(fetches) == 4
    for item in items:  # each inside its batch's fetch
        assert any(within(item, f) for f in fetches), item
