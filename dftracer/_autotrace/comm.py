"""`comm` events: the collectives and point-to-point calls of the
torch.distributed Python API.

The public functions of torch.distributed.distributed_c10d are replaced (in
that module and in torch.distributed) by wrappers that time the call.  Each
collective gets the group's name (`world` for the default group), its size,
and `seq`, its number among the collectives of that group in this process,
counted in C (src/torch/comm_seq.c) with DDP's bucket all_reduces: every
rank of a group makes the same calls in the same order, so (`group`, `seq`,
name) names one collective, the same on every rank.
Point-to-point calls get `peer` (the other rank) and `p2p_seq`, counted per
group and direction, instead of `seq`.  A call made inside another traced
call (all_gather inside all_gather_object's work, say) is not an event of
its own, and a rank outside the group records nothing.  With async_op=True
the event is only the issue (`async`: 1); the collective then stays open
(in flight) on the issuing thread until its Work completes.  FSDP2 (fully_shard) communicates
through all_gather_single and reduce_scatter_single (torch 2.13), covered
here; the functional collectives (DeviceMesh-based parallelism) in funcol.py.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from dftracer import _core
from dftracer._autotrace._base import compiling_flag, part, patch

P = part("comm")

# op -> the argument whose bytes the event reports (this rank's contribution)
COLLECTIVES: Dict[str, Optional[str]] = {
    "all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor",
    "all_gather": "tensor", "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "input_list", "reduce_scatter_tensor": "input",
    "gather": "tensor", "scatter": "tensor", "all_to_all": "input_tensor_list",
    "all_to_all_single": "input", "barrier": None, "monitored_barrier": None,
    # torch 2.13's fully_shard (FSDP2) gathers and reduce-scatters through these
    "all_gather_single": "input_tensor", "reduce_scatter_single": "input",
    "all_reduce_coalesced": "tensors", "all_gather_coalesced": "input_tensor_list",
    "all_gather_object": None, "gather_object": None, "broadcast_object_list": None,
    "scatter_object_list": None,
}
# op -> (global peer argument, group-rank peer argument, is async, sends)
POINT_TO_POINT: Dict[str, Tuple[str, str, bool, bool]] = {
    "send": ("dst", "group_dst", False, True), "recv": ("src", "group_src", False, False),
    "isend": ("dst", "group_dst", True, True), "irecv": ("src", "group_src", True, False),
}

_c10d: Any = None
_p2p_seq: Dict[Any, int] = {}  # (group, sender, receiver) -> next p2p_seq
_originals: Dict[str, Callable[..., Any]] = {}


def arg_spec(fn: Callable[..., Any], name: Optional[str]) -> Optional[Tuple[int, str, Any]]:
    """Where a call of fn passes parameter `name`, for the C wrapper
    (_core._AtCall): (position or -1, name, default); None for no name."""
    if not name:
        return None
    params = list(inspect.signature(fn).parameters.values())
    found = [p for p in params if p.name == name]
    if not found:
        raise TypeError(f"{getattr(fn, '__name__', fn)} has no parameter {name!r}")
    p = found[0]
    pos = params.index(p) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else -1
    return pos, name, None if p.default is inspect.Parameter.empty else p.default


def _ranks_label(ranks: Any) -> str:
    ranks = list(ranks)
    if ranks and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    shown = ",".join(str(r) for r in ranks[:8])
    return shown + (f",+{len(ranks) - 8}" if len(ranks) > 8 else "")


def group_info(group: Any) -> Optional[Tuple[Any, str, int]]:
    """(pg, name, size) of a group argument (None: the default group); the
    same name on every rank; size 0 where this rank is not a member.  None
    when there is no process group yet.  The C wrappers keep what this
    returns, per group (_core._at_calls_reset forgets)."""
    pg = group if group is not None else _c10d._world.default_pg
    if pg is None:
        return None
    if _c10d._rank_not_in_group(pg):
        return (pg, "", 0)
    if pg is _c10d._world.default_pg:
        return (pg, "world", pg.size())
    label = _ranks_label(_c10d.get_process_group_ranks(pg))
    return (pg, f"{_c10d._get_process_group_name(pg)}[{label}]", pg.size())


def timed(original: Callable[..., Any], op: str, kind: str, **spec: Any) -> Any:
    """original timed per call in C (src/torch/autotrace_calls.c), with the
    original's name, doc, signature (__wrapped__) and module."""
    wrapper = _core._AtCall(original, op, kind, **spec)
    functools.update_wrapper(wrapper, original)
    return wrapper


def _wrap_collective(op: str, original: Callable[..., Any]) -> Any:
    params = inspect.signature(original).parameters
    return timed(original, op, "collective", data=arg_spec(original, COLLECTIVES[op]),
                 group=arg_spec(original, "group"),
                 async_op=arg_spec(original, "async_op") if "async_op" in params else None)


def _wrap_point_to_point(op: str, original: Callable[..., Any]) -> Any:
    glob_name, local_name, is_async, sends = POINT_TO_POINT[op]
    return timed(original, op, "p2p", data=arg_spec(original, "tensor"),
                 group=arg_spec(original, "group"), peer=arg_spec(original, glob_name),
                 group_peer=arg_spec(original, local_name), is_async=is_async, sends=sends)


def _wrap_destroy(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        _core._at_calls_reset()  # a new default group may get an old one's address
        return original(*args, **kwargs)

    return destroy_process_group


def _replace(name: str, wrapper: Callable[..., Any], original: Callable[..., Any]) -> None:
    _originals[name] = original
    patch(P, _c10d, name, wrapper)
    if getattr(dist, name, None) is original:
        patch(P, dist, name, wrapper)


def install() -> None:
    global _c10d
    if not dist.is_available():
        P.why = "torch.distributed is not available"
        return
    from torch.distributed import distributed_c10d

    _c10d = distributed_c10d
    setup_calls()
    wrappers = {}
    for op in COLLECTIVES:
        if hasattr(_c10d, op):
            wrappers[op] = _wrap_collective(op, getattr(_c10d, op))
    for op in POINT_TO_POINT:
        if hasattr(_c10d, op):
            wrappers[op] = _wrap_point_to_point(op, getattr(_c10d, op))
    wrappers["destroy_process_group"] = _wrap_destroy(_c10d.destroy_process_group)
    for name, wrapper in wrappers.items():
        _replace(name, wrapper, getattr(_c10d, name))
    P.started()  # then hooks.py installs funcol.py (the functional collectives)


def original(name: str) -> Callable[..., Any]:
    """torch.distributed's own function, not our wrapper (for the DDP hook)."""
    if name in _originals:
        return _originals[name]
    from torch.distributed import distributed_c10d

    return getattr(distributed_c10d, name)


def setup_calls() -> None:
    """What the C wrappers of comm.py, funcol.py and checkpoint.py share
    (src/torch/autotrace_calls.c): comm's group lookup and counters, and the
    callables they reach Python through (none of them ours but the group
    lookup, once per group, and the search once a whole model is loaded)."""
    from dftracer._autotrace import modules

    c10d = _c10d  # None until install (or without torch.distributed)
    _core._at_calls_setup(group_info, _p2p_seq, torch.Tensor,
                          c10d.ProcessGroup if c10d else None, compiling_flag(),
                          c10d.get_rank if c10d else _no_group,
                          c10d.get_global_rank if c10d else _no_group,
                          os.path.abspath, torch.nn.Module, modules.search_again)


def _no_group(*args: Any) -> Any:  # never called: no collective is wrapped then
    raise RuntimeError("torch.distributed is not available")
