"""MemoryTracker: the resident memory of the process (and, with CUDA in use,
the caching allocator's figures per device) over a block (docs/memory.md).

On CPU the peak is sampled by a C thread every 2 ms while the block runs
(src/core/memory_watch.c); when the kernel's high-water mark (VmHWM) rose during
the block, that exact figure is taken instead.  Importing this module does
not import torch; the CUDA figures are read only when torch is already
imported and CUDA is available.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Dict, List, Optional, TypeVar

from dftracer import _core

F = TypeVar("F", bound=Callable[..., Any])

_MB = 1e6


def _size(n: Optional[int]) -> str:
    if n is None or n < 0:
        return "?"
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    return f"{n / _MB:.1f} MB"


def _cuda() -> Any:
    """torch.cuda when torch is imported and CUDA is available, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_available() else None
    except Exception:
        return None


def _cuda_now(cuda: Any) -> List[Dict[str, int]]:
    return [{"allocated": int(cuda.memory_allocated(d)), "reserved": int(cuda.memory_reserved(d))}
            for d in range(cuda.device_count())]


class MemoryTracker:
    """Context manager (and decorator) reporting the memory a block used.

    ``with MemoryTracker() as m: ...; m.report()``.  Resets torch's CUDA peak
    statistics (``torch.cuda.reset_peak_memory_stats``) on entry when CUDA is
    in use.  Writes one ``memory`` event into the trace when tracing is on.
    """

    def __init__(self, name: str = "memory") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"MemoryTracker: name must be a non-empty string, not {name!r}")
        self.name = name
        self._slot = -1
        self._t0 = 0
        self._start: Dict[str, Any] = {}
        self.result: Optional[Dict[str, Any]] = None

    # -- the block ---------------------------------------------------------
    def __enter__(self) -> "MemoryTracker":
        self.result = None
        self._cuda_mod = _cuda()
        cuda_start: Optional[List[Dict[str, int]]] = None
        if self._cuda_mod is not None:
            try:
                for d in range(self._cuda_mod.device_count()):
                    self._cuda_mod.reset_peak_memory_stats(d)
                cuda_start = _cuda_now(self._cuda_mod)
            except Exception as exc:  # a broken driver: CPU figures only
                print(f"dftracer: MemoryTracker: no CUDA figures ({exc})", file=sys.stderr)
                self._cuda_mod = None
        self._start = {"rss": _core._mem_rss(), "hwm": _core._mem_hwm(), "cuda": cuda_start}
        self._t0 = _core.get_time()
        self._slot = _core._mem_watch_begin()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()

    def start(self) -> "MemoryTracker":
        return self.__enter__()

    def stop(self) -> Dict[str, Any]:
        """Ends the block (once; later calls return the same figures)."""
        if self.result is not None:
            return self.result
        if not self._start:
            raise RuntimeError("MemoryTracker: stop() before the block started")
        peak = _core._mem_watch_end(self._slot)
        end = _core._mem_rss()
        t1 = _core.get_time()
        hwm = _core._mem_hwm()
        if hwm > self._start["hwm"] >= 0:
            peak = max(peak, hwm)  # the kernel's mark rose in the block: exact
        start = self._start["rss"]
        self.result = {
            "name": self.name,
            "start_rss_bytes": start,
            "end_rss_bytes": end,
            "peak_rss_bytes": max(peak, start, end),
            "cuda": self._cuda_end(),
            "duration_us": max(0, t1 - self._t0),
        }
        self._write_event(self.result, self._t0)
        return self.result

    def _cuda_end(self) -> Optional[List[Dict[str, int]]]:
        cuda = self._cuda_mod
        starts = self._start.get("cuda")
        if cuda is None or starts is None:
            return None
        try:
            ends = _cuda_now(cuda)
            out = []
            for d, (s, e) in enumerate(zip(starts, ends)):
                out.append({
                    "device": d,
                    "start_allocated_bytes": s["allocated"],
                    "end_allocated_bytes": e["allocated"],
                    "peak_allocated_bytes": int(cuda.max_memory_allocated(d)),
                    "start_reserved_bytes": s["reserved"],
                    "end_reserved_bytes": e["reserved"],
                    "peak_reserved_bytes": int(cuda.max_memory_reserved(d)),
                })
            return out
        except Exception as exc:
            print(f"dftracer: MemoryTracker: no CUDA figures ({exc})", file=sys.stderr)
            return None

    @staticmethod
    def _write_event(r: Dict[str, Any], t0: int) -> None:
        ints = {k: r[k] for k in ("start_rss_bytes", "end_rss_bytes", "peak_rss_bytes")}
        for dev in r["cuda"] or []:
            d = dev["device"]
            for k, v in dev.items():
                if k != "device":
                    ints[f"cuda{d}_{k}"] = v
        try:
            _core.logger.log_event("memory", "memory", t0, r["duration_us"], ints,
                                   None, {"tracker": r["name"]}, None)
        except Exception as exc:  # tracing stopped meanwhile: the figures stay
            print(f"dftracer: MemoryTracker: event not written ({exc})", file=sys.stderr)

    # -- decorator ---------------------------------------------------------
    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    # -- results -----------------------------------------------------------
    def report(self, file: Any = None) -> Dict[str, Any]:
        """Prints one line and returns the figures: start_rss_bytes,
        end_rss_bytes, peak_rss_bytes, cuda (None, or one dict per device
        with start/end/peak allocated and reserved bytes), name and
        duration_us.  Inside the block it ends it first."""
        r = self.stop() if self.result is None else self.result
        line = (f"{r['name']}: resident {_size(r['start_rss_bytes'])} -> {_size(r['end_rss_bytes'])},"
                f" peak {_size(r['peak_rss_bytes'])}"
                f" (+{_size(max(0, r['peak_rss_bytes'] - r['start_rss_bytes']))} over start)")
        for dev in r["cuda"] or []:
            line += (f"; cuda:{dev['device']} peak allocated {_size(dev['peak_allocated_bytes'])},"
                     f" reserved {_size(dev['peak_reserved_bytes'])}")
        print(line, file=file if file is not None else sys.stdout, flush=True)
        return dict(r)
