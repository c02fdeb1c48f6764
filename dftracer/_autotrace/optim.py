"""`optimizer.step` events, through torch's global optimizer step hooks.

Only the outermost step() is an event: an optimizer whose step() calls
another's (ZeroRedundancyOptimizer, wrappers) is one step.  Each step also
moves the iteration count (steps.py).
"""

from __future__ import annotations

from typing import Any, List

import torch.optim.optimizer as optimizer_module

from dftracer._autotrace import modules, steps
from dftracer._autotrace._base import class_name, compiling, emit, now, part, span_close, span_open, tls

P = part("optimizer")

_handles: List[Any] = []


def _pre(opt: Any, args: Any, kwargs: Any) -> None:
    if compiling():
        return
    try:
        t = tls
        if t.opt_depth and t.opt_owner is opt:  # an earlier step() raised
            t.opt_depth = 0
        t.opt_depth += 1
        if t.opt_depth == 1:
            t.opt_owner = opt
            t.opt_start = start = now()
            t.opt_tok = span_open("optimizer.step", "compute", start, None, steps.current())
            modules.reset_depth()
            steps.optimizer_begin(id(opt), start)
    except Exception as exc:
        P.fail(exc)


def _post(opt: Any, args: Any, kwargs: Any) -> None:
    if compiling():
        return
    try:
        t = tls
        if t.opt_depth <= 0:
            return
        t.opt_depth -= 1
        if t.opt_depth == 0 and t.opt_owner is opt:
            t.opt_owner = None
            if t.opt_tok:
                span_close(t.opt_tok)
                t.opt_tok = 0
            end = now()
            emit("optimizer.step", "compute", t.opt_start, end,
                 {"step": steps.current()}, {"optimizer": class_name(opt)})
            steps.optimizer_end(id(opt), end)
    except Exception as exc:
        P.fail(exc)


def _remove() -> None:
    for handle in _handles:
        handle.remove()
    _handles.clear()


def install() -> None:
    _handles.append(optimizer_module.register_optimizer_step_pre_hook(_pre))
    _handles.append(optimizer_module.register_optimizer_step_post_hook(_post))
    P.undo_with(_remove)
    P.started()
