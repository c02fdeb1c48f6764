"""`optimizer.step` events, through torch's global optimizer step hooks.

Only the outermost step() is an event: an optimizer whose step() calls
another's (ZeroRedundancyOptimizer, wrappers) is one step.  Each step also
moves the iteration count (steps.py).  The hooks are C objects
(src/torch/autotrace_hooks.c); once torch.compile is in use they become
Python shims that stand aside while dynamo traces a step.
"""

from __future__ import annotations

from typing import Any, List

import torch.optim.optimizer as optimizer_module

from dftracer import _core
from dftracer._autotrace import _base
from dftracer._autotrace._base import compiling, part

P = part("optimizer")

_handles: List[Any] = []
_pre = _core._at_optimizer_pre    # (opt, args, kwargs)
_post = _core._at_optimizer_post


def _pre_outside_compile(opt: Any, args: Any, kwargs: Any) -> None:
    if not compiling():
        _pre(opt, args, kwargs)


def _post_outside_compile(opt: Any, args: Any, kwargs: Any) -> None:
    if not compiling():
        _post(opt, args, kwargs)


def _remove() -> None:
    for handle in _handles:
        handle.remove()
    _handles.clear()


def _register(pre: Any, post: Any) -> None:
    _handles.append(optimizer_module.register_optimizer_step_pre_hook(pre))
    _handles.append(optimizer_module.register_optimizer_step_post_hook(post))


def _to_shims() -> None:
    if P.on and _handles:
        _remove()
        _register(_pre_outside_compile, _post_outside_compile)


def install() -> None:
    _register(_pre, _post)
    P.undo_with(_remove)
    if _to_shims not in _base.at_compile:
        _base.at_compile.append(_to_shims)
    P.started()
