"""GPU activity through CUPTI: kernels, copies, memsets and syncs (cat ``CUDA``).

``enable()`` (or ``DFTRACER_ENABLE_CUPTI=1`` when tracing starts) records the
GPU work of this process on the tracer's clock, one lane per device and stream.
The work happens in ``dftracer._core``; this module adds the torch.profiler
guard: Kineto also drives CUPTI, so while a torch.profiler session collects
CUDA activity, dftracer's CUPTI tracing steps aside (one warning) and takes
over again when the session stops.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Callable, Iterable, Optional, Sequence

from dftracer import _core

__all__ = ["enable", "disable", "available", "reason", "is_running"]

_PROFILER_MODULE = "torch.autograd.profiler"
_lock = threading.Lock()
_paused_for_torch = False
_warned = False


def available() -> bool:
    """True when libcupti and a CUDA device can be used."""
    return _core._cupti_available()


def reason() -> str:
    """Why GPU activity cannot be traced ('' when it can)."""
    return _core._cupti_reason()


def is_running() -> bool:
    """True while GPU activity is being recorded into the trace."""
    return _core._cupti_running()


def enable() -> None:
    """Records GPU activity from now on (from the next trace start if tracing
    is not active).  Raises RuntimeError saying why when CUDA or CUPTI is
    unavailable; tracing itself keeps working."""
    _install_profiler_guard()
    if _torch_profiler_running():
        _step_aside(None)  # Kineto owns CUPTI now: start once it stops
    _core._cupti_enable()


def disable() -> None:
    """Stops recording GPU activity, writing what CUPTI still holds."""
    _core._cupti_disable()


# ---- torch.profiler (Kineto) coexistence ---------------------------------


def _torch_profiler_running() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.autograd._profiler_enabled())
    except Exception:  # an older or partial torch: assume no session
        return False


def _wants_cuda(activities: Optional[Iterable[Any]]) -> bool:
    if activities is None:
        return True
    try:
        return any(getattr(a, "name", None) == "CUDA" for a in activities)
    except TypeError:
        return True


def _step_aside(activities: Optional[Iterable[Any]]) -> None:
    global _paused_for_torch, _warned
    if not _wants_cuda(activities):
        return
    with _lock:
        if _paused_for_torch:
            return
        _paused_for_torch = True
        was_running = _core._cupti_pause()
        warn = was_running and not _warned
        _warned = _warned or warn
    if warn:
        warnings.warn(
            "dftracer: torch.profiler is collecting CUDA activity, which needs CUPTI; "
            "dftracer's GPU tracing steps aside until the profiler stops (GPU work of "
            "that period appears only in the torch.profiler trace)",
            RuntimeWarning,
            stacklevel=4,
        )


def _take_back() -> None:
    global _paused_for_torch
    with _lock:
        if not _paused_for_torch:
            return
        _paused_for_torch = False
        _core._cupti_resume()


def _wrap_start(fn: Callable[..., Any]) -> Callable[..., Any]:
    def start(config: Any, activities: Any = None, *args: Any, **kwargs: Any) -> Any:
        _step_aside(activities)
        return fn(config, activities, *args, **kwargs)

    start.__wrapped__ = fn  # type: ignore[attr-defined]
    return start


def _wrap_stop(fn: Callable[..., Any]) -> Callable[..., Any]:
    def stop(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            _take_back()

    stop.__wrapped__ = fn  # type: ignore[attr-defined]
    return stop


def _patch_profiler(mod: ModuleType) -> None:
    """Wraps the Kineto entry points that torch.profiler and
    torch.autograd.profiler call through this module's globals."""
    if getattr(mod, "_dftracer_cupti_guard", False):
        return
    for name, wrap in (("_prepare_profiler", _wrap_start), ("_enable_profiler", _wrap_start),
                       ("_disable_profiler", _wrap_stop)):
        fn = getattr(mod, name, None)
        if callable(fn):
            setattr(mod, name, wrap(fn))
    mod._dftracer_cupti_guard = True  # type: ignore[attr-defined]


class _ProfilerImportHook(importlib.abc.MetaPathFinder):
    """Patches torch.autograd.profiler right after it is first imported."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if fullname != _PROFILER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch_profiler(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


_hook = _ProfilerImportHook()


def _install_profiler_guard() -> None:
    mod = sys.modules.get(_PROFILER_MODULE)
    if mod is not None:
        _patch_profiler(mod)
    elif not any(f is _hook for f in sys.meta_path):
        sys.meta_path.insert(0, _hook)
