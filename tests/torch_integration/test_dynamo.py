"""torch.compile integration: backend, @dynamo.compile, Dynamo and the frame hook (issue 6).

The seed examples run in fresh interpreters exactly as the user document
writes them; the other tests trace in this process, one trace file per test
(initialize_log / finalize), with torch._dynamo.reset() between tests.
"""

from __future__ import annotations

import gc
import importlib
import textwrap

import pytest

torch = pytest.importorskip("torch")

from dftracer import _core  # noqa: E402
from dftracer.python import dftracer  # noqa: E402
from tracefile import find_traces, read_trace, run_python  # noqa: E402

ENABLED = {"DFTRACER_ENABLE": "1"}

# The events docs/dynamo.md (seed 001) shows for SimpleModel, in order.
SEED_EVENTS = [
    "function.convolution.default", "function.relu.default",
    "function.max_pool2d_with_indices.default", "function.getitem", "function.getitem",
    "function.view.default", "function.t.default", "function.addmm.default",
]

SEED_SIMPLE_MODEL = """
import torch
from dftracer.python import dftracer, dynamo

# Initialize logger
df_logger = dftracer.initialize_log("dynamo_trace.pfw", "/tmp/data", -1)

# Define a model
class SimpleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, 1)
        self.fc = torch.nn.Linear(16 * 15 * 15, 10)

    @dynamo.compile
    def forward(self, x):
        x = self.conv(x)
        x = torch.nn.functional.relu(x)
        x = torch.nn.functional.max_pool2d(x, 2)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        return x

# Create model and run
model = SimpleModel()
sample = torch.randn(1, 3, 32, 32)
output = model(sample)

# Finalize
df_logger.finalize()
"""

SEED_BACKEND = """
import torch
from dftracer.python import dftracer, dftracer_dynamo_backend

# Initialize logger
df_logger = dftracer.initialize_log("dynamo_trace.pfw", "/tmp/data", -1)

# Define your model
class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(784, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 10)
        )

    def forward(self, x):
        return self.layers(x)

# Compile with DFTracer backend
model = MyModel()
compiled_model = torch.compile(model, backend=dftracer_dynamo_backend)

# Run inference
input_tensor = torch.randn(32, 784)
output = compiled_model(input_tensor)

df_logger.finalize()
"""

SEED_CUSTOM_TRACER = """
from dftracer.python import Dynamo

# Create a custom Dynamo tracer
dynamo_tracer = Dynamo(
    name="resnet50",
    epoch=1,
    step=100,
    image_idx=42,
    image_size=(224, 224),
    enable=True
)

# Use in your training loop
# The tracer will automatically track operations
"""

# The seed's training example uses a train_loader it does not define.
TRAIN_LOADER = """
import torch
train_loader = [(torch.randn(2, 1, 28, 28), torch.randint(0, 10, (2,))) for _ in range(2)]
"""

SEED_TRAINING = """
import torch
import torch.nn as nn
from dftracer.python import dftracer, dynamo

# Initialize logger
df_logger = dftracer.initialize_log("training.pfw", "/tmp/data", -1)

# Model definition
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    @dynamo.compile
    def forward(self, x):
        x = self.conv1(x)
        x = torch.nn.functional.relu(x)
        x = self.conv2(x)
        x = torch.nn.functional.relu(x)
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = torch.nn.functional.relu(x)
        x = self.fc2(x)
        return x

# Training setup
model = ConvNet()
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()

# Training loop
for epoch in range(5):
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()

        # Forward pass (traced by Dynamo)
        output = model(data)

        # Compute loss and backward
        loss = criterion(output, target)
        loss.backward()

        # Optimizer step
        optimizer.step()

df_logger.finalize()
"""


def only_trace(directory, stem="trace"):
    files = find_traces(str(directory), stem)
    assert len(files) == 1, files
    return read_trace(files[0])


def by_time(events):
    return sorted(events, key=lambda e: (e["ts"], e["id"]))


def frames(tr):
    """The frame-hook spans: dynamo events that carry a compile mode."""
    return by_time([e for e in tr.of("X", cat="dynamo") if "mode" in e["args"]])


def ops(tr):
    return by_time([e for e in tr.of("X", cat="dynamo") if "mode" not in e["args"]])


def is_subsequence(wanted, names):
    it = iter(names)
    return all(any(n == w for n in it) for w in wanted)


