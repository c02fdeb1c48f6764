"""DDP's gradient all-reduce: one `comm/all_reduce` event per bucket.

When DistributedDataParallel.__init__ returns, a communication hook is
registered on its reducer that does what DDP does without one (scale the
bucket by 1/group size, all-reduce it) and times it.  The hook is a C
callable (_core._DdpHook, src/torch/ddp_hook.c), and so is the completion
it chains on the work's future: no Python frame runs per bucket.  (Gloo has
no completion callback and the reducer none per bucket, so without a hook
the buckets cannot be seen; a built-in C++ hook gives no callback.  The
price of any hook: DDP no longer fuses the scaling into its copy of the
gradients into the bucket, so the hook scales the bucket in one more pass.)

The event starts when the bucket's all-reduce is issued, or when the
previous bucket's finished if that is later (a backend queues them in
order; gloo's two worker threads may still finish two at once), and ends
when its future completes (on NCCL, when the work is enqueued).  It carries
`ddp_bucket`, `async`: 1 and `seq`, its number among the group's
collectives (one counter per group, shared with the program's own calls:
src/torch/comm_seq.c): every rank issues them in the same order, so it is a
sync point for merge's clock alignment like any collective.  From its issue
until it completes the bucket is in flight: open on the issuing thread, so
ranks waiting for it are seen waiting (docs/hang.md).

DDP accepts one hook per model.  A hook the program registers later
(register_comm_hook, _register_builtin_comm_hook) replaces ours: DDP's
bookkeeping is done as torch does it and our hook calls theirs from then
on.  Models with sparse gradients, gradient_as_bucket_view, mixed
precision, the Python reducer or a hook registered in __init__ are left
alone (their reduction is not reproduced bit for bit here).  Not covered: NCCL's own
timing, and gradient reduction outside DDP (FSDP, DeepSpeed, ...: their
collectives are events only when they call torch.distributed's Python API).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist

from dftracer import _core
from dftracer._autotrace import comm, ddp_native, modules
from dftracer._autotrace._base import _say, part, patch

P = part("ddp")

# The code of the DDP methods reproduced below (checked at install).
_REGISTER_NAMES = {"AssertionError", "__qualname__", "_check_comm_hook", "_comm_hooks",
                   "_register_comm_hook", "_set_comm_hook_name", "append", "dist", "logger",
                   "reducer"}
_BUILTIN_NAMES = {"AssertionError", "_register_builtin_comm_hook", "_set_comm_hook_name",
                  "dist", "logger", "reducer", "str"}


_states: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # DDP -> _DdpHook
# DDP -> whether DDP calls the native hook (ddp_native.py) or the C one
_native: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def _divisor(ddp_ref: "weakref.ref[Any]", hook: Any) -> int:
    """What DDP divides gradients by when a Join context is active: the group
    size, or under join(divide_by_initial_world_size=False) the ranks not yet
    joined (called by the C hook only while hook.join_work is set)."""
    ddp = ddp_ref()
    work = hook.join_work
    if ddp is None or work is None or getattr(ddp, "_divide_by_initial_world_size", True):
        return int(hook.size)
    work.wait()
    return int(work.get_future().value()[0].item())


def _has_sparse_gradients(module: Any) -> bool:
    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return any(isinstance(m, kinds) and m.sparse for m in module.modules())


def _attach(ddp: Any) -> None:
    if (getattr(ddp, "_use_python_reducer", False) or getattr(ddp, "_comm_hooks", None)
            or getattr(ddp, "_delay_all_reduce_all_params", False)
            or getattr(ddp, "gradient_as_bucket_view", True)
            or getattr(ddp, "reducer", None) is None or _has_sparse_gradients(ddp.module)):
        return
    info = comm.group_info(ddp.process_group)
    if info is None or not info[2]:
        return
    hook = _core._DdpHook(ddp.process_group, info[1], info[2], dist.AllreduceOptions(),
                          functools.partial(_divisor, weakref.ref(ddp)))
    native = ddp_native.for_ddp()
    if native is not None:
        try:
            native.register(ddp.reducer, ddp.process_group, hook, _core._ddp_native_api)
        except Exception as exc:  # hooked already (then the C hook fails too), or a misfit build
            _say(f"native DDP hook not registered ({type(exc).__name__}: {exc})")
            native = None
    if native is None:
        try:
            dist._register_comm_hook(ddp.reducer, hook, hook)
        except RuntimeError:  # a subclass registered a (built-in) hook in __init__
            return
    _states[ddp] = hook
    _native[ddp] = native is not None
    if len(_native) == 1:  # the first model: which hook (DFTRACER_LOG_LEVEL=INFO)
        _say(f"DDP buckets timed by the {'native' if native is not None else 'C'} hook")


def _wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        modules.hook_if_not_searching(self)
        if P.on:
            try:
                _attach(self)
            except Exception as exc:
                P.fail(exc)

    return __init__


def _wrap_register(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def register_comm_hook(self: Any, state: object, hook: Callable[..., Any]) -> None:
        ours = _states.get(self)
        if ours is None or ours.user is not None or ours.divide:
            return original(self, state, hook)
        # DDP.register_comm_hook without the reducer call (ours holds its slot)
        self._check_comm_hook(hook)
        if self.logger is None:
            raise AssertionError("self.logger must not be None")
        self.logger._set_comm_hook_name(hook.__qualname__)
        self._comm_hooks.append((hook, state))
        ours.user = (state, hook)

    return register_comm_hook


def _wrap_builtin(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        ours = _states.get(self)
        if ours is None or ours.user is not None or ours.divide:
            return original(self, comm_hook_type)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        # torch's C++ hooks, the same arithmetic: ALLREDUCE divides the bucket
        # (ours, in C), FP16_COMPRESS is its Python version
        if comm_hook_type not in (dist.BuiltinCommHookType.ALLREDUCE,
                                  dist.BuiltinCommHookType.FP16_COMPRESS):
            return original(self, comm_hook_type)
        if self.logger is None:
            raise AssertionError("self.logger must not be None")
        self.logger._set_comm_hook_name(str(comm_hook_type))
        if comm_hook_type == dist.BuiltinCommHookType.ALLREDUCE:
            ours.divide = True
        else:
            ours.user = (self.process_group, default_hooks.fp16_compress_hook)

    return _register_builtin_comm_hook


def _wrap_notify(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def notify_join_context(joinable: Any) -> Any:
        work = original(joinable)
        try:
            state = _states.get(joinable)
        except TypeError:  # not hashable: not a DDP model
            state = None
        if state is not None:
            state.join_work = work
        return work

    return notify_join_context


def install() -> None:
    if not dist.is_available():
        P.why = "torch.distributed is not available"
        return
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import distributed as ddp_module

    DDP = ddp_module.DistributedDataParallel
    if (set(DDP.register_comm_hook.__code__.co_names) != _REGISTER_NAMES
            or set(DDP._register_builtin_comm_hook.__code__.co_names) != _BUILTIN_NAMES):
        P.why = "DistributedDataParallel's hook registration is not the code this was written for"
        return
    patch(P, DDP, "__init__", _wrap_init(DDP.__init__))
    # Never undone: a model whose reducer holds our hook needs them for good.
    DDP.register_comm_hook = _wrap_register(DDP.register_comm_hook)
    DDP._register_builtin_comm_hook = _wrap_builtin(DDP._register_builtin_comm_hook)
    notify = Join.__dict__["notify_join_context"]
    Join.notify_join_context = staticmethod(_wrap_notify(notify.__func__))
    P.undo_with(lambda: setattr(Join, "notify_join_context", notify))
    P.started()
