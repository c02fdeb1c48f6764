"""torch.compile integration: the ``dftracer`` backend, ``@dynamo.compile`` and ``Dynamo``.

The backend rewrites each FX graph it is given: every ``call_function``,
``call_method`` and ``call_module`` node gets a C timer call before and after
it (``_core._dyn_begin`` / ``_core._dyn_end``, see src/torch/dynamo_timing.c) and the
graph is recompiled, so it still runs as generated Python code.  Functions
wrapped by ``@dynamo.compile`` are also timed per call by a PEP 523 frame hook
(src/torch/frame_hook.c) that says whether the call compiled or ran cached graphs.

This module doubles as the default ``Dynamo`` instance: ``dynamo.compile``,
``dynamo.update`` and ``dynamo.backend`` are that instance's methods.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
import weakref
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

from dftracer import _core, _envflag

try:
    import torch
except ImportError:  # the package works without torch; compiling needs it
    torch = None  # type: ignore[assignment]

__all__ = ["CAT_DYNAMO", "Dynamo", "compile", "create_backend", "dftracer_dynamo_backend",
           "dynamo", "op_name", "update"]

# pydftracer's other names in this module.
from dataclasses import dataclass  # noqa: E402

from dftracer.python.ai_common import DFTracerAI  # noqa: E402,F401
from dftracer.python.common import P, R, TagDType, TagType, TagValue, dftracer  # noqa: E402,F401
from dftracer.python.env import DFTRACER_ENABLE  # noqa: E402,F401

TORCH_AVAILABLE = torch is not None


@dataclass
class CallStackRecord:
    """pydftracer's record of an op start (its backend kept a stack of them)."""

    op_name: str
    op_type: str
    target: str
    timestamp_us: int
    grad_enabled: bool


def __getattr__(name: str) -> Any:
    # pydftracer imported these at module import; functorch is slow to import.
    if name in ("aot_autograd", "make_boxed_func"):
        if torch is None:
            return None
        if name == "aot_autograd":
            from torch._dynamo.backends.common import aot_autograd

            return aot_autograd
        from functorch.compile import make_boxed_func

        return make_boxed_func
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

CAT_DYNAMO = "dynamo"
BACKEND_NAME = "dftracer"
_TIMED_OPS = ("call_function", "call_method", "call_module")
_graph_ids = itertools.count(1)
F = TypeVar("F", bound=Callable[..., Any])


def _tracing_enabled() -> bool:
    if _core.is_active():
        return True
    return _envflag.flag("DFTRACER_ENABLE")


def _require_torch() -> None:
    if torch is None:
        raise RuntimeError("dftracer.python.dynamo needs torch (import torch failed)")


def op_name(node: Any, gm: Any) -> str:
    """The event name of an FX node: function.<overload>, method.<name> or
    <path>.<ModuleType>_<target>."""
    if node.op == "call_function":
        return "function." + getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return "method." + str(node.target).replace(".", "_")
    path = str(node.target)
    return f"{path}.{type(gm.get_submodule(path)).__name__}_{path.replace('.', '_')}"


create_detailed_op_name = op_name  # pydftracer's name


