"""dftracer.python.ai: the pydftracer AI/ML event tree, checked on trace files."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any, Dict, List

from tracefile import find_traces, read_trace, run_python


PRELUDE = """
import os
from dftracer.python import dftracer, ai
log = dftracer.initialize_log(os.path.join({d!r}, "trace.pfw"), None, -1)
"""

# (attribute path, event name, category) as pydftracer writes them
TREE = [
    ("", "ai_root", "ai_root"),
    ("compute", "compute", "compute"),
    ("compute.forward", "forward", "compute"),
    ("compute.backward", "backward", "compute"),
    ("compute.step", "step", "compute"),
    ("data", "data", "data"),
    ("data.preprocess", "preprocess", "data"),
    ("data.item", "item", "data"),
    ("data.io", "data.io", "data"),
    ("data.io.open", "data.io.open", "data"),
    ("data.io.read", "data.io.read", "data"),
    ("data.io.write", "data.io.write", "data"),
    ("data.io.close", "data.io.close", "data"),
    ("dataloader", "dataloader", "dataloader"),
    ("dataloader.fetch", "fetch", "dataloader"),
    ("comm", "comm", "comm"),
] + [(f"comm.{op}", op, "comm") for op in (
    "send", "receive", "barrier", "bcast", "reduce", "all_reduce", "gather", "all_gather",
    "scatter", "reduce_scatter", "all_to_all")] + [
    ("device", "device", "device"),
    ("device.transfer", "transfer", "device"),
    ("checkpoint", "checkpoint", "checkpoint"),
    ("checkpoint.capture", "capture", "checkpoint"),
    ("checkpoint.restart", "restart", "checkpoint"),
    ("checkpoint.io", "checkpoint.io", "checkpoint"),
    ("checkpoint.io.read", "checkpoint.io.read", "checkpoint"),
    ("pipeline", "pipeline", "pipeline"),
    ("pipeline.epoch", "epoch", "pipeline"),
    ("pipeline.train", "train", "pipeline"),
    ("pipeline.evaluate", "evaluate", "pipeline"),
    ("pipeline.test", "test", "pipeline"),
    ("other", "other", "other"),
    ("other.log", "other.log", "other"),
    ("other.io", "other.io", "other"),
    ("other.io.write", "other.io.write", "other"),
]


def traced(tmp_path, body: str, enable: bool = True):
    code = PRELUDE.format(d=str(tmp_path)) + textwrap.dedent(body) + "\nlog.finalize()\n"
    env = {}
    if enable:
        env["DFTRACER_ENABLE"] = "1"
    proc = run_python(code, env=env, cwd=str(tmp_path))
    files = find_traces(str(tmp_path))
    if not enable:
        assert files == []
        return None, proc
    assert len(files) == 1, files
    return read_trace(files[0]), proc


def own_args(ev: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in ev["args"].items() if k not in ("hhash", "level", "p_idx")}


def names(trace) -> List[str]:
    return [e["name"] for e in trace.user_events()]


def node_expr(path: str) -> str:
    return "ai" + ("." + path if path else "")


def test_every_node_as_context_manager_and_decorator(tmp_path):
    lines = []
    for path, _, _ in TREE:
        n = node_expr(path)
        lines.append(f"with {n}:\n    pass")
        lines.append(f"@{n}\ndef f():\n    return 1\nassert f() == 1")
    trace, _ = traced(tmp_path, "\n".join(lines))
    got = [(e["name"], e["cat"]) for e in trace.user_events()]
    assert got == [(name, cat) for _, name, cat in TREE for _ in range(2)]
    assert all(e["args"]["level"] == 1 and own_args(e) == {} for e in trace.user_events())


def test_aliases_and_module():
    code = """
        import dftracer.python as dp
        from dftracer.python import ai, comm, compute, data, dataloader, device, checkpoint, pipeline
        from dftracer.python.ai import ai as ai2, DFTracerAI
        import dftracer.python.ai as ai_mod
        assert ai2 is ai and ai_mod is ai
        assert compute is ai.compute and data is ai.data and comm is ai.comm
        assert dataloader is ai.dataloader and device is ai.device
        assert checkpoint is ai.checkpoint and pipeline is ai.pipeline
        assert isinstance(ai.compute.forward, DFTracerAI) and isinstance(ai.compute.forward, dp.dft_fn)
        assert ai.data.preprocess.derive("collate") is ai.data.preprocess.derive("collate")
        print(ai.data.preprocess.derive("collate").name, ai.data.preprocess.derive("collate").cat)
    """
    proc = run_python(code)
    assert proc.stdout.split() == ["preprocess.collate", "data"]


def test_decorator_forms_and_args(tmp_path):
    trace, proc = traced(tmp_path, """
        @ai.data.item
        def item(i, step=None):
            return i
        @ai.compute.forward(args={"model": "mlp", "lr": 0.1})
        def fwd(x):
            return x
        @ai.compute.backward()
        def bwd():
            pass
        class M:
            @ai.compute.step
            def run(self, epoch):
                return epoch
        print(item(3, step=2), fwd(4), M().run(7))
        bwd()
        with ai.device.transfer(step=9, args={"bytes": 10}):
            pass
        with ai.device.transfer:
            pass
    """)
    assert proc.stdout.split() == ["3", "4", "7"]
    evs = trace.user_events()
    assert [(e["name"], e["cat"], own_args(e)) for e in evs] == [
        ("item", "data", {"step": 2}),
        ("forward", "compute", {"model": "mlp", "lr": 0.1}),
        ("step", "compute", {"epoch": 7}),
        ("backward", "compute", {}),
        ("transfer", "device", {"step": 9, "bytes": 10}),
        ("transfer", "device", {}),  # the variant did not change the node
    ]


def test_iter_block_and_count(tmp_path):
    trace, _ = traced(tmp_path, """
        for batch in ai.pipeline.epoch.iter(range(2)):
            for x in ai.dataloader.fetch.iter([10, 20, 30], include_block=False):
                with ai.compute.forward:
                    pass
        for _ in ai.pipeline.train.iter(range(2), include_iter=False):
            pass
    """)
    ev = trace.user_events()
    epoch_iter = [e for e in ev if e["name"] == "epoch.iter"]
    epoch_block = [e for e in ev if e["name"] == "epoch.block"]
    assert [own_args(e) for e in epoch_iter] == [{"count": 1}, {"count": 2}]
    assert [own_args(e) for e in epoch_block] == [{"count": 1}, {"count": 2}]
    assert all(e["cat"] == "pipeline" for e in epoch_iter + epoch_block)
    fetch = [e for e in ev if e["name"] == "fetch.iter"]
    assert [own_args(e)["count"] for e in fetch] == [1, 2, 3, 1, 2, 3]
    assert not [e for e in ev if e["name"] == "fetch.block"]
    # fetch.iter and forward nest under the epoch.block of their batch
    for e in fetch + [e for e in ev if e["name"] == "forward"]:
        parent = next(b for b in epoch_block if b["id"] == e["args"]["p_idx"])
        assert e["args"]["level"] == parent["args"]["level"] + 1
    assert [e["name"] for e in ev if e["cat"] == "pipeline" and "train" in e["name"]] == [
        "train.block", "train.block"]


def test_start_stop_and_metadata(tmp_path):
    trace, _ = traced(tmp_path, """
        ai.pipeline.epoch.start()
        ai.compute.step.start()
        ai.compute.step.stop()
        ai.pipeline.epoch.stop()
        ai.pipeline.epoch.start(metadata=True)
        ai.pipeline.epoch.stop(metadata=True)
        ai.pipeline.epoch.stop()   # nothing open: no event, no error
    """)
    epoch = [e for e in trace.user_events() if e["name"] == "epoch"]
    step = [e for e in trace.user_events() if e["name"] == "step"]
    assert len(epoch) == 1 and len(step) == 1
    assert step[0]["args"]["p_idx"] == epoch[0]["id"]
    cm = trace.of("M", name="CM")
    assert [e["args"]["name"] for e in cm] == ["epoch.start", "epoch.end"]
    assert all(e["args"]["value"].isdigit() for e in cm)
    assert int(cm[0]["args"]["value"]) <= int(cm[1]["args"]["value"])


def test_update_propagates_to_the_subtree(tmp_path):
    trace, _ = traced(tmp_path, """
        ai.update(epoch=2)
        ai.compute.update(step=5)
        @ai.compute.forward(args={"k": 1})
        def fwd(): pass
        fwd()
        with ai.data.item: pass
        ai.update(epoch=3)   # reaches the variant made by @...(args=) too
        fwd()
        with ai.compute.forward.derive("sub"): pass
    """)
    got = [(e["name"], own_args(e)) for e in trace.user_events()]
    assert got == [
        ("forward", {"epoch": 2, "step": 5, "k": 1}),
        ("item", {"epoch": 2}),
        ("forward", {"epoch": 3, "step": 5, "k": 1}),
        ("forward.sub", {"epoch": 3, "step": 5}),
    ]


def test_enable_disable_subtree_and_variants(tmp_path):
    trace, _ = traced(tmp_path, """
        @ai.compute.forward(args={"k": 1})
        def fwd(): pass
        @ai.data.item
        def item(): pass
        ai.compute.disable()
        fwd(); item()
        with ai.compute.backward: pass
        for _ in ai.compute.step.iter(range(2)): pass
        ai.compute.enable()
        ai.compute.backward.disable()
        fwd()
        with ai.compute.backward: pass
        ai.disable()
        item()
        ai.enable()
        item()
    """)
    assert names(trace) == ["item", "forward", "item"]


def test_init_child(tmp_path):
    trace, _ = traced(tmp_path, """
        class DS:
            @ai.data.item.init
            def __init__(self):
                self.x = 1
        DS()
        assert ai.data.item._children["init"].name == "item.init"
    """)
    assert [(e["name"], e["cat"]) for e in trace.user_events()] == [("item.init", "data")]


def test_disabled_tracing_writes_nothing(tmp_path):
    _, proc = traced(tmp_path, """
        @ai.compute.forward
        def f(x): return x
        for b in ai.pipeline.epoch.iter(range(3)):
            with ai.data.item:
                f(b)
        ai.pipeline.epoch.start(metadata=True)
        print("done")
    """, enable=False)
    assert proc.stdout.split() == ["done"]
    assert os.listdir(tmp_path) == []


SEED_TRAINING = """
from dftracer.python import dftracer
from dftracer.python import dft_fn as Profile

