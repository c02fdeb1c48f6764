"""The rank torch.distributed gives a process, written into its trace.

A launcher such as torchrun, srun or mpirun puts the rank in the environment,
and the core writes it at start-up (the `rank` metadata event,
docs/trace-format.md).  A process started without one (``mp.spawn``, a
notebook) learns its rank only when it calls ``init_process_group``: this
module wraps that function so that, once it returns, the rank and world size
are written as a `rank` event with ``source`` ``torch.distributed``.

``install()`` does not import torch: when ``torch.distributed`` is not
imported yet, a finder on ``sys.meta_path`` wraps the function right after
the module is first imported.  The wrapper returns what the function returns
and raises what it raises; writing the event never raises.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any, Optional, Sequence, Tuple

from dftracer import _core

_MODULE = "torch.distributed"
_JOB_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID")
# the rank this process learnt from torch.distributed: (rank, world size,
# local rank or -1); a forked child has it too, a spawned one (a DataLoader
# worker of multiprocessing_context="spawn") gets it through WORKER_RANK_VAR
learnt: Optional[Tuple[int, int, int]] = None
WORKER_RANK_VAR = "DFTRACER_WORKER_RANK"


def _record(dist: Any) -> None:
    try:
        if not dist.is_initialized():
            return
        local: Optional[int] = None
        for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
            value = os.environ.get(var, "")
            if value.isdigit():
                local = int(value)
                break
        job = next((os.environ[v] for v in _JOB_VARS
                    if os.environ.get(v) not in (None, "", "none")), None)
        global learnt
        rank, world = int(dist.get_rank()), int(dist.get_world_size())
        _core._record_rank(rank, world, -1 if local is None else local, job)
        learnt = (rank, world, -1 if local is None else local)
    except Exception:  # the traced program goes on whatever happens here
        pass


def parent_rank() -> Optional[Tuple[int, int, int]]:
    """In a spawned DataLoader worker of a process that learnt its rank from
    torch.distributed (no RANK in its environment): that rank, from
    WORKER_RANK_VAR (data.py sets it while the workers start); else None."""
    if learnt is not None:
        return None  # this process knows its own (a forked child: its parent's)
    parts = os.environ.get(WORKER_RANK_VAR, "").split(",")
    if len(parts) != 3 or not all(p.lstrip("-").isdigit() and len(p) < 12 for p in parts):
        return None
    rank, world, local = (int(p) for p in parts)
    return (rank, world, local) if rank >= 0 else None


def _wrap(dist: ModuleType) -> None:
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "__dftracer_rank__", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _record(dist)
        return result

    init_process_group.__dftracer_rank__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group  # type: ignore[attr-defined]
    c10d = sys.modules.get(_MODULE + ".distributed_c10d")
    if c10d is not None and getattr(c10d, "init_process_group", None) is original:
        c10d.init_process_group = init_process_group  # type: ignore[attr-defined]


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # resource readers, get_code, ...
        return getattr(self._inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._busy = False  # another finder that asks the others (as this one does) asks us

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _MODULE or self._busy:
            return None
        self._busy = True
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader)
                    return spec
            return None
        finally:
            self._busy = False


_finder = _Finder()


def install() -> None:
    """Wraps torch.distributed.init_process_group now, or when it is imported."""
    dist = sys.modules.get(_MODULE)
    if dist is not None:
        _wrap(dist)
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
