"""What an event is, for the Python readers: reader/classify.c's one
definition (docs/cli.md, "Event classes") through `_core._classify`.

`event_class` gives the class a (cat, name) counts in (compute, data, io,
comm, checkpoint, other), or None for the tracer's own events and for the
containers (steps, loop bodies) whose time is their children's; `step_kind`
whether it is a step; `io_flags` the direction of a POSIX/STDIO call that
moves file data and how its `ret` counts (IO_* below)."""

from __future__ import annotations

from typing import Optional, Tuple

from dftracer import _core

CLASSES: Tuple[str, ...] = tuple(_core._CLASSES)
STEP_KINDS: Tuple[Optional[str], ...] = tuple(_core._STEP_KINDS)
IO_READ, IO_WRITE = _core._IO_READ, _core._IO_WRITE
IO_ITEMS, IO_CHAR, IO_STRING = _core._IO_ITEMS, _core._IO_CHAR, _core._IO_STRING
_NO_CLASS = _core._CLS_CONTAINER | _core._CLS_TRACER


def classify(cat: str, name: str) -> Tuple[Optional[str], Optional[str], int]:
    """(class or None, step kind or None, io flags) of (cat, name)."""
    cls, flags, kind, io = _core._classify(cat, name)
    return (None if flags & _NO_CLASS else CLASSES[cls]), STEP_KINDS[kind], io


def event_class(cat: str, name: str) -> Optional[str]:
    return classify(cat, name)[0]


def self_class(cat: str, name: str) -> str:
    """The class an event's self time counts in (a container's: other)."""
    return CLASSES[_core._classify(cat, name)[0]]


def traced_class(cat: str, name: str) -> Optional[str]:
    """The class an event's self time counts in, or None for the tracer's own
    events (a container's self time, step time no child covers: other)."""
    cls, flags, _, _ = _core._classify(cat, name)
    return None if flags & _core._CLS_TRACER else CLASSES[cls]


def step_kind(cat: str, name: str) -> Optional[str]:
    return STEP_KINDS[_core._classify(cat, name)[2]]


def io_flags(cat: str, name: str) -> int:
    return _core._classify(cat, name)[3]