def check_op_event(e):
    args = e["args"]
    assert e["cat"] == "dynamo" and e["ph"] == "X"
    assert args["grad_enabled"] in (0, 1)
    assert isinstance(args["graph"], int) and args["graph"] >= 1
    assert args["phase"] in ("forward", "backward", "inference")
    assert e["name"].startswith(("function.", "method.")) or "." in e["name"]


def children_of(tr, frame):
    return [e for e in ops(tr) if e["args"]["p_idx"] == frame["id"]]


# ---- the seed examples, unchanged ------------------------------------------


def test_seed_simple_model_gives_documented_events_under_the_frame_span(tmp_path):
    run_python(SEED_SIMPLE_MODEL, ENABLED, cwd=str(tmp_path))
    tr = only_trace(tmp_path, "dynamo_trace")
    (frame,) = frames(tr)
    assert frame["name"] == "SimpleModel.forward"
    assert frame["args"]["mode"] == "compile" and frame["args"]["compiled"] == 1
    assert frame["args"]["graphs"] == 1 and frame["args"]["graphs_compiled"] == 1
    assert 0 < frame["args"]["compile_us"] <= frame["dur"]
    events = ops(tr)
    assert is_subsequence(SEED_EVENTS, [e["name"] for e in events]), [e["name"] for e in events]
    for e in events:
        check_op_event(e)
        assert e["args"]["p_idx"] == frame["id"] and e["args"]["level"] == frame["args"]["level"] + 1
        assert frame["ts"] <= e["ts"] and e["ts"] + e["dur"] <= frame["ts"] + frame["dur"]
        assert e["args"]["phase"] == "forward" and e["args"]["grad_enabled"] == 0
    assert len({e["args"]["graph"] for e in events}) == 1


def test_seed_backend_example_instruments_the_module(tmp_path):
    run_python(SEED_BACKEND, ENABLED, cwd=str(tmp_path))
    tr = only_trace(tmp_path, "dynamo_trace")
    events = ops(tr)
    names = [e["name"] for e in events]
    assert is_subsequence(["function.t.default", "function.addmm.default", "function.relu.default",
                           "function.t.default", "function.addmm.default"], names), names
    assert not frames(tr)  # no @dynamo.compile: no frame span
    for e in events:
        check_op_event(e)
        assert e["args"]["level"] == 1 and e["args"]["p_idx"] == -1


def test_seed_training_loop_has_forward_and_backward_phases(tmp_path):
    run_python(TRAIN_LOADER + SEED_TRAINING + SEED_CUSTOM_TRACER, ENABLED, cwd=str(tmp_path))
    tr = only_trace(tmp_path, "training")
    spans = frames(tr)
    assert len(spans) == 10  # 5 epochs x 2 batches
    assert [s["args"]["mode"] for s in spans] == ["compile"] + ["cached"] * 9
    assert all(s["args"]["graphs"] == 1 for s in spans)
    events = ops(tr)
    fwd = [e for e in events if e["args"]["phase"] == "forward"]
    bwd = [e for e in events if e["args"]["phase"] == "backward"]
    assert len(fwd) % 10 == 0 and len(bwd) % 10 == 0 and bwd
    assert "function.convolution_backward.default" in {e["name"] for e in bwd}
    # forward ops nest under their call's span; backward runs later, outside it
    for s in spans:
        kids = children_of(tr, s)
        assert len(kids) == len(fwd) // 10 and {k["args"]["phase"] for k in kids} == {"forward"}
    assert all(e["args"]["level"] == 1 for e in bwd)
    assert len({e["args"]["graph"] for e in events}) == 1  # fw and bw of one dynamo graph


def test_seed_example_disabled_writes_nothing(tmp_path):
    state = "\nprint(__import__('dftracer')._core._frame_hook_state())\n"
    proc = run_python(SEED_SIMPLE_MODEL + state, {}, cwd=str(tmp_path))
    assert find_traces(str(tmp_path), "dynamo_trace") == []
    assert proc.stdout.strip() == "(False, 0, 0)"


# ---- in-process tracing ----------------------------------------------------


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """Starts a trace in tmp_path; calling the fixture finalizes and reads it."""
    torch._dynamo.reset()
    monkeypatch.setenv("DFTRACER_ENABLE", "1")
    log = dftracer.initialize_log(str(tmp_path / "trace"), None, -1)

    def finish():
        log.finalize()
        return only_trace(tmp_path)

    yield finish
    log.finalize()
    torch._dynamo.reset()
    gc.collect()


