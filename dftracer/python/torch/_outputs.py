"""Files a profiling run leaves behind: per-rank Chrome traces, the
TensorBoard layout, CUDA memory snapshots (docs/profiler.md).

The rank is read when a file is written, never earlier, so a function that
starts torch.distributed itself still gets its own rank in the names.
"""

from __future__ import annotations

import gzip
import inspect
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

_CHUNK = 1 << 20


def note(message: str) -> None:
    """One line on stderr, the profiler's only way to say something."""
    print(f"dftracer.profiler: {message}", file=sys.stderr, flush=True)


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name, "").strip()
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 0 else None


def _distributed() -> Optional[Dict[str, Any]]:
    """{backend, rank, world_size} when torch.distributed is initialised."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return {"backend": str(dist.get_backend()), "rank": dist.get_rank(),
                    "world_size": dist.get_world_size()}
    except Exception:  # a broken distributed build must not stop the export
        pass
    return None


def resolve_rank() -> Tuple[int, int]:
    """(rank, world_size): torch.distributed when initialised, else RANK or
    LOCAL_RANK (with WORLD_SIZE), else (0, 1)."""
    info = _distributed()
    if info is not None:
        return info["rank"], info["world_size"]
    rank = _env_int("RANK")
    if rank is None:
        rank = _env_int("LOCAL_RANK")
    if rank is None:
        rank = 0
    world = _env_int("WORLD_SIZE") or _env_int("LOCAL_WORLD_SIZE") or 1
    return rank, max(world, rank + 1)


def trace_file(output_dir: Path, profile_name: str, rank: int, cycle: int) -> Path:
    """The first cycle's file is `{name}-rank{r}.trace.json.gz`; later cycles
    (repeat > 1) get `-cycle{k}` so no cycle overwrites another."""
    suffix = "" if cycle == 0 else f"-cycle{cycle}"
    return output_dir / f"{profile_name}-rank{rank}{suffix}.trace.json.gz"


def tensorboard_file(output_dir: Path, profile_name: str, rank: int) -> Path:
    """`{worker}.{ns}.pt.trace.json.gz`, the name the TensorBoard plugin and
    torch's tensorboard_trace_handler use; the rank is part of the worker."""
    worker = f"{socket.gethostname()}_{profile_name}-rank{rank}"
    return output_dir / f"{worker}.{time.time_ns()}.pt.trace.json.gz"


def _metadata(prof: Any, rank: int, world_size: int) -> Dict[str, str]:
    """The trace's top-level keys (JSON text values), with distributedInfo
    added when torch did not add it (it does only when torch.distributed was
    initialised as the cycle started)."""
    metadata = dict(getattr(prof, "_trace_metadata", None) or {})
    info = _distributed() or {"rank": rank, "world_size": world_size}
    metadata.setdefault("distributedInfo", json.dumps(info))
    return metadata


def _streams_gzip(inner: Any) -> bool:
    try:
        params = inspect.signature(inner.export_chrome_trace).parameters
    except (TypeError, ValueError):
        return False
    return "use_python_export" in params and "metadata" in params


def export_chrome(prof: Any, path: Path, rank: int, world_size: int) -> None:
    """Writes one complete JSON object, gzip-compressed, straight to `path`.

    torch's own export of a `.gz` path first writes an uncompressed temporary
    copy.  torch >= 2.10 can stream the events through gzip instead
    (`use_python_export`); we use that and hand it the metadata.  Older torch
    only has Kineto's writer, which needs a real path (and itself renames a
    temporary file into place, so a FIFO does not work): there the JSON goes
    to a private directory in RAM (/dev/shm) and is streamed through gzip
    from there, then removed.
    """
    metadata = _metadata(prof, rank, world_size)
    inner = prof.profiler
    if _streams_gzip(inner):
        inner.export_chrome_trace(str(path), metadata, use_python_export=True)
        return
    export_chrome_via_ram(prof, path, metadata)


def export_chrome_via_ram(prof: Any, path: Path, metadata: Dict[str, str]) -> None:
    ram = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = tempfile.mkdtemp(prefix="dftracer-prof-", dir=ram)
    try:
        raw = os.path.join(scratch, "trace.json")
        prof.profiler.kineto_results.save(raw)
        own = getattr(prof, "_trace_metadata", None) or {}
        head = b""
        if "distributedInfo" not in own:
            head = b'"distributedInfo": ' + metadata["distributedInfo"].encode() + b",\n"
        with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
            first = src.read(_CHUNK)
            brace = first.find(b"{")
            if head and brace >= 0:
                first = first[: brace + 1] + b"\n" + head + first[brace + 1 :]
            dst.write(first)
            shutil.copyfileobj(src, dst, _CHUNK)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def dump_memory_snapshot(output_dir: Path, profile_name: str) -> Tuple[Path, Path]:
    """`{name}-rank{r}-memory-{ts}.pickle` (for pytorch.org/memory_viz) and the
    matching `.txt` with torch.cuda.memory_summary(); stops the recording."""
    import torch

    rank, _ = resolve_rank()
    stem = output_dir / f"{profile_name}-rank{rank}-memory-{int(time.time())}"
    pickle_path = stem.with_name(stem.name + ".pickle")
    text_path = stem.with_name(stem.name + ".txt")
    try:
        torch.cuda.memory._dump_snapshot(str(pickle_path))
        text_path.write_text(torch.cuda.memory_summary(), encoding="utf-8")
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return pickle_path, text_path
