"""The I/O summary's sums over a job, folded as each trace's result arrives
(dftracer.tools.iostats; issue 53: memory that grows with the distinct data
files, not with the (trace file, data file) pairs).

- Fold: per path, its counters summed over every trace (a packed row,
  src/reader/iostats_fold.c: a bitmap of the nonzero counters and their
  varints, ~60 bytes instead of 78 int64); per trace, its counters summed
  (`io_total`) and, per data file, one bytes of int64 holding the path's
  row and its epoch slots (`pack_slots`) instead of Python tuples.
- FileRows: `summary --io`'s files in their order (bytes moved, most first,
  then path), each row's dict made when it is read.
"""

from __future__ import annotations

import operator
from array import array
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from dftracer import _core
from dftracer.tools.line_keys import unescape

COUNTERS: Tuple[str, ...] = tuple(_core._IO_COUNTERS)
IDX = {name: i for i, name in enumerate(COUNTERS)}
BUCKETS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M",
           "10M_100M", "100M_1G", "1G_PLUS")
DARSHAN = tuple(n for n in COUNTERS if n.startswith(("POSIX_", "STDIO_")))
ZERO = [0] * len(COUNTERS)
MAX_IDX = tuple(i for i, n in enumerate(COUNTERS) if n.startswith(("POSIX_MAX_BYTE",
                                                                    "STDIO_MAX_BYTE")))
TIME_IDX = tuple(IDX[n] for n in ("POSIX_F_READ_TIME", "STDIO_F_READ_TIME", "POSIX_F_WRITE_TIME",
                                  "STDIO_F_WRITE_TIME", "POSIX_F_META_TIME", "STDIO_F_META_TIME"))

Result = Dict[str, Any]


