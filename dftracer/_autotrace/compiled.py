"""`compile/compile` events: the time torch.compile spends compiling (graph
capture by dynamo and the backend), through torch._dynamo's compile
callbacks, so that a slow first step shows why.  `fn` names the function
being compiled (when dynamo compiles a frame); `trigger` says what started
it (`DYNAMO`, `LAZY_BACKWARD`, ...).

Installed once torch._dynamo is imported (torch.compile imports it), and
again after torch._dynamo.reset(), which drops every compile callback.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple

from dftracer._autotrace._base import emit, now, part

P = part("compile")

_open: List[Tuple[int, Optional[str]]] = []   # compiles started, innermost last


def _compiled_fn_name() -> Optional[str]:
    """The qualified name of the code dynamo is compiling, read from its
    compile_inner frame a few frames up from the callback; for a torch.nn
    module dynamo wraps (wrap_inline), `<Class>.forward`."""
    frame: Any = sys._getframe(2)
    name: Optional[str] = None
    for _ in range(16):
        if frame is None:
            break
        if name is None and frame.f_code.co_name == "compile_inner":
            code = frame.f_locals.get("code")
            name = getattr(code, "co_qualname", None) or getattr(code, "co_name", None)
            if not name or not name.endswith("wrap_inline.<locals>.inner"):
                return name
        elif name is not None and frame.f_code.co_name == "_compile":
            for cell in frame.f_locals.get("closure") or ():
                target = getattr(cell, "cell_contents", None)
                if hasattr(target, "forward"):
                    return f"{type(target).__name__}.forward"
            return name
        frame = frame.f_back
    return name


def _on_start(args: Any) -> None:
    try:
        name = _compiled_fn_name() if str(getattr(args, "callback_trigger", "")).endswith(
            "DYNAMO") else None
        _open.append((now(), name))
    except Exception as exc:
        P.fail(exc)


def _on_end(args: Any) -> None:
    try:
        if not _open:
            return
        start, name = _open.pop()
        strs = {"trigger": getattr(getattr(args, "callback_trigger", None), "name", "")}
        if name:
            strs["fn"] = name
        emit("compile", "compile", start, now(), None, strs)
    except Exception as exc:
        P.fail(exc)


def _register() -> None:
    import torch._dynamo

    handler = torch._dynamo.callback_handler
    if _on_start not in handler.start_callbacks:
        handler.register_start_callback(_on_start)
        handler.register_end_callback(_on_end)


def _unregister() -> None:
    import torch._dynamo

    handler = torch._dynamo.callback_handler
    if _on_start in handler.start_callbacks:
        handler.remove_start_callback(_on_start)
    if _on_end in handler.end_callbacks:
        handler.remove_end_callback(_on_end)


def reregister() -> None:
    """After torch._dynamo.reset()."""
    if P.on:
        try:
            _register()
        except Exception as exc:
            P.fail(exc)


def install() -> None:
    _register()
    P.undo_with(_unregister)
    P.started()
