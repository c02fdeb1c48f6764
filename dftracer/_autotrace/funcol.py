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
from typing import Any, Callable, Dict, Optional, Tuple

from dftracer._autotrace import comm
from dftracer._autotrace._base import emit, patch, span_open

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


def _wrap(module: Any, fn_name: str, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
    params = inspect.signature(original).parameters
    first = comm._Arg(original, next(iter(params)))  # the input tensor(s)
    group_arg = comm._Arg(original, "group")
    tag_arg = comm._Arg(original, "tag") if "tag" in params else None

    def describe(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        group = group_arg.get(args, kwargs)
        tag = tag_arg.get(args, kwargs) if tag_arg is not None else ""
        pg = _process_group(module, group, tag or "")
        info = comm.group_info(pg) if pg is not None else None
        if info is None or not info[2]:
            return None
        return {"bytes": comm.nbytes(first.get(args, kwargs)), "group_size": info[2],
                "seq": comm.next_seq(info[1]), "async": 1}, info[1]

    def record(what: Any, result: Any, start: int, end: int) -> None:
        emit(op, "comm", start, end, what[0], {"group": what[1]})

    def opened(what: Any, start: int) -> int:  # (only the issue: it rarely blocks)
        return span_open(op, "comm", start, what[1], what[0]["seq"])

    return comm._traced(original, describe, record, opened)


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
    if module is None or not P.on:
        return
    for fn_name, op in FUNCTIONS.items():
        original = getattr(module, fn_name, None)
        if callable(original):
            try:
                patch(P, module, fn_name, _wrap(module, fn_name, op, original))
            except (TypeError, ValueError) as exc:  # a signature we do not know
                P.fail(exc)


def install() -> None:
    from dftracer._autotrace import when_imported

    when_imported(MODULE, install_now)
