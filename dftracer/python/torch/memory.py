"""MemoryTracker: the resident memory of the process (and, with CUDA in use,
the caching allocator's figures per device) over a block (docs/memory.md).

On CPU the peak is sampled by a C thread every 2 ms while a block is open
(src/core/memory_watch.c); when the kernel's high-water mark (VmHWM) rose during
the block, that exact figure is taken instead.  Blocks nest, recurse and
overlap, of one tracker or many, in any thread: each has figures of its own.
Importing this module does not import torch; the CUDA figures are read only
when torch is already imported and CUDA is available.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
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


class _Block:
    """One open block: what its figures start from."""

    __slots__ = ("tracker", "stack", "ref", "t0", "start", "cuda_mod", "cuda_peaks", "watch",
                 "__weakref__")

    def __init__(self, tracker: "MemoryTracker") -> None:
        self.tracker = tracker
        # the open blocks of the thread that started it, and this one's entry
        # there: a weak one (the tracker owns its blocks; one dropped with its
        # tracker inside the block leaves the stack and the watcher)
        self.stack: List["weakref.ref[_Block]"] = []
        self.ref: Optional["weakref.ref[_Block]"] = None
        self.t0 = 0
        self.start: Dict[str, Any] = {}
        self.cuda_mod: Any = None
        # per device, torch's peaks (allocated, reserved) before a block opened
        # inside this one reset them
        self.cuda_peaks: List[List[int]] = []
        self.watch: Any = None


_local = threading.local()  # .open: this thread's open blocks (weak), innermost last
_cuda_open: "weakref.WeakSet[_Block]" = weakref.WeakSet()  # those reading CUDA figures


def _thread_open() -> List["weakref.ref[_Block]"]:
    try:
        return _local.open
    except AttributeError:
        _local.open = []
        return _local.open


def _fold_cuda_peaks(cuda: Any) -> None:
    """torch keeps one peak per device: before a block resets it, every open
    block keeps the peak so far."""
    try:
        now = [(int(cuda.max_memory_allocated(d)), int(cuda.max_memory_reserved(d)))
               for d in range(cuda.device_count())]
    except Exception:
        return
    for b in list(_cuda_open):
        for d, (alloc, res) in enumerate(now):
            if d < len(b.cuda_peaks):
                b.cuda_peaks[d][0] = max(b.cuda_peaks[d][0], alloc)
                b.cuda_peaks[d][1] = max(b.cuda_peaks[d][1], res)


class MemoryTracker:
    """Context manager (and decorator) reporting the memory a block used.

    ``with MemoryTracker() as m: ...; m.report()``.  Resets torch's CUDA peak
    statistics (``torch.cuda.reset_peak_memory_stats``) on entry when CUDA is
    in use (the blocks open then keep the peak they had).  Writes one
    ``memory`` event into the trace when tracing is on.  Blocks of one
    tracker may nest, recurse and overlap in threads: ``with``/``start()``
    and ``stop()`` pair up innermost first in each thread, each call of a
    decorated function is a block of its own, and ``result`` holds the
    figures of the block that ended last.
    """

    def __init__(self, name: str = "memory") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"MemoryTracker: name must be a non-empty string, not {name!r}")
        self.name = name
        self._open: List[_Block] = []  # this tracker's open blocks, oldest first
        self.result: Optional[Dict[str, Any]] = None

    # -- the block ---------------------------------------------------------
    def _begin(self) -> _Block:
        b = _Block(self)
        b.cuda_mod = _cuda()
        cuda_start: Optional[List[Dict[str, int]]] = None
        if b.cuda_mod is not None:
            try:
                _fold_cuda_peaks(b.cuda_mod)
                for d in range(b.cuda_mod.device_count()):
                    b.cuda_mod.reset_peak_memory_stats(d)
                cuda_start = _cuda_now(b.cuda_mod)
                b.cuda_peaks = [[0, 0] for _ in cuda_start]
            except Exception as exc:  # a broken driver: CPU figures only
                print(f"dftracer: MemoryTracker: no CUDA figures ({exc})", file=sys.stderr)
                b.cuda_mod = None
        b.start = {"rss": _core._mem_rss(), "hwm": _core._mem_hwm(), "cuda": cuda_start}
        b.t0 = _core.get_time()
        b.watch = _core._mem_watch_begin()
        b.stack = stack = _thread_open()

        def drop(ref: "weakref.ref[_Block]") -> None:
            try:
                stack.remove(ref)
            except ValueError:
                pass

        b.ref = weakref.ref(b, drop)
        stack.append(b.ref)
        self._open.append(b)
        if b.cuda_mod is not None:
            _cuda_open.add(b)
        return b

    def _end(self, b: _Block) -> Dict[str, Any]:
        peak = _core._mem_watch_end(b.watch)
        end = _core._mem_rss()
        t1 = _core.get_time()
        hwm = _core._mem_hwm()
        for blocks, entry in ((b.stack, b.ref), (self._open, b)):
            try:
                blocks.remove(entry)  # type: ignore[arg-type]
            except ValueError:
                pass
        _cuda_open.discard(b)
        if hwm > b.start["hwm"] >= 0:
            peak = max(peak, hwm)  # the kernel's mark rose in the block: exact
        start = b.start["rss"]
        result = {
            "name": self.name,
            "start_rss_bytes": start,
            "end_rss_bytes": end,
            "peak_rss_bytes": max(peak, start, end),
            "cuda": self._cuda_end(b),
            "duration_us": max(0, t1 - b.t0),
        }
        self.result = result
        self._write_event(result, b.t0)
        return result

    def _innermost(self) -> Optional[_Block]:
        """This thread's innermost open block of this tracker, else the one it
        started last in any thread."""
        for ref in reversed(_thread_open()):
            b = ref()
            if b is not None and b.tracker is self:
                return b
        return self._open[-1] if self._open else None

    def __enter__(self) -> "MemoryTracker":
        self._begin()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()

    def start(self) -> "MemoryTracker":
        return self.__enter__()

    def stop(self) -> Dict[str, Any]:
        """Ends this thread's innermost open block of this tracker (else the
        one started last); with none open, the figures of the last one."""
        b = self._innermost()
        if b is not None:
            return self._end(b)
        if self.result is not None:
            return self.result
        raise RuntimeError("MemoryTracker: stop() before the block started")

    @staticmethod
    def _cuda_end(b: _Block) -> Optional[List[Dict[str, int]]]:
        cuda = b.cuda_mod
        starts = b.start.get("cuda")
        if cuda is None or starts is None:
            return None
        try:
            ends = _cuda_now(cuda)
            out = []
            for d, (s, e) in enumerate(zip(starts, ends)):
                kept = b.cuda_peaks[d] if d < len(b.cuda_peaks) else [0, 0]
                out.append({
                    "device": d,
                    "start_allocated_bytes": s["allocated"],
                    "end_allocated_bytes": e["allocated"],
                    "peak_allocated_bytes": max(int(cuda.max_memory_allocated(d)), kept[0]),
                    "start_reserved_bytes": s["reserved"],
                    "end_reserved_bytes": e["reserved"],
                    "peak_reserved_bytes": max(int(cuda.max_memory_reserved(d)), kept[1]),
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
        """Each call is a block of its own (recursive and overlapping calls
        included)."""
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            b = self._begin()
            try:
                return fn(*args, **kwargs)
            finally:
                self._end(b)

        return wrapper  # type: ignore[return-value]

    # -- results -----------------------------------------------------------
    def report(self, file: Any = None) -> Dict[str, Any]:
        """Prints one line and returns the figures: start_rss_bytes,
        end_rss_bytes, peak_rss_bytes, cuda (None, or one dict per device
        with start/end/peak allocated and reserved bytes), name and
        duration_us.  Inside a block it ends it first (as stop() does)."""
        r = self.stop()
        line = (f"{r['name']}: resident {_size(r['start_rss_bytes'])} -> {_size(r['end_rss_bytes'])},"
                f" peak {_size(r['peak_rss_bytes'])}"
                f" (+{_size(max(0, r['peak_rss_bytes'] - r['start_rss_bytes']))} over start)")
        for dev in r["cuda"] or []:
            line += (f"; cuda:{dev['device']} peak allocated {_size(dev['peak_allocated_bytes'])},"
                     f" reserved {_size(dev['peak_reserved_bytes'])}")
        print(line, file=file if file is not None else sys.stdout, flush=True)
        return dict(r)
