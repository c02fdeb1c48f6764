"""`comm` events: the collectives and point-to-point calls of the
torch.distributed Python API.

The public functions of torch.distributed.distributed_c10d are replaced (in
that module and in torch.distributed) by wrappers that time the call.  Each
collective gets the group's name (`world` for the default group), its size,
and `seq`, its number among the collectives of that group in this process:
every rank of a group makes the same calls in the same order, so
(`group`, `seq`, name) names the same collective on every rank.
Point-to-point calls get `peer` (the other rank) and `p2p_seq`, counted per
group and direction, instead of `seq`.  A call made inside another traced
call (all_gather inside all_gather_object's work, say) is not an event of
its own, and a rank outside the group records nothing.  With async_op=True
the event is only the issue (`async`: 1).  FSDP2 (fully_shard) communicates
through all_gather_single and reduce_scatter_single (torch 2.13), covered
here; the functional collectives (DeviceMesh-based parallelism) in funcol.py.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from dftracer._autotrace._base import compiling, emit, now, part, patch, span_close, span_open, tls

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
_groups: Dict[int, Tuple[Any, str, int]] = {}   # id(pg) -> (pg, name, size); size 0: not a member
_seq: Dict[Any, int] = {}
_originals: Dict[str, Callable[..., Any]] = {}


class _Arg:
    """Reads one parameter of a call, whether passed by position or name."""

    def __init__(self, fn: Callable[..., Any], name: Optional[str]) -> None:
        params = list(inspect.signature(fn).parameters.values()) if name else []
        found = [p for p in params if p.name == name]
        self.name = name
        self.pos = params.index(found[0]) if found else -1
        self.default = found[0].default if found else None
        if name and not found:
            raise TypeError(f"{getattr(fn, '__name__', fn)} has no parameter {name!r}")

    def get(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if 0 <= self.pos < len(args):
            return args[self.pos]
        value = kwargs.get(self.name, self.default) if self.name else None
        return None if value is inspect.Parameter.empty else value


def _ranks_label(ranks: Any) -> str:
    ranks = list(ranks)
    if ranks and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    shown = ",".join(str(r) for r in ranks[:8])
    return shown + (f",+{len(ranks) - 8}" if len(ranks) > 8 else "")


def group_info(group: Any) -> Optional[Tuple[Any, str, int]]:
    """(pg, name, size) of a group argument (None: the default group); the
    same name on every rank.  None when there is no process group yet."""
    pg = group if group is not None else _c10d._world.default_pg
    if pg is None:
        return None
    hit = _groups.get(id(pg))
    if hit is not None and hit[0] is pg:
        return hit
    if _c10d._rank_not_in_group(pg):
        info = (pg, "", 0)
    elif pg is _c10d._world.default_pg:
        info = (pg, "world", pg.size())
    else:
        label = _ranks_label(_c10d.get_process_group_ranks(pg))
        info = (pg, f"{_c10d._get_process_group_name(pg)}[{label}]", pg.size())
    _groups[id(pg)] = info
    return info


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(int(t.nbytes) for t in value if isinstance(t, torch.Tensor))
    return 0


def next_seq(key: Any) -> int:
    """The next number of a group's collectives (or of a p2p direction)."""
    n = _seq.get(key, 0)
    _seq[key] = n + 1
    return n


def _call(original: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, int]:
    t = tls
    t.in_comm += 1
    try:
        return original(*args, **kwargs), now()
    finally:
        t.in_comm -= 1


def _traced(original: Callable[..., Any],
            describe: Callable[[Tuple[Any, ...], Dict[str, Any]], Any],
            record: Callable[[Any, Any, int, int], None],
            opened: Callable[[Any, int], int]) -> Callable[..., Any]:
    """original wrapped: describe(args, kwargs) reads the call before it runs
    (None: not traced), opened(what, start) marks it open on the thread (a
    token), record(what, result, start, end) emits its event.
    A failure in either turns the comm events off; the call always runs once."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tls.in_comm or not P.on or compiling():
            return original(*args, **kwargs)
        try:
            what = describe(args, kwargs)
        except Exception as exc:
            P.fail(exc)
            what = None
        if what is None:
            return original(*args, **kwargs)
        start = now()
        tok = opened(what, start)
        try:
            result, end = _call(original, args, kwargs)
        finally:
            span_close(tok)
        try:
            record(what, result, start, end)
        except Exception as exc:
            P.fail(exc)
        return result

    return wrapper


def _wrap_collective(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
    data, group_arg, async_arg = _Arg(original, COLLECTIVES[op]), _Arg(original, "group"), None
    if "async_op" in inspect.signature(original).parameters:
        async_arg = _Arg(original, "async_op")

    def describe(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        info = group_info(group_arg.get(args, kwargs))
        if info is None or not info[2]:
            return None
        ints = {"bytes": nbytes(data.get(args, kwargs)) if data.name else 0,
                "group_size": info[2], "seq": next_seq(info[1])}
        if async_arg is not None and async_arg.get(args, kwargs):
            ints["async"] = 1
        return ints, info[1]

    def record(what: Any, result: Any, start: int, end: int) -> None:
        emit(op, "comm", start, end, what[0], {"group": what[1]})

    def opened(what: Any, start: int) -> int:
        return span_open(op, "comm", start, what[1], what[0]["seq"])

    return _traced(original, describe, record, opened)


def _peer(info: Tuple[Any, str, int], glob: Any, local: Any) -> int:
    if glob is not None:
        return int(glob)
    if local is not None:
        return int(_c10d.get_global_rank(info[0], local))
    return -1


def _wrap_point_to_point(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
    glob_name, local_name, is_async, sends = POINT_TO_POINT[op]
    tensor_arg, group_arg = _Arg(original, "tensor"), _Arg(original, "group")
    glob_arg, local_arg = _Arg(original, glob_name), _Arg(original, local_name)

    def describe(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        info = group_info(group_arg.get(args, kwargs))
        if info is None or not info[2]:
            return None
        peer = _peer(info, glob_arg.get(args, kwargs), local_arg.get(args, kwargs))
        return info, peer, nbytes(tensor_arg.get(args, kwargs))

    def record(what: Any, result: Any, start: int, end: int) -> None:
        info, peer, size = what
        if peer < 0 and not sends and isinstance(result, int):
            peer = result  # recv from any source returns the sender
        me = _c10d.get_rank()
        ints = {"bytes": size, "group_size": info[2], "peer": peer,
                "p2p_seq": next_seq((info[1], me, peer) if sends else (info[1], peer, me))}
        if is_async:
            ints["async"] = 1
        emit(op, "comm", start, end, ints, {"group": info[1]})

    def opened(what: Any, start: int) -> int:
        return span_open(op, "comm", start, what[0][1])

    return _traced(original, describe, record, opened)


def _wrap_destroy(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        _groups.clear()  # a new default group may get an old one's id
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
    from dftracer._autotrace import funcol

    funcol.install()  # torch.distributed._functional_collectives, once imported
    P.started()


def original(name: str) -> Callable[..., Any]:
    """torch.distributed's own function, not our wrapper (for the DDP hook)."""
    if name in _originals:
        return _originals[name]
    from torch.distributed import distributed_c10d

    return getattr(distributed_c10d, name)
