"""Per-file work, run in worker processes or as Dask tasks.

Every function takes a path (and plain arguments), never raises for a bad
file, and returns a dict with "path", "status" and "message":
status is "ok", "truncated" (a torn last gzip member), "corrupt", "missing"
or "error"."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from dftracer import _core
from dftracer.tools.common import long_line_message
from dftracer.tools.rank_rule import rank_of_process_name, rank_of_value  # noqa: F401

def _failure(path: str, exc: OSError) -> Dict[str, Any]:
    missing = isinstance(exc, FileNotFoundError)
    return {"path": path, "status": "missing" if missing else "error",
            "message": exc.strerror or str(exc), "events": 0}


def summarize_file(path: str) -> Dict[str, Any]:
    try:
        return _core._summarize_file(path)
    except OSError as exc:
        return _failure(path, exc)


def validate_file(path: str) -> Dict[str, Any]:
    try:
        return _core._validate_file(path)
    except OSError as exc:
        return _failure(path, exc)


def rank_file(path: str, step: Optional[str] = None) -> Dict[str, Any]:
    """One trace as one rank of a job (src/reader/ranks.c; dftracer.tools.ranks)."""
    try:
        return _core._rank_file(path, step)
    except OSError as exc:
        return _failure(path, exc)


def sync_points(path: str) -> Dict[str, Any]:
    """Identity, clock pairs and sync points of one trace, for merge's alignment."""
    try:
        return _core._rank_file(path, None, True)
    except OSError as exc:
        return _failure(path, exc)


def _is_bracket(line: bytes) -> bool:
    return line.strip(b" \t\r,") in (b"", b"[", b"]")


def _loads(line: bytes) -> Tuple[Optional[Dict[str, Any]], str]:
    """(the trace event on a line, "") or (None, why not): not JSON, nested too
    deeply, or a JSON object that is no trace event (no "name" or "ph")."""
    try:
        ev = json.loads(line.rstrip(b" \r,"))
    except RecursionError:
        return None, "nested too deeply"
    except ValueError:
        try:  # the older tools' bytes that are not UTF-8
            ev = json.loads(line.rstrip(b" \r,").decode("utf-8", "replace"))
        except RecursionError:
            return None, "nested too deeply"
        except ValueError:
            return None, "not JSON"
    if not isinstance(ev, dict):
        return None, "not a JSON object"
    if "name" not in ev or "ph" not in ev:
        return None, 'a JSON object but not a trace event (no "name" or "ph")'
    return ev, ""


def file_info(path: str, max_batches: int = 4) -> Dict[str, Any]:
    """Host, pid, rank and process name from the head of a file (the rank of
    a `rank` metadata event wins over the process_name's, as in summary)."""
    info: Dict[str, Any] = {"path": path, "status": "ok", "message": "", "host": "",
                            "pid": None, "rank": None, "process_name": "", "events": 0}
    try:
        reader = _core._LineReader(path)
    except OSError as exc:
        return _failure(path, exc)
    parsed = lineno = first_bad = 0
    bad_why = ""
    meta_rank: Optional[int] = None
    for n, batch in enumerate(reader):
        for line in batch:
            lineno += 1
            if _is_bracket(line):
                continue
            ev, why = _loads(line)
            if ev is None:
                if not first_bad:
                    first_bad, bad_why = lineno, why
                continue
            parsed += 1
            if info["pid"] is None and isinstance(ev.get("pid"), int):
                info["pid"] = ev["pid"]
            if ev.get("ph") not in ("M", 4):  # 4: dftracer 2.x's metadata
                continue
            args = ev.get("args") or {}
            if ev.get("name") == "HH" and not info["host"]:
                info["host"] = str(args.get("name", ""))
            elif ev.get("name") == "process_name":
                info["process_name"] = str(args.get("name", ""))
                if isinstance(ev.get("pid"), int):
                    info["pid"] = ev["pid"]
                if info["rank"] is None:
                    info["rank"] = rank_of_process_name(info["process_name"])
            elif args.get("name") == "rank":
                value = rank_of_value(args.get("value"))
                meta_rank = meta_rank if value is None else value
        if info["host"] and info["process_name"] or n + 1 >= max_batches:
            break
    if meta_rank is not None:
        info["rank"] = meta_rank
    if parsed == 0 and reader.status in ("ok", "reading"):
        long_lines, first_long = reader.long_lines
        if long_lines and (not first_bad or first_long <= first_bad):
            why = long_line_message(first_long, 1)
        elif first_bad:
            why = f"line {first_bad}: {bad_why}"
        else:
            why = "no event line"
        info["status"], info["message"] = "error", f"not a dftracer trace ({why})"
    elif reader.status in ("corrupt", "error"):
        info["status"], info["message"] = reader.status, reader.message
    return info


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
        return _failure(path, exc)


def io_file(item: Tuple[str, Optional[bytes]], epoch_from: Optional[str] = None) -> Dict[str, Any]:
    """One trace's I/O per data file (src/reader/iostats.c; dftracer.tools.iostats):
    item is (path, epoch bounds as int64 (epoch, ts) pairs, or None)."""
    path, bounds = item
    try:
        return _core._io_file(path, epoch_from, bounds)
    except OSError as exc:
        return _failure(path, exc)


def defined_hashes(item: Tuple[str, Any]) -> Dict[str, Any]:
    """Which of the hashes item = (path, hashes) the trace defines, and who
    wrote it (src/reader/validate_parent.c): validate's walk from a dftracer
    2.x fork child to its parent's file.  No hashes: only its identity."""
    path, hashes = item
    try:
        return _core._defined_hashes(path, hashes)
    except OSError as exc:
        return _failure(path, exc)