# Initialize logger
df_logger = dftracer.initialize_log("training.pfw", None, -1)

# Create DFTracer profile for additional tracing
df_test = Profile("training")

@df_test.log
def training_step(inputs, labels):
    return len(inputs) + len(labels)

for step in range(4):
    inputs = [1] * 8
    labels = [0] * 8
    loss = training_step(inputs, labels)

df_logger.finalize()
"""

SEED_COMBINED = """
from dftracer.python import dftracer, ai

df_logger = dftracer.initialize_log("combined.pfw", None, -1)

# Use AI decorators for I/O tracing
@ai.data.item
def load_data(idx):
    # Your data loading code
    return data

data = [0]
steps = 3
for step in range(steps):
    data = load_data(step)

df_logger.finalize()
"""


def test_seed_000_non_torch_examples_run_unchanged(tmp_path):
    # The non-torch lines of the seed 000 examples (PyTorch Profiler guide) with
    # the model replaced by plain Python; the dftracer lines are verbatim.
    env = {"DFTRACER_ENABLE": "1"}
    run_python(SEED_TRAINING, env=env, cwd=str(tmp_path))
    run_python(SEED_COMBINED, env=env, cwd=str(tmp_path))
    (train,) = find_traces(str(tmp_path), "training")
    t = read_trace(train)
    assert [(e["name"], e["cat"]) for e in t.user_events()] == [("training_step", "training")] * 4
    (combined,) = find_traces(str(tmp_path), "combined")
    c = read_trace(combined)
    assert [(e["name"], e["cat"]) for e in c.user_events()] == [("item", "data")] * 3


def test_variants_are_freed_without_touching_the_class():
    """Regression: freeing a node must not release its Python class twice."""
    import gc

    from dftracer.python import ai
    from dftracer.python.ai import DFTracerAI

    gc.collect()
    before = sys.getrefcount(DFTracerAI)
    for _ in range(2000):
        with ai.compute.forward(args={"k": 1}):
            pass
        DFTracerAI("tmp")
    gc.collect()
    assert sys.getrefcount(DFTracerAI) == before
