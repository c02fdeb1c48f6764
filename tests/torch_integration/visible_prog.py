"""What a program can see of the zero-code hooks (tests/torch_integration/test_autotrace_visible.py)."""
import inspect, traceback, torch, json
class Boom(Exception): pass
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(2, 2)
    def forward(self, x, fail=False):
        if fail:
            raise Boom("x")
        return self.l(x)
def counts(mod):
    return [len(mod._forward_pre_hooks), len(mod._forward_hooks)]
def attrs(mod):
    """What the module's own __dict__ holds beyond torch's, and what its forward shows."""
    fwd = mod.forward
    state = mod.__getstate__()
    return {"own": sorted(k for k in vars(mod) if not k.startswith("_") and k not in ("training", "l")),
            "types": sorted({type(v).__name__ for k, v in vars(mod).items() if k == "forward"}),
            "signature": str(inspect.signature(fwd)), "name": fwd.__name__,
            "func": fwd.__func__ is M.forward, "self": fwd.__self__ is mod,
            "pickled": "forward" in state}
def glob():
    mm = torch.nn.modules.module
    return [len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks)]
def frames():
    try:
        m(torch.ones(1, 2), fail=True)
    except Boom as e:
        return [(f.name, f.filename) for f in traceback.extract_tb(e.__traceback__)]
m = M()
out = {}
y = m(torch.ones(1, 2))
out["searching"] = {"global": glob(), "top": counts(m), "sub": counts(m.l), "attrs": attrs(m),
                   "frames": frames()}
y.sum().backward()
for _ in range(120):
    m(torch.ones(1, 2))
out["after"] = {"global": glob(), "top": counts(m), "sub": counts(m.l), "frames": frames(),
                "attrs": attrs(m)}
import torch.autograd.graph as graph
out["engine"] = [type(torch.autograd._engine_run_backward).__name__,
                 torch.autograd._engine_run_backward is graph._engine_run_backward,
                 getattr(graph._engine_run_backward, "__wrapped__", graph._engine_run_backward).__module__]
print(json.dumps(out))