def test_registered_backend_name_and_reimport(traced):
    from dftracer.python import dynamo

    importlib.reload(dynamo)  # registering again must not trip torch's duplicate check
    fn = torch.compile(lambda x: torch.sin(x) + 1, backend="dftracer")
    x = torch.randn(4)
    assert torch.allclose(fn(x), torch.sin(x) + 1)
    names = [e["name"] for e in ops(traced())]
    assert is_subsequence(["function.sin.default", "function.add.Tensor"], names), names


def test_graph_break_gives_several_instrumented_graphs(traced):
    from dftracer.python import dynamo

    @dynamo.compile
    def step(x):
        y = torch.relu(x) * 2
        torch._dynamo.graph_break()
        return torch.tanh(y) - 1

    x = torch.randn(8)
    assert torch.allclose(step(x), torch.tanh(torch.relu(x) * 2) - 1)
    step(x)
    tr = traced()
    spans = frames(tr)
    assert [s["args"]["mode"] for s in spans] == ["compile", "cached"]
    assert spans[0]["args"]["graphs_compiled"] >= 2
    for s in spans:
        kids = children_of(tr, s)
        graphs = {k["args"]["graph"] for k in kids}
        assert len(graphs) == s["args"]["graphs"] >= 2
        names = [k["name"] for k in kids]
        assert is_subsequence(["function.relu.default", "function.mul.Tensor",
                               "function.tanh.default", "function.sub.Tensor"], names), names


def test_recompilation_on_new_shapes_is_reported(traced):
    from dftracer.python import dynamo

    @dynamo.compile(dynamic=False)
    def f(x):
        return (x @ x.t()).sum()

    for shape in [(2, 3), (2, 3), (4, 3), (4, 3)]:
        f(torch.randn(*shape))
    spans = frames(traced())
    assert [s["args"]["mode"] for s in spans] == ["compile", "cached", "recompile", "cached"]
    assert [s["args"]["compiled"] for s in spans] == [1, 0, 1, 0]
    assert spans[2]["args"]["compile_us"] > 0 and spans[1]["args"]["compile_us"] == 0
    assert all(s["args"]["graphs"] == 1 for s in spans)


class CountingList(list):
    """A callback list that counts the times it is searched or walked."""

    reads = 0

    def __contains__(self, item):
        CountingList.reads += 1
        return super().__contains__(item)

    def __iter__(self):
        CountingList.reads += 1
        return super().__iter__()

    def index(self, *args):
        CountingList.reads += 1
        return super().index(*args)

    def count(self, item):
        CountingList.reads += 1
        return super().count(item)


def test_calls_do_not_look_at_the_compile_callbacks(traced, monkeypatch):
    from dftracer.python import dynamo

    handler = torch._dynamo.callback_handler
    monkeypatch.setattr(handler, "start_callbacks", CountingList(handler.start_callbacks))
    monkeypatch.setattr(handler, "end_callbacks", CountingList(handler.end_callbacks))

    @dynamo.compile
    def f(x):
        return torch.sin(x) + 1

    assert dynamo._on_compile_start in handler.start_callbacks  # registered when decorated
    assert dynamo._on_compile_end in handler.end_callbacks
    x = torch.randn(4)
    f(x)  # compiles: torch runs the callbacks, the backend checks them
    reads = CountingList.reads
    for _ in range(20):
        assert torch.allclose(f(x), torch.sin(x) + 1)
    assert CountingList.reads == reads  # no call searched them
    spans = frames(traced())
    assert [s["args"]["mode"] for s in spans] == ["compile"] + ["cached"] * 20
    assert spans[0]["args"]["compile_us"] > 0


def test_compile_callbacks_come_back_after_reset(traced):
    from dftracer.python import dynamo

    handler = torch._dynamo.callback_handler

    @dynamo.compile(dynamic=False)
    def f(x):
        return (x * 2).sum()

    torch._dynamo.reset()  # drops torch's callbacks, ours included
    assert dynamo._on_compile_start not in handler.start_callbacks
    f(torch.randn(2, 3))  # timed in the backend; the backend registers them again
    assert handler.start_callbacks.count(dynamo._on_compile_start) == 1
    assert handler.end_callbacks.count(dynamo._on_compile_end) == 1
    f(torch.randn(4, 3))
    f(torch.randn(4, 3))
    assert handler.start_callbacks.count(dynamo._on_compile_start) == 1
    spans = frames(traced())
    assert [s["args"]["mode"] for s in spans] == ["compile", "recompile", "cached"]
    assert all(s["args"]["compile_us"] > 0 for s in spans[:2])


