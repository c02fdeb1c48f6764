"""Events of an unchanged torch program: the switch and the wait for torch.

Under ``dftracer run`` (or with ``DFTRACER_TORCH=1`` and tracing on), a
process that imports torch gets steps, data waits, forward/backward,
collectives, checkpoints and compile times without any change to the
program (docs/ai.md, "Events of an unchanged script").

This module is imported at start-up, so it stays light: it imports neither
torch nor the rest of the package.  It decides whether the feature is on and
puts a finder first on ``sys.meta_path`` that waits for ``import torch`` to
finish; only then are the hooks (``dftracer._autotrace.hooks``) imported and
installed.  A process that never imports torch pays one dict lookup per
import.
"""

from __future__ import annotations

from typing import Optional

from dftracer import _envflag
from dftracer._autotrace.imports import remove_watcher, when_imported  # noqa: F401 (its API)

ENV = "DFTRACER_TORCH"
_decided: Optional[bool] = None


def wanted() -> bool:
    """True when this process records torch events: tracing is on and
    DFTRACER_TORCH is on (its default: on under ``dftracer run``, that is with
    DFTRACER_INIT=PRELOAD, else off).  Decided once per process."""
    global _decided
    if _decided is None:
        _decided = _envflag.flag("DFTRACER_ENABLE") and \
            _envflag.flag(ENV, _envflag.preload(), warn=True)
    return _decided


def _install_hooks() -> None:
    from dftracer._autotrace import hooks

    hooks.install()


_requested = False


def install() -> None:
    """Installs the torch hooks once torch is imported, when wanted()."""
    global _requested
    if _requested or not wanted():
        return
    _requested = True
    when_imported("torch", _install_hooks)