def counters(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    return a


def add(into: List[int], c: Sequence[int]) -> None:
    """Sum c into `into` (the MAX_BYTE counters: the largest)."""
    top = [max(into[i], c[i]) for i in MAX_IDX]
    into[:] = map(operator.add, into, c)
    for i, v in zip(MAX_IDX, top):
        into[i] = v


def darshan_dict(c: Sequence[int]) -> Dict[str, Any]:
    """Darshan's counters by name; times in seconds (float), as Darshan's."""
    out: Dict[str, Any] = {}
    for name in DARSHAN:
        v = c[IDX[name]]
        out[name] = v / 1e6 if name.endswith("_TIME") else v
    return out


def hist(c: Sequence[int], prefix: str) -> Dict[str, int]:
    first = IDX[prefix + BUCKETS[0]]
    return {b: c[first + i] for i, b in enumerate(BUCKETS)}


def io_row(c: Sequence[int]) -> Dict[str, Any]:
    return {
        "opens": c[IDX["POSIX_OPENS"]] + c[IDX["STDIO_OPENS"]],
        "reads": c[IDX["POSIX_READS"]] + c[IDX["STDIO_READS"]],
        "writes": c[IDX["POSIX_WRITES"]] + c[IDX["STDIO_WRITES"]],
        "bytes_read": c[IDX["bytes_read"]],
        "bytes_written": c[IDX["bytes_written"]],
        "meta_ops": c[IDX["meta_ops"]],
        "read_time_us": c[IDX["POSIX_F_READ_TIME"]] + c[IDX["STDIO_F_READ_TIME"]],
        "write_time_us": c[IDX["POSIX_F_WRITE_TIME"]] + c[IDX["STDIO_F_WRITE_TIME"]],
        "meta_time_us": c[IDX["POSIX_F_META_TIME"]] + c[IDX["STDIO_F_META_TIME"]],
    }


def ok(r: Result) -> bool:
    return "files" in r and (r.get("status") in ("ok", "truncated") or (
        r.get("status") == "corrupt" and r.get("events", 0) > 0))


# ---- one data file's slots, packed ------------------------------------------------
# int64s: row, slot count, then per slot: has epoch, epoch, bytes, unplaced
# bytes, n, and n (start, end) byte ranges.

def pack_slots(row: int, slots: Sequence[Tuple[Any, ...]]) -> bytes:
    a = array("q", (row, len(slots)))
    for epoch, nbytes, unplaced, ivs, _approx in slots:
        a.extend((epoch is not None, epoch or 0, nbytes, unplaced, len(ivs) // 16))
        a.frombytes(ivs)
    return a.tobytes()


def row_of(packed: bytes) -> int:
    return counters(packed[:8])[0]


def unpack_slots(packed: bytes, epoch: Optional[int]) -> Tuple[int, List[Tuple[Any, ...]]]:
    """(row, [(epoch, bytes, unplaced, ranges as an int64 array)]); epoch,
    when given, is every slot's (a trace whose reads fall in one epoch)."""
    a = counters(packed)
    out, k = [], 2
    for _ in range(a[1]):
        has, e, nbytes, unplaced, n = a[k:k + 5]
        k += 5
        out.append((epoch if epoch is not None else (e if has else None), nbytes, unplaced,
                    a[k:k + 2 * n]))
        k += 2 * n
    return a[0], out


class Fold:
    """The data files' counters summed per path, folded as each trace's
    result arrives (`add`)."""

    def __init__(self) -> None:
        self.index: Dict[str, int] = {}
        self.paths: List[str] = []
        self.rows: List[bytes] = []  # packed (src/reader/iostats_fold.c)

    def add(self, r: Result, seen: Optional[set] = None) -> None:
        """Folds r's data files' counters, sums them per process
        (r["io_total"], an array('q')), and packs each data file's slots
        (r["files"] becomes a list of pack_slots bytes).  seen: rows whose
        counters were folded already (a second pass over the same trace)."""
        if not ok(r):
            return
        total = array("q", ZERO)
        kept = []
        for path, data, slots in r["files"]:
            path = unescape(path)
            row = self.index.get(path)
            if row is None:
                row = self.index[path] = len(self.paths)
                self.paths.append(path)
                self.rows.append(b"")
            if seen is None or row not in seen:
                self.rows[row] = _core._io_fold(self.rows[row], data)
                _core._io_add(total, data)
            kept.append(pack_slots(row, slots))
        r["files"] = kept
        r["io_total"] = total

    def counters_of(self, row: int) -> array:
        return counters(_core._io_unfold(self.rows[row]))

    def sums(self, at: Sequence[int]) -> array:
        """Per row, the sum of these counters."""
        return counters(_core._io_sums(self.rows, tuple(at)))


class FileRows(Sequence[Dict[str, Any]]):
    """`summary --io`'s files by bytes moved (most first), then path: each
    row's dict is made when it is read (a few KiB each: a million of them at
    once would not fit the memory the summary is allowed)."""

    def __init__(self, fold: Fold, procs: array, ranks: array, start: array,
                 job: List[int]) -> None:
        self.fold, self.procs, self.ranks, self.start, self.job = fold, procs, ranks, start, job
        self.order = self.ordered((IDX["bytes_read"], IDX["bytes_written"]))

    def ordered(self, at: Sequence[int]) -> List[int]:
        """The rows by the sum of these counters, largest first, then path."""
        paths = self.fold.paths
        order = sorted(range(len(paths)), key=paths.__getitem__)
        order.sort(key=self.fold.sums(at).__getitem__, reverse=True)  # stable: ties by path
        return order

    def row(self, row: int) -> Dict[str, Any]:
        c = self.fold.counters_of(row)
        out: Dict[str, Any] = {"path": self.fold.paths[row]}
        out.update(io_row(c))
        out.update({
            "size_hist_read": hist(c, "read_"),
            "size_hist_write": hist(c, "write_"),
            "seq_reads": c[IDX["POSIX_SEQ_READS"]], "consec_reads": c[IDX["POSIX_CONSEC_READS"]],
            "seq_writes": c[IDX["POSIX_SEQ_WRITES"]],
            "consec_writes": c[IDX["POSIX_CONSEC_WRITES"]],
            "unplaced_reads": c[IDX["unplaced_reads"]],
            "processes": self.procs[row],
            "ranks": self.ranks[self.start[row]:self.start[row + 1]].tolist(),
            "darshan": darshan_dict(c),
        })
        return out

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self.row(row) for row in self.order[k]]
        return self.row(self.order[k])

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return (self.row(row) for row in self.order)

    def by_time(self, n: int) -> List[Dict[str, Any]]:
        """The n rows with the most time in calls (reads, writes, metadata)."""
        return [self.row(row) for row in self.ordered(TIME_IDX)[:n]]

    def read_sizes(self) -> Dict[str, int]:
        """The read size histogram over every file (the job's)."""
        return hist(self.job, "read_")


def file_rows(fold: Fold, by_proc: set, nprocs: int, by_rank: set, low: int, span: int,
              job: List[int]) -> FileRows:
    """FileRows from analyze's pairs, as ints so that a set of ints (not of
    tuples) holds them: (row, process) as row * nprocs + process, (row,
    rank) as row * span + rank - low."""
    n = len(fold.paths)
    procs = array("q", bytes(8 * n))
    for code in by_proc:
        procs[code // nprocs] += 1
    by_proc.clear()
    ranks, start = array("q"), array("q", bytes(8 * (n + 1)))
    for code in sorted(by_rank):  # by row, then rank
        ranks.append(code % span + low)
        start[code // span + 1] += 1
    by_rank.clear()
    for row in range(n):
        start[row + 1] += start[row]
    return FileRows(fold, procs, ranks, start, job)