def test_dynamo_instance_args_on_every_event_and_update(traced):
    from dftracer.python import Dynamo

    tracer = Dynamo(name="tiny", epoch=1, step=100, image_idx=42, image_size=(224, 224))

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        @tracer.compile()
        def forward(self, x):
            return torch.relu(self.fc(x))

    m = Tiny()
    with torch.no_grad():
        m(torch.randn(3, 4))
        tracer.update(epoch=2, step=101)
        m(torch.randn(3, 4))
    tr = traced()
    events = tr.of("X", cat="dynamo")
    assert events and len(frames(tr)) == 2
    for e in events:
        assert e["args"]["name"] == "tiny" and e["args"]["image_idx"] == 42
        assert e["args"]["image_size"] == "(224, 224)"
    first, second = frames(tr)
    assert (first["args"]["epoch"], first["args"]["step"]) == (1, 100)
    assert (second["args"]["epoch"], second["args"]["step"]) == (2, 101)
    assert {(k["args"]["epoch"], k["args"]["phase"]) for k in children_of(tr, second)} == {
        (2, "inference")}
    with pytest.raises(TypeError, match="epoch"):
        tracer.update(epoch="three")


def test_hook_installed_while_traced_functions_exist(traced):
    from dftracer.python import dynamo

    assert _core._frame_hook_state() == (False, 0, 0)
    f = dynamo.compile(lambda x: x * 3)
    g = dynamo.compile(lambda x: x + 3)
    assert _core._frame_hook_state()[:2] == (True, 2)
    del f
    gc.collect()
    assert _core._frame_hook_state()[:2] == (True, 1)
    assert torch.equal(g(torch.ones(2)), torch.full((2,), 4.0))
    del g
    gc.collect()
    assert _core._frame_hook_state() == (False, 0, 0)
    assert len(frames(traced())) == 1


def test_other_backends_still_work_after_ours(traced):
    from dftracer.python import dynamo

    ours = dynamo.compile(lambda x: torch.cos(x) * 2)
    x = torch.randn(5)
    ours(x)
    before = _core._dyn_counters()
    for backend in ("eager", "aot_eager"):
        other = torch.compile(lambda x: torch.cos(x) * 3, backend=backend)
        assert torch.allclose(other(x), torch.cos(x) * 3)
        assert torch.allclose(other(x), torch.cos(x) * 3)
    assert _core._dyn_counters()[0] == before[0]  # none of our graphs ran
    ours(x)
    tr = traced()
    assert [s["args"]["mode"] for s in frames(tr)] == ["compile", "cached"]
    assert {e["name"] for e in ops(tr)} == {"function.cos.default", "function.mul.Tensor"}


def test_hook_survives_torch_installing_its_shim_first(traced):
    """A traced function created while torch's shim is installed: ours chains
    to it; torch later puts back the default evaluator, dropping ours; the next
    call of the traced function puts ours back."""
    from dftracer.python import dynamo

    made, states = [], []

    def make():  # torch's run-only mode keeps its shim installed around this
        made.append(dynamo.compile(lambda x: x - 1))
        states.append(_core._frame_hook_state())

    torch._dynamo.run(make)()
    assert states == [(True, 1, 1)]  # on top, chained to torch's shim
    assert _core._frame_hook_state()[:2] == (False, 1)  # torch restored the default
    (f,) = made
    f(torch.ones(2))
    assert _core._frame_hook_state()[:2] == (True, 1)
    f(torch.ones(2))
    spans = frames(traced())
    assert [s["args"]["mode"] for s in spans] == ["compile", "cached"]
    del f, made
    gc.collect()


def test_without_autograd_graphs_are_timed_at_torch_level(traced):
    from dftracer.python import dynamo

    f = dynamo.compile(lambda x: torch.nn.functional.relu(x).view(-1).sum(), autograd=False)
    f(torch.randn(2, 3))
    names = [e["name"] for e in ops(traced())]
    assert is_subsequence(["function.relu", "method.view", "method.sum"], names), names


