"""Per-file work, run in worker processes or as Dask tasks.

Every function takes a path (and plain arguments), never raises for a bad
file, and returns a dict with "path", "status" and "message":
status is "ok", "truncated" (a torn last gzip member), "corrupt", "missing"
or "error"."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from dftracer import _core

def failure(path: str, exc: OSError) -> Dict[str, Any]:
    """The dict of a file that could not be opened: every pass's (here, and
    analysis.py's and memory.py's), one rule."""
    missing = isinstance(exc, FileNotFoundError)
    return {"path": path, "status": "missing" if missing else "error",
            "message": exc.strerror or str(exc), "events": 0}


def summarize_file(path: str) -> Dict[str, Any]:
    try:
        return _core._summarize_file(path)
    except OSError as exc:
        return failure(path, exc)


def validate_file(path: str) -> Dict[str, Any]:
    try:
        return _core._validate_file(path)
    except OSError as exc:
        return failure(path, exc)


def rank_file(path: str, step: Optional[str] = None) -> Dict[str, Any]:
    """One trace as one rank of a job (src/reader/ranks.c; dftracer.tools.ranks)."""
    try:
        return _core._rank_file(path, step)
    except OSError as exc:
        return failure(path, exc)


def sync_points(path: str) -> Dict[str, Any]:
    """Identity (host, pid, process name, rank by the rule: own_rank, worker,
    ppid; src/reader/identity.c), clock pairs and sync points of one trace:
    merge's one scan before its rewrite."""
    try:
        return _core._rank_file(path, None, True)
    except OSError as exc:
        return failure(path, exc)


def rewrite_file(path: str, part: str, fmt: str, pid_map: Tuple[int, int],
                 ids: Tuple[int, int] = (1, 0), ts_offset: int = 0) -> Dict[str, Any]:
    """Writes the events of one trace into `part` (gzip members) for merge
    and convert: hashes resolved to strings, its process renumbered per
    pid_map (old, new), ids and p_idx renumbered for ids = (nfiles, index),
    every ts moved by ts_offset (clock alignment), the HH/FH/SH and
    process_name events left out (see src/reader/rewrite.c)."""
    try:
        return _core._rewrite_file(path, part, fmt, pid_map[0], pid_map[1], ids[0], ids[1],
                                   ts_offset)
    except OSError as exc:
        return failure(path, exc)


def io_file(item: Tuple[str, Optional[bytes]], epoch_from: Optional[str] = None) -> Dict[str, Any]:
    """One trace's I/O per data file (src/reader/iostats.c; dftracer.tools.iostats):
    item is (path, epoch bounds as int64 (epoch, ts) pairs, or None)."""
    path, bounds = item
    try:
        return _core._io_file(path, epoch_from, bounds)
    except OSError as exc:
        return failure(path, exc)


def defined_hashes(item: Tuple[str, Any]) -> Dict[str, Any]:
    """Which of the hashes item = (path, hashes) the trace defines, and who
    wrote it (src/reader/validate_parent.c): validate's walk from a dftracer
    2.x fork child to its parent's file.  No hashes: only its identity."""
    path, hashes = item
    try:
        return _core._defined_hashes(path, hashes)
    except OSError as exc:
        return failure(path, exc)
