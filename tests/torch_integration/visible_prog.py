"""What a program can see of the zero-code hooks (tests/torch_integration/test_autotrace_visible.py)."""
import traceback, torch, json
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
out["searching"] = {"global": glob(), "top": counts(m), "sub": counts(m.l), "frames": frames()}
y.sum().backward()
for _ in range(120):
    m(torch.ones(1, 2))
out["after"] = {"global": glob(), "top": counts(m), "sub": counts(m.l), "frames": frames()}
print(json.dumps(out))