def _instrument(gm: Any, graph_id: int, phase: str, ctx: int) -> None:
    """Inserts the C timers around every op node of gm and recompiles it."""
    graph = gm.graph
    nodes = [n for n in graph.nodes if n.op in _TIMED_OPS]
    if not nodes:
        return
    first = next(n for n in graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        graph.call_function(_core._dyn_graph, (graph_id,))
    set_grad = getattr(torch._C, "_set_grad_enabled", None)
    for node in nodes:
        op = _core._dyn_op(op_name(node, gm), graph_id, phase, ctx)
        with graph.inserting_before(node):
            token = graph.call_function(_core._dyn_begin, (op,))
        with graph.inserting_after(node):
            end = graph.call_function(_core._dyn_end, (op, token))
        if node.target is set_grad:  # grad mode changes inside the graph
            with graph.inserting_after(end):
                graph.call_function(_core._dyn_grad, ())
    gm.recompile()


@functools.lru_cache(maxsize=None)
def _aot_has_inference_compiler() -> bool:
    from torch._functorch.aot_autograd import aot_module_simplified

    return "inference_compiler" in inspect.signature(aot_module_simplified).parameters


# ---- compile accounting: torch's compile callbacks.  Registered when a
# function is decorated and, since torch._dynamo.reset() drops them, again by
# the backend at each compilation; never on the call path of a compiled function.


def _on_compile_start(_: Any) -> None:
    _core._dyn_compile_begin()


def _on_compile_end(_: Any) -> None:
    _core._dyn_compile_end(0)


def _ensure_compile_callbacks() -> None:
    """Registers the callbacks unless they are (a scan of torch's list)."""
    handler = getattr(getattr(torch, "_dynamo", None), "callback_handler", None)
    if handler is not None and _on_compile_start not in handler.start_callbacks:
        handler.register_start_callback(_on_compile_start)
        handler.register_end_callback(_on_compile_end)


class Dynamo:
    """Instruments torch.compile graphs; its args appear on every event it records."""

    def __init__(self, name: Optional[str] = None, epoch: Optional[int] = None,
                 step: Optional[int] = None, image_idx: Optional[int] = None,
                 image_size: Optional[Any] = None, enable: bool = True) -> None:
        self._ctx: int = _core._dyn_context_new()
        self._name = name
        self._args: Dict[str, Any] = {"epoch": epoch, "step": step, "image_idx": image_idx,
                                      "image_size": image_size}
        self._enable = bool(enable)
        self._push()

    def _push(self) -> None:
        a = self._args
        _core._dyn_context_set(self._ctx, self._name, a["epoch"], a["step"], a["image_idx"],
                               a["image_size"])

    @property
    def name(self) -> Optional[str]:
        return self._name

    @property
    def enabled(self) -> bool:
        return self._enable

    def enable(self) -> None:
        """Graphs compiled from now on are instrumented (when tracing is on)."""
        self._enable = True

    def disable(self) -> None:
        """Graphs compiled from now on are not instrumented."""
        self._enable = False

    def update(self, epoch: Optional[int] = None, step: Optional[int] = None,
               image_idx: Optional[int] = None, image_size: Optional[Any] = None) -> None:
        """Sets the args written on this tracer's next events (None keeps a value)."""
        new = {"epoch": epoch, "step": step, "image_idx": image_idx, "image_size": image_size}
        old = dict(self._args)
        self._args.update({k: v for k, v in new.items() if v is not None})
        try:
            self._push()
        except (TypeError, ValueError):
            self._args = old
            raise

    def backend(self, autograd: bool = True) -> Callable[..., Any]:
        """A torch.compile backend recording this tracer's events."""
        _require_torch()
        ctx = self._ctx

        def dftracer_backend(gm: Any, example_inputs: List[Any]) -> Callable[..., Any]:
            graph_id = next(_graph_ids)
            on = self._enable and _tracing_enabled()
            _core._dyn_compile_begin()
            try:
                _ensure_compile_callbacks()  # for the next compilation, after a reset()
                if not autograd:
                    if on:
                        phase = "forward" if torch.is_grad_enabled() else "inference"
                        _instrument(gm, graph_id, phase, ctx)
                    return gm.forward
                return _aot_backend(graph_id, ctx, on)(gm, example_inputs)
            finally:
                _core._dyn_compile_end(1)

        return dftracer_backend

    def compile(self, f_py: Optional[F] = None, autograd: bool = True,
                **compile_kwargs: Any) -> Union[F, Callable[[F], F]]:
        """``@dynamo.compile`` / ``@dynamo.compile()``: torch.compile with this
        tracer's backend, each call timed by the frame hook.  With tracing off
        the function is compiled with aot_eager (eager without autograd)."""

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"dynamo.compile needs a callable, not {type(fn).__name__}")
            on = self._enable and _tracing_enabled()
            if torch is None:
                if on:
                    _require_torch()
                return fn
            if not on:
                backend = "aot_eager" if autograd else "eager"
                return torch.compile(fn, backend=backend, **compile_kwargs)  # type: ignore
            _ensure_compile_callbacks()
            compiled = torch.compile(fn, backend=self.backend(autograd), **compile_kwargs)
            return _traced_entry(fn, compiled, self._ctx)  # type: ignore[return-value]

        return decorate(f_py) if f_py is not None else decorate

    def add_enhanced_timing_to_graph(self, gm: Any) -> Any:
        """Instruments an FX GraphModule with this tracer's timers (as the
        backend does) and returns it."""
        _require_torch()
        phase = "forward" if torch.is_grad_enabled() else "inference"
        _instrument(gm, next(_graph_ids), phase, self._ctx)
        return gm

    def reset(self) -> None:
        """pydftracer cleared its op stack here; the timers keep none."""

    def count_parameters(self, module: Any) -> Optional[int]:
        """The number of parameters of a torch module (None without .parameters())."""
        if hasattr(module, "parameters"):
            return int(sum(p.numel() for p in module.parameters()))
        return None


