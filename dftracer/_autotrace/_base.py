"""What every torch hook shares: the event writer, the thread state, and the
parts that turn themselves off when one of their hooks fails."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch

from dftracer import _core, _envflag

now: Callable[[], int] = _core.get_time
# open spans (docs/trace-format.md, "Open spans"): what a hung rank is inside of
span_open: Callable[..., int] = _core._span_open
span_close: Callable[[int], None] = _core._span_close
_log_event = _core.logger.log_event
compiling: Callable[[], bool] = torch.compiler.is_compiling


def compiling_flag() -> Any:
    """What the C wrappers ask whether torch compiles: torch.compiler's
    globals where is_compiling() only returns their `_is_compiling_flag`
    (read there, no call), else the function itself."""
    code = getattr(compiling, "__code__", None)
    if (code is not None and "_is_compiling_flag" in vars(torch.compiler)
            and set(code.co_names) <= {"torch", "jit", "is_scripting", "_is_compiling_flag"}):
        return vars(torch.compiler)
    return compiling


def in_data() -> int:
    """Inside a dataset fetch on this thread (worker or main process)."""
    return _core._at_thread()[2]


data_enter: Callable[[int], int] = _core._at_in_data_add  # +1 / -1 around a fetch in Python


def emit(name: str, cat: str, start: int, end: int,
         ints: Optional[Mapping[str, int]] = None,
         strs: Optional[Mapping[str, str]] = None) -> None:
    """One complete event from start to end (tracer clock, microseconds)."""
    _log_event(name, cat, start, end - start if end > start else 0, ints, None, strs)


def _say(line: str) -> None:
    if _envflag.log_level(os.environ.get("DFTRACER_LOG_LEVEL")) != "ERROR":
        try:
            os.write(2, f"dftracer: info: {line}\n".encode("utf-8", "replace"))
        except OSError:
            pass


# The parts whose hooks are in C (src/torch/autotrace.h numbers them): their
# `on` is also the C hooks' switch.
_C_PARTS = {"steps": 0, "modules": 1, "optimizer": 2, "dataloader": 3, "comm": 4,
            "checkpoint": 5}


class Part:
    """One group of hooks (modules, optimizer, data, ...).  `on` is read by
    every hook; fail() turns the part off and undoes what it installed, so a
    hook that breaks costs one failed event, never the program."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._c = _C_PARTS.get(name, -1)
        self._on = False
        self.on = False
        self.why = "not installed"
        self._undo: List[Callable[[], None]] = []

    @property
    def on(self) -> bool:
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        self._on = bool(value)
        if self._c >= 0:
            _core._at_part(self._c, self._on)

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


def _c_failed(index: int, exc: BaseException) -> None:
    """A C hook failed (it already stands aside): its part is off."""
    for p in PARTS.values():
        if p._c == index:
            p.fail(exc)


_core._at_set_fail(_c_failed)


# Called once torch.compile is seen: hooks that dynamo could meet move to
# Python shims that stand aside while compiling (modules.py, optim.py).
at_compile: List[Callable[[], None]] = []
