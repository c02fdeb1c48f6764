"""Per-file work, run in worker processes or as Dask tasks.

Every function takes a path (and plain arguments), never raises for a bad
file, and returns a dict with "path", "status" and "message":
status is "ok", "truncated" (a torn last gzip member), "corrupt", "missing"
or "error"."""

from __future__ import annotations

import json
import os
import re
import zlib
from typing import Any, Dict, Optional, Tuple

from dftracer import _core

_RANK_RE = re.compile(r"\brank (\d+)", re.IGNORECASE)


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


def _is_bracket(line: bytes) -> bool:
    return line.strip(b" \t\r,") in (b"", b"[", b"]")


def _loads(line: bytes) -> Optional[Dict[str, Any]]:
    try:
        ev = json.loads(line.rstrip(b" \r,"))
    except ValueError:
        try:  # the older tools' bytes that are not UTF-8
            ev = json.loads(line.rstrip(b" \r,").decode("utf-8", "replace"))
        except ValueError:
            return None
    return ev if isinstance(ev, dict) else None


def file_info(path: str, max_batches: int = 4) -> Dict[str, Any]:
    """Host, pid, rank and process name from the head of a file."""
    info: Dict[str, Any] = {"path": path, "status": "ok", "message": "", "host": "",
                            "pid": None, "rank": None, "process_name": "", "events": 0}
    try:
        reader = _core._LineReader(path)
    except OSError as exc:
        return _failure(path, exc)
    parsed = 0
    for n, batch in enumerate(reader):
        for line in batch:
            if _is_bracket(line):
                continue
            ev = _loads(line)
            if ev is None:
                continue
            parsed += 1
            if info["pid"] is None and isinstance(ev.get("pid"), int):
                info["pid"] = ev["pid"]
            if ev.get("ph") != "M":
                continue
            args = ev.get("args") or {}
            if ev.get("name") == "HH" and not info["host"]:
                info["host"] = str(args.get("name", ""))
            elif ev.get("name") == "process_name":
                info["process_name"] = str(args.get("name", ""))
                if isinstance(ev.get("pid"), int):
                    info["pid"] = ev["pid"]
                m = _RANK_RE.search(info["process_name"])
                if m and info["rank"] is None:
                    info["rank"] = int(m.group(1))
            elif args.get("name") == "rank" and info["rank"] is None:
                try:
                    info["rank"] = int(args.get("value"))
                except (TypeError, ValueError):
                    pass
        if info["host"] and info["process_name"] or n + 1 >= max_batches:
            break
    if parsed == 0 and reader.status in ("ok", "reading"):
        info["status"], info["message"] = "error", "not a dftracer trace (no event line)"
    elif reader.status in ("corrupt", "error"):
        info["status"], info["message"] = reader.status, reader.message
    return info


# Arguments holding interned hashes, and the key each gets once resolved.
_RENAME = {"hhash": "host", "fhash": "file", "cmd_hash": "cmd", "exec_hash": "exec"}
_HASH_DEFS = ("HH", "FH", "SH")


def _hash_key(value: Any) -> Optional[str]:
    if isinstance(value, str) and len(value) == 16:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # the older tools' integer hashes
    return None


def _resolve(args: Dict[str, Any], names: Dict[str, str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in args.items():
        if key.endswith("hash") or key == "cwd":
            hk = _hash_key(value)
            if hk is not None and hk in names:
                new_key = _RENAME.get(key)
                if new_key is None:
                    new_key = key[:-5] if key.endswith("_hash") else key
                out[new_key] = names[hk]
                continue
        out[key] = value
    return out


def rewrite_file(path: str, part: str, fmt: str, pid_map: Tuple[int, int],
                 ids: Tuple[int, int] = (1, 0)) -> Dict[str, Any]:
    """Writes the events of one trace into `part` (gzip members), hashes
    resolved to strings, its process renumbered per pid_map (old, new), ids
    and p_idx renumbered to (id + 1) * n + k for ids = (n, k) so that they stay
    unique across the n merged files, the
    HH/FH/SH and process_name events left out (the caller writes process
    names for the whole output).  fmt "pfw": one event per line; "chrome":
    each event preceded by ",\\n" (it follows the caller's first event)."""
    result: Dict[str, Any] = {"path": path, "status": "ok", "message": "", "events": 0,
                              "bad_lines": 0}
    names: Dict[str, str] = {}
    try:  # pass 1: hash definitions may come before or after their use
        reader = _core._LineReader(path)
        for batch in reader:
            for line in batch:
                if b'"M"' not in line:
                    continue
                ev = _loads(line)
                if ev and ev.get("ph") == "M" and ev.get("name") in _HASH_DEFS:
                    args = ev.get("args") or {}
                    hk = _hash_key(args.get("value"))
                    if hk is not None:
                        names[hk] = str(args.get("name", ""))
        old_pid, new_pid = pid_map
        nfiles, index = ids
        reader = _core._LineReader(path)
        sep = ",\n" if fmt == "chrome" else ""
        end = "" if fmt == "chrome" else "\n"
        with open(part, "wb") as out:
            for batch in reader:
                chunk = []
                for line in batch:
                    if _is_bracket(line):
                        continue
                    ev = _loads(line)
                    if ev is None:
                        result["bad_lines"] += 1
                        continue
                    if ev.get("ph") == "M" and ev.get("name") in _HASH_DEFS + ("process_name",):
                        continue
                    if ev.get("pid") == old_pid:
                        ev["pid"] = new_pid
                    if isinstance(ev.get("id"), int):
                        ev["id"] = (ev["id"] + 1) * nfiles + index
                    args = ev.get("args")
                    if isinstance(args, dict):
                        ev["args"] = args = _resolve(args, names)
                        p_idx = args.get("p_idx")
                        if isinstance(p_idx, int) and p_idx >= 0:
                            args["p_idx"] = (p_idx + 1) * nfiles + index
                    chunk.append(sep + json.dumps(ev, ensure_ascii=False,
                                                  separators=(",", ":")) + end)
                    result["events"] += 1
                if chunk:
                    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
                    data = "".join(chunk).encode("utf-8", "surrogatepass")
                    out.write(comp.compress(data) + comp.flush())
        if reader.status != "ok":
            result["status"], result["message"] = reader.status, reader.message
    except OSError as exc:
        if os.path.exists(part) and not os.path.exists(path):
            os.unlink(part)
        return _failure(path, exc)
    return result
