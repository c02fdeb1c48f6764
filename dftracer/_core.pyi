"""Type stubs for dftracer._core (the C extension)."""

from os import PathLike
from typing import Any, Dict, Iterator, List, Tuple, Union

_Path = Union[str, bytes, PathLike]

# ---- trace readers (src/reader_*.c; used by the dftracer command line) ----

_HIST_BINS: int

def _summarize_file(path: _Path) -> Dict[str, Any]:
    """Aggregates one trace: status, counts, host/pid/rank/process_name,
    ts_min/end_max, and groups: (cat, name, pid, tid, count, total_us, min_us,
    max_us, io_bytes, io_events, {histogram bin: count})."""

def _validate_file(path: _Path) -> Dict[str, Any]:
    """Checks one trace against docs/trace-format.md: status, events, members,
    finalized, header, problem_count, problems (the first 20)."""

def _rewrite_file(path: _Path, part: _Path, fmt: str, old_pid: int, new_pid: int,
                  nfiles: int, index: int) -> Dict[str, Any]:
    """Writes one trace's events, hashes resolved, as gzip members into part
    (fmt "pfw" or "chrome")."""

class _LineReader:
    """Batches of lines (bytes, without newline) of a plain or gzip trace."""

    status: str
    message: str
    members: int
    def __init__(self, path: _Path) -> None: ...
    def __iter__(self) -> Iterator[List[bytes]]: ...
    def __next__(self) -> List[bytes]: ...
