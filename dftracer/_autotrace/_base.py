"""What every torch hook shares: the event writer, the thread state, and the
parts that turn themselves off when one of their hooks fails."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch

from dftracer import _core

now: Callable[[], int] = _core.get_time
# open spans (docs/trace-format.md, "Open spans"): what a hung rank is inside of
span_open: Callable[..., int] = _core._span_open
span_close: Callable[[int], None] = _core._span_close
_log_event = _core.logger.log_event
compiling: Callable[[], bool] = torch.compiler.is_compiling


class _Thread(threading.local):
    """Per-thread state of the hooks (class attributes are the defaults)."""

    depth = 0          # hooked module forwards running on this thread
    top: Any = None    # the outermost one
    fwd_start = 0      # start of the outermost one
    in_data = 0        # inside a dataset fetch (worker or main process)
    in_comm = 0        # inside a traced collective (inner calls are not events)
    opt_depth = 0      # optimizer.step() calls running
    opt_owner: Any = None
    opt_start = 0
    fwd_tok = 0        # open-span tokens of the forward and the optimizer step
    opt_tok = 0


tls = _Thread()


def emit(name: str, cat: str, start: int, end: int,
         ints: Optional[Mapping[str, int]] = None,
         strs: Optional[Mapping[str, str]] = None) -> None:
    """One complete event from start to end (tracer clock, microseconds)."""
    _log_event(name, cat, start, end - start if end > start else 0, ints, None, strs)


def _say(line: str) -> None:
    level = os.environ.get("DFTRACER_LOG_LEVEL", "").upper()
    if level in ("DEBUG", "INFO", "WARN", "WARNING"):
        try:
            os.write(2, f"dftracer: info: {line}\n".encode("utf-8", "replace"))
        except OSError:
            pass


class Part:
    """One group of hooks (modules, optimizer, data, ...).  `on` is read by
    every hook; fail() turns the part off and undoes what it installed, so a
    hook that breaks costs one failed event, never the program."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.on = False
        self.why = "not installed"
        self._undo: List[Callable[[], None]] = []

    def started(self) -> None:
        self.on = True
        self.why = ""

    def undo_with(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def fail(self, exc: BaseException) -> None:
        if not self.on:
            return
        self.on = False
        self.why = f"{type(exc).__name__}: {exc}"
        _say(f"torch {self.name} events off ({self.why})")
        self.uninstall()

    def uninstall(self) -> None:
        undo, self._undo = self._undo, []
        for fn in reversed(undo):
            try:
                fn()
            except Exception:
                pass

    def state(self) -> str:
        return "on" if self.on else f"off: {self.why}"


def patch(part: Part, owner: Any, name: str, wrapper: Callable[..., Any]) -> Any:
    """Sets owner.name to wrapper (undone with the part); returns the original."""
    original = getattr(owner, name)
    setattr(owner, name, wrapper)

    def restore() -> None:
        if getattr(owner, name, None) is wrapper:
            setattr(owner, name, original)

    part.undo_with(restore)
    return original


def class_name(obj: Any) -> str:
    return type(obj).__name__


PARTS: Dict[str, Part] = {}


def part(name: str) -> Part:
    p = PARTS.get(name)
    if p is None:
        p = PARTS[name] = Part(name)
    return p
