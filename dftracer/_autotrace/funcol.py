"""`comm` events for torch.distributed._functional_collectives (the
collectives of DeviceMesh-based tensor/sequence parallelism and of traced
code): all_reduce, all_gather_tensor, reduce_scatter_tensor,
all_to_all_single, broadcast and their `_autograd`/`_single`/`_coalesced`
forms, wrapped once the module is imported.

A functional collective returns before the data moved (an
AsyncCollectiveTensor, waited for on first use), so its event is the issue
(`async`: 1) with `bytes` (this rank's input), `group`, `group_size` and
`seq` counted with the group's other collectives (comm.py): the same
(`group`, `seq`, name) on every rank.  Calls made by another traced call
(FSDP's, c10d's) record nothing of their own."""

from __future__ import annotations

import inspect
import sys
from typing import Any, Callable, Dict, Optional

from dftracer import _core
from dftracer._autotrace import comm
from dftracer._autotrace._base import patch

P = comm.P
MODULE = "torch.distributed._functional_collectives"
# function -> the event's name (the c10d collective it is)
FUNCTIONS: Dict[str, str] = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather_tensor": "all_gather_into_tensor",
    "all_gather_tensor_autograd": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "all_gather_single_autograd": "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor_autograd": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_single_autograd": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "all_to_all_single": "all_to_all_single", "all_to_all_single_autograd": "all_to_all_single",
    "broadcast": "broadcast",
}


def _wrap(module: Any, fn_name: str, op: str, original: Callable[..., Any]) -> Any:
    params = inspect.signature(original).parameters

    def resolve(group: Any, tag: Any) -> Optional[Any]:  # only for a group not a ProcessGroup
        return _process_group(module, group, tag or "")

    return comm.timed(original, op, "funcol", data=comm.arg_spec(original, next(iter(params))),
                      group=comm.arg_spec(original, "group"),
                      tag=comm.arg_spec(original, "tag") if "tag" in params else None,
                      resolve=resolve)


def _process_group(module: Any, group: Any, tag: str) -> Optional[Any]:
    """The ProcessGroup of a functional collective's `group` (a group, a
    DeviceMesh, (mesh, dim), a list of ranks)."""
    from torch.distributed import distributed_c10d as c10d

    if isinstance(group, c10d.ProcessGroup):
        return group
    name = module._resolve_group_name(group, tag)
    return c10d._resolve_process_group(name)


def install_now() -> None:
    module = sys.modules.get(MODULE)
    if module is None:
        return
    _remap_originals(module)
    if not P.on:
        return
    for fn_name, op in FUNCTIONS.items():
        original = getattr(module, fn_name, None)
        if callable(original):
            try:
                patch(P, module, fn_name, _wrap(module, fn_name, op, original))
            except (TypeError, ValueError) as exc:  # a signature we do not know
                P.fail(exc)


def _remap_originals(module: Any) -> None:
    """torch.compile replaces a c10d collective in a graph by the function
    that traceable_collective_remaps maps it to.  Imported after comm.py's
    wrappers were set, the map's keys are the wrappers; dynamo traces a
    wrapper's original (its __original_fn) and looks that up: the originals
    are added as keys too (the map stays right if the wrappers go)."""
    remaps = getattr(module, "traceable_collective_remaps", None)
    if not isinstance(remaps, dict):
        return
    for key, target in list(remaps.items()):
        if isinstance(key, _core._AtCall):
            remaps.setdefault(key.__original_fn, target)


def install() -> None:
    from dftracer._autotrace.imports import when_imported

    when_imported(MODULE, install_now)
