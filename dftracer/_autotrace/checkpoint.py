"""`checkpoint/torch.save` and `checkpoint/torch.load` events (`path` when a
path is given, `bytes` written or read when known).  Inside a dataset
access (a DataLoader worker reading samples with torch.load) they are data
loading, part of the `item` event, and not events of their own."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.serialization as serialization

from dftracer._autotrace import modules
from dftracer._autotrace._base import compiling, emit, in_data, now, part, patch

P = part("checkpoint")


def _file_arg(args: Tuple[Any, ...], kwargs: Dict[str, Any], pos: int) -> Any:
    return args[pos] if len(args) > pos else kwargs.get("f")


def _path(f: Any) -> Optional[str]:
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.path.abspath(os.fsdecode(f))
    return None


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _tell(f: Any) -> Optional[int]:
    try:
        pos = f.tell()
    except Exception:
        return None
    return pos if isinstance(pos, int) else None


def _emit(name: str, start: int, end: int, path: Optional[str], size: int) -> None:
    ints = {"bytes": size} if size >= 0 else None
    emit(name, "checkpoint", start, end, ints, {"path": path} if path else None)


def _moved(before: Optional[int], f: Any) -> int:
    after = _tell(f) if before is not None else None
    return after - before if after is not None and before is not None else -1


def _wrap(original: Callable[..., Any], name: str, file_index: int) -> Callable[..., Any]:
    """torch.save (the file is argument 1) or torch.load (argument 0), timed:
    its bytes are the file's size after, or what a file object moved."""
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not P.on or in_data() or compiling():
            return original(*args, **kwargs)
        f = _file_arg(args, kwargs, file_index)
        path = _path(f)
        before = None if path else _tell(f)
        start = now()
        result = original(*args, **kwargs)
        end = now()
        try:
            _emit(name, start, end, path, _size(path) if path else _moved(before, f))
            if isinstance(result, torch.nn.Module):  # a whole model loaded: time its forward
                modules.search_again()
        except Exception as exc:
            P.fail(exc)
        return result

    return call


def install() -> None:
    save = _wrap(serialization.save, "torch.save", 1)
    load = _wrap(serialization.load, "torch.load", 0)
    for owner in (serialization, torch):
        patch(P, owner, "save", save)
        patch(P, owner, "load", load)
    P.started()