def test_disabled_compiles_as_asked_and_inserts_nothing(monkeypatch):
    from dftracer.python import Dynamo, dynamo

    torch._dynamo.reset()
    assert not _core.is_active()
    before = _core._dyn_counters()
    f = dynamo.compile(lambda x: torch.sin(x) * 2)
    g = Dynamo(enable=False).compile(lambda x: torch.sin(x) * 3)
    x = torch.randn(4)
    assert torch.allclose(f(x), torch.sin(x) * 2) and torch.allclose(g(x), torch.sin(x) * 3)
    assert _core._dyn_counters() == before  # no graph of ours ran, nothing compiled by us
    assert _core._frame_hook_state() == (False, 0, 0)
    torch._dynamo.reset()


def test_bad_arguments_name_themselves():
    from dftracer.python import Dynamo, dynamo

    with pytest.raises(TypeError, match="step"):
        Dynamo(step="x")
    with pytest.raises(TypeError, match="name"):
        Dynamo(name=3)
    with pytest.raises(TypeError, match="callable"):
        dynamo.compile(3)
    with pytest.raises(ValueError, match="phase"):
        _core._dyn_op("x", 1, "sideways", -1)
    with pytest.raises(TypeError, match="code"):
        _core._frame_hook_add("nope", "n", 0)


def test_import_does_not_pull_torch():
    proc = run_python(textwrap.dedent("""
        import sys
        from dftracer.python import dftracer
        print("torch" in sys.modules)
    """))
    assert proc.stdout.strip() == "False"


def test_frame_hook_times_any_registered_code_including_raising_calls(tmp_path):
    """The hook on its own: one span per evaluation of a registered code
    object (returning or raising), none after it is removed."""
    run_python(f"""
        from dftracer import _core
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace')!r}, None, -1)
        def f(x):
            return x + 1
        _core._frame_hook_add(f.__code__, "plain.f", -1)
        for i in range(3):
            f(i)
        try:
            f("a")
        except TypeError:
            pass
        _core._frame_hook_remove(f.__code__)
        assert _core._frame_hook_state() == (False, 0, 0)
        f(1)
        log.finalize()
    """, ENABLED)
    spans = only_trace(tmp_path).of("X", cat="dynamo", name="plain.f")
    assert len(spans) == 4
    assert all(s["args"]["mode"] == "cached" and s["args"]["graphs"] == 0 for s in spans)


def test_threads_get_their_own_spans_and_nesting(traced):
    import threading

    from dftracer.python import dynamo

    f = dynamo.compile(lambda x: torch.tanh(x) * 2)
    f(torch.ones(3))  # compile once, on this thread

    def worker():
        for _ in range(3):
            f(torch.ones(3))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tr = traced()
    spans = frames(tr)
    assert len(spans) == 7
    workers = [s for s in spans if s["args"]["mode"] == "cached"]
    assert len(workers) == 6 and len({s["tid"] for s in workers}) == 2
    for s in spans:
        kids = children_of(tr, s)
        assert [k["name"] for k in kids] == ["function.tanh.default", "function.mul.Tensor"]
        assert all(k["tid"] == s["tid"] for k in kids)


def test_frame_spans_and_ops_nest_among_decorated_calls_and_log_events(tmp_path):
    """docs/trace-format.md, "Nesting": a compiled call inside a decorated
    one, with log_event before and after it: the span is the call's child,
    the ops the span's, the log events the call's."""
    run_python("""
        import torch
        from dftracer.python import dftracer, dft_fn, dynamo
        log = dftracer.initialize_log("trace.pfw", None, -1)
        p = dft_fn("app")
        @dynamo.compile
        def f(x):
            return torch.relu(x) + 1
        @p.log(name="outer")
        def outer(x):
            log.log_event("before", "app", log.get_time(), 0)
            y = f(x)
            log.log_event("after", "app", log.get_time(), 0)
            return y
        for _ in range(2):
            outer(torch.ones(4))
        log.finalize()
        """, ENABLED, cwd=str(tmp_path))
    tr = only_trace(tmp_path)
    calls = by_time(tr.of("X", cat="app", name="outer"))
    spans = frames(tr)
    assert len(calls) == len(spans) == 2
    for call, span in zip(calls, spans):
        assert (call["args"]["level"], call["args"]["p_idx"]) == (1, -1)
        assert (span["args"]["level"], span["args"]["p_idx"]) == (2, call["id"])
        kids = children_of(tr, span)
        assert kids and all(k["args"]["level"] == 3 for k in kids)
        for name in ("before", "after"):
            (ev,) = [e for e in tr.of("X", cat="app", name=name)
                     if call["ts"] <= e["ts"] <= call["ts"] + call["dur"]]
            assert (ev["args"]["level"], ev["args"]["p_idx"]) == (2, call["id"])
