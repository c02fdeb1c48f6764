"""A one-rank gloo job using the torch functions dftracer times per call in C
(collectives, send/recv, functional collectives, torch.save/load), for
test_autotrace_calls.py: prints one JSON line of what the program can see
of those functions, then uses them (tracing or not)."""

import inspect
import io
import json
import os
import pickle
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
here = os.path.dirname(os.path.abspath(__file__))
ours = (os.sep + "dftracer" + os.sep, os.sep + "dftracer_native")


def seen(fn):
    return {"type": type(fn).__name__, "name": fn.__name__, "qualname": fn.__qualname__,
            "module": fn.__module__, "doc": fn.__doc__, "signature": str(inspect.signature(fn)),
            "pickled": pickle.loads(pickle.dumps(fn)) is fn, "callable": callable(fn)}


def all_frames(call):
    """The Python functions (file:name) entered during call(), in order."""
    frames = []

    def prof(frame, event, arg):
        if event == "call":
            frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    return frames


def our_frames(call):
    """Python frames of dftracer's code entered during call()."""
    return [f for f in all_frames(call) if any(o in f.rpartition(":")[0] for o in ours)]


t = torch.ones(4)
path = os.path.join(os.getcwd(), "ck.pt")


def fullgraph_step(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


compiled = torch.compile(fullgraph_step, fullgraph=True, backend="eager")
# first calls: the default group is looked up once (in Python), and
# torch.save imports what it needs (through dftracer's import finder)
dist.all_reduce(t)
torch.save({"t": t}, path)
torch.load(path)
out = {
    "seen": {n: seen(f) for n, f in (("all_reduce", dist.all_reduce), ("send", dist.send),
                                      ("funcol", funcol.all_reduce), ("save", torch.save),
                                      ("load", torch.load))},
    "frames": {
        "all_reduce": our_frames(lambda: dist.all_reduce(t)),
        "save": our_frames(lambda: torch.save({"t": t}, path)),
        "load": our_frames(lambda: torch.load(path)),
    },
    # every Python function a collective runs, torch's own included: the
    # same traced or not (the wrapper asks torch whether it compiles by
    # reading torch.compiler's flag, not by calling is_compiling())
    "all_frames": all_frames(lambda: dist.all_reduce(t)),
    # torch.compile still turns the collective into a functional one (no
    # graph break: fullgraph), and the compiled call records no event
    "compiled": compiled(torch.ones(3)).tolist(),
}
print(json.dumps(out), flush=True)
# the events (after the 3 calls above): seq 1.., async, an inner all_gather
# that is no event, a file object's bytes
dist.all_reduce(t, group=None)
dist.broadcast(t, src=0)
dist.all_reduce(t, async_op=True).wait()
dist.all_gather_object([None], {"a": 1})
funcol.all_reduce(t, "sum", [0]).wait()
buf = io.BytesIO()
torch.save(t, buf)
buf.seek(0)
torch.load(buf)
# while torch.export traces the program's Python it sets the flag that
# torch.compiler.is_compiling() returns: a collective then is no event
torch.compiler._is_compiling_flag = True
try:
    dist.all_reduce(t)
finally:
    torch.compiler._is_compiling_flag = False
dist.all_reduce(t)
dist.destroy_process_group()
