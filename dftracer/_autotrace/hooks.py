"""Installs the torch hooks, once ``import torch`` has finished.

Each part (see PARTS) is installed on its own: one that cannot be installed,
or whose hook fails later, is off, and the others go on.  status() says
which are on, and why the others are not.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict

from dftracer._autotrace.imports import when_imported
from dftracer._autotrace import _base

_installed = False


def _install_part(name: str, install: Callable[[], None]) -> None:
    p = _base.part(name)
    try:
        install()
    except Exception as exc:
        p.on = True  # so that fail() records why and undoes what was done
        p.fail(exc)


def _wrap_dynamo_reset(original: Callable[..., Any]) -> Callable[..., Any]:
    from dftracer._autotrace import compiled, modules

    @functools.wraps(original)
    def reset(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        modules.rewatch()
        compiled.reregister()
        return result

    return reset


def _on_dynamo() -> None:
    import torch._dynamo

    from dftracer._autotrace import compiled, modules

    if _base.part("modules").on:
        _install_part("modules", modules.watch_compile)
    _install_part("compile", compiled.install)
    torch._dynamo.reset = _wrap_dynamo_reset(torch._dynamo.reset)


def _install_comm() -> None:
    """torch.distributed's collectives, then the functional ones (funcol.py
    waits for their module), once the collectives' wrappers are set."""
    from dftracer._autotrace import comm, funcol

    comm.install()
    if comm._c10d is not None:
        funcol.install()


def install() -> None:
    """Installs every part; called once, after torch's import."""
    global _installed
    if _installed:
        return
    _installed = True
    from dftracer._autotrace import checkpoint, comm, data, ddp, modules, optim, steps

    _install_part("steps", steps.install)
    _install_part("modules", modules.install)
    _install_part("optimizer", optim.install)
    _install_part("dataloader", data.install)
    _install_part("comm", _install_comm)
    _install_part("ddp", ddp.install)
    _install_part("checkpoint", checkpoint.install)
    when_imported("torch._dynamo", _on_dynamo)


def status() -> Dict[str, str]:
    """{part: "on" or "off: why"} for every part of this process."""
    return {name: p.state() for name, p in _base.PARTS.items()}