def _aot_backend(graph_id: int, ctx: int, on: bool) -> Callable[..., Any]:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(phase: str) -> Callable[..., Any]:
        def compile_graph(gm: Any, example_inputs: List[Any]) -> Callable[..., Any]:
            if on:
                _instrument(gm, graph_id, phase, ctx)
            return make_boxed_func(gm.forward)

        compile_graph.__name__ = f"dftracer_{phase}_compiler"
        return compile_graph

    kwargs = {"fw_compiler": compiler("forward"), "bw_compiler": compiler("backward")}
    if _aot_has_inference_compiler():
        kwargs["inference_compiler"] = compiler("inference")
    return aot_autograd(**kwargs)


_frame_hook_warned = False


def _frame_hook_off() -> bool:
    """True on a CPython newer than the frame hook was built for (the hook
    is compiled out there); says so once per process."""
    global _frame_hook_warned
    if _core.FRAME_HOOK:
        return False
    if not _frame_hook_warned:
        _frame_hook_warned = True
        import sys
        import warnings

        have = ".".join(map(str, sys.version_info[:2]))
        tested = ".".join(map(str, _core.FRAME_HOOK_MAX_PYTHON))
        warnings.warn(f"dftracer: the torch.compile frame hook is off on Python {have} (it "
                      f"depends on CPython internals and is tested up to Python {tested}); "
                      "@dynamo.compile calls get no `dynamo` spans, graph and op events "
                      "are still traced", RuntimeWarning, stacklevel=4)
    return True


def _traced_entry(fn: Callable[..., Any], compiled: Callable[..., Any], ctx: int) -> Callable[..., Any]:
    """A wrapper whose inner function has a code object of its own, registered
    with the frame hook, so each call of fn gets one span."""
    if _frame_hook_off():
        return compiled

    def call(*args: Any, **kwargs: Any) -> Any:
        return compiled(*args, **kwargs)

    name = getattr(fn, "__name__", "compiled")
    qualname = getattr(fn, "__qualname__", name)
    changes: Dict[str, Any] = {"co_name": name}
    if hasattr(call.__code__, "co_qualname"):
        changes["co_qualname"] = qualname
    code = call.__code__.replace(**changes)
    inner = types.FunctionType(code, call.__globals__, name, None, call.__closure__)
    ensure_hook = _core._frame_hook_ensure

    def entry(*args: Any, **kwargs: Any) -> Any:
        ensure_hook()
        return inner(*args, **kwargs)

    functools.update_wrapper(entry, fn)
    _core._frame_hook_add(code, qualname, ctx)
    weakref.finalize(entry, _core._frame_hook_remove, code)
    return entry


def create_backend(name: Optional[str] = None, epoch: Optional[int] = None,
                   step: Optional[int] = None, image_idx: Optional[int] = None,
                   image_size: Optional[Any] = None, enable: bool = True,
                   autograd: bool = True) -> Callable[..., Any]:
    """A torch.compile backend of a new Dynamo tracer with these args."""
    return Dynamo(name=name, epoch=epoch, step=step, image_idx=image_idx,
                  image_size=image_size, enable=enable).backend(autograd)


# ---- the default instance and the registered backend -----------------------

_default = Dynamo()
compile = _default.compile  # noqa: A001 (the pydftracer name)
update = _default.update
backend = _default.backend
dynamo = _default  # pydftracer's default instance
dftracer_dynamo_backend: Optional[Callable[..., Any]] = None

if torch is not None:
    _core._dyn_setup(torch.is_grad_enabled)
    dftracer_dynamo_backend = _default.backend()

    def _register_backend() -> None:
        from torch._dynamo.backends import registry

        known = getattr(registry, "_COMPILER_FNS", None)
        if known is not None and BACKEND_NAME in known:
            return
        try:
            registry.register_backend(compiler_fn=dftracer_dynamo_backend, name=BACKEND_NAME)
        except AssertionError:  # "duplicate name": registered by an earlier import
            pass

    _register_backend()
