"""Following growing trace files, for `dftracer top` (docs/cli.md).

A `Follower` finds the files PATHS name at every refresh and reads each from
where the previous refresh stopped: a compressed trace is a sequence of
independent gzip members, so it keeps an inflater for the member being read
and decodes only what is new; the lines of a member are used once the member
is complete (a member still being written waits for the next refresh), the
lines of a plain `.pfw` once they end with a newline.  Nothing is read
twice.  What it keeps per process is dftracer/tools/top_figures.py's."""

from __future__ import annotations

import glob
import os
import stat
import time
import zlib
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from dftracer import _core
from dftracer.tools import liveness, paths as _paths
from dftracer.tools.top_figures import (GROUPS, STEP_SOURCES, US, F_READ, F_WRITE,
                                        KeyTable, Process, consume)

READ_STEP = 256 << 10   # compressed bytes read at a time (about 20k events: the budget's grain)
PENDING_LIMIT = 4 << 20  # decoded bytes of one unfinished member before its lines are used
LINE_MAX = 16 << 20     # docs/trace-format.md "Reading"
CONSUME_STEP = 256 << 10  # decoded bytes matched at a time (their events are kept until expired)
INFLATE_STEP = 1 << 20  # decoded bytes per inflate call (a small member may inflate 1000-fold)
# A compressed file that ends in this many zero bytes has a tail not written
# yet (a slow or network file system shows the new size first): a gzip member
# ends with its CRC and length, never so.  Those bytes are read again once
# the file changes, never inflated before.
ZERO_RUN = b"\0" * 32
CLOCK_PAIR = b'"name":"clock","cat":"dftracer"'  # a clock metadata line
OPEN_SNAPSHOT = b'"name":"open","cat":"dftracer"'  # what a (maybe hung) process is inside of
STACK = b'"name":"stack","cat":"dftracer"'  # a stack written on request
MEMORY = b'"name":"memory","cat":"'  # a memory sample or limit (docs/memory.md)
SILENT_FLUSHES = 3      # a process is silent after this many flush intervals without data
FLUSH_OFF_SILENT = 30.0  # silent after this long when the time-based flush is off
FINISHED_LOOK = 10.0    # seconds between looks at a finished file (deleted, replaced?)



def parse_interval(value: Optional[str], default: float = 1.0) -> Tuple[float, Optional[str]]:
    """DFTRACER_FLUSH_INTERVAL's syntax, as the tracer reads it
    (docs/configuration.md): decimal seconds, `250ms`, `2s`, `0`/`off`;
    0.01-3600.  Returns (seconds, None), or (the value used, why).  The
    grammar is the core's (src/core/config.c, dft_config_interval)."""
    return _core._parse_interval(value or None, default)


def _shares(by_group: Dict[str, float], step_us: float, window_us: float) -> Dict[str, float]:
    """Each class's share (docs/cli.md, "dftracer top"): of the steps' time in
    the window when the process has steps (their time no event covers is
    other, as in `summary --ranks`), else of the window."""
    whole = step_us if step_us > 0 else window_us
    if whole <= 0:
        return dict.fromkeys(by_group, 0.0)
    out = {g: v / whole for g, v in by_group.items()}
    if step_us > 0:
        out["other"] += max(0.0, 1.0 - sum(out.values()))
    return out


def _step_shares(p: Any, window: int) -> Optional[Dict[str, float]]:
    """Each class's share of the steps that ended in the window, split as
    `summary --ranks` splits a rank's steps (Process.step_shares: the step
    thread's events inside each step; what they leave is other), so they add
    up to 100%; None without such steps (the window's shares instead)."""
    got = p.step_shares(window)
    if got is None:
        return None
    total, split = got
    out = {g: max(0.0, v) / total for g, v in split.items()}
    out["other"] = max(0.0, out["other"] + 1.0 - sum(out.values()))
    return out


def silent_after(flush_interval: float) -> float:
    return SILENT_FLUSHES * flush_interval if flush_interval > 0 else FLUSH_OFF_SILENT


class FileState:
    """Where one file was left, and its process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.gzip = path.endswith(".gz")
        self.proc = Process(path)
        self.ident: Optional[Tuple[int, int]] = None
        self.offset = 0            # bytes taken from the file
        self.member_start = 0      # where the member being decoded starts
        self.inflater: Any = None  # zlib decompressobj of the member being read
        self.pending: List[bytes] = []
        self.pending_n = 0
        self.early = False         # lines of the unfinished member were used already
        self.carry = b""           # a line without its newline yet
        self.skipping = False      # inside an over-long line
        self.size = -1             # size at the last look
        self.mtime = 0.0           # when the file last grew (its mtime)
        self.active = 0.0          # the mtime when it last grew by more than clock pairs
        self.stuck_at: Any = None  # (size, mtime_ns) when decoding failed (retried when it changes)
        self.mark = ""             # a problem, shown on the row
        self._change: Any = None   # (size, mtime_ns) at this poll
        self.gone = False
        self.members = 0
        self.next_look = 0.0       # finished files: when to look at them again

    # ---- reading -------------------------------------------------------------

    def poll(self, keys: KeyTable, window: int, deadline: Optional[float] = None) -> int:
        """Reads what is new (until time.monotonic() passes deadline, when
        given); returns the bytes read.  Never raises for a file's problems:
        they become the row's mark."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.gone, self.mark = True, "deleted"
            return 0
        except OSError as exc:
            self.mark = f"unreadable: {exc.strerror or exc}"
            return 0
        if self.gone:
            self.gone, self.mark = False, ""
        if not stat.S_ISREG(st.st_mode):
            self.mark = "not a regular file"
            return 0
        ident = (st.st_dev, st.st_ino)
        if self.ident is not None and (ident != self.ident or st.st_size < self.offset):
            why = "replaced" if ident != self.ident else "truncated"
            self.__init__(self.path)  # type: ignore[misc]  # a new file here: its own figures
            self.mark = f"{why}: read again from the start"
        self.ident = ident
        if st.st_size != self.size:
            self.mtime = st.st_mtime
            self.active = self.active or st.st_mtime  # first seen: as if active then
        self.size = st.st_size
        if st.st_size <= self.offset or (st.st_size, st.st_mtime_ns) == self.stuck_at:
            return 0
        self.stuck_at = None
        self._change = (st.st_size, st.st_mtime_ns)
        try:  # O_NONBLOCK: never wait on a FIFO put at this name since the stat
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as exc:
            self.mark = f"unreadable: {exc.strerror or exc}"
            return 0
        done = 0
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                self.mark = "not a regular file"
                return 0
            if self.mark.startswith(("unreadable", "not a regular")):
                self.mark = ""
            end = fst.st_size
            # (a backlog of several reads is looked at from its end first)
            zeros = _zero_tail(fd, self.offset, end) \
                if self.gzip and end - self.offset > READ_STEP else end
            while self.offset < zeros:
                data = os.pread(fd, min(READ_STEP, zeros - self.offset), self.offset)
                if not data:
                    break
                if self.gzip and data.endswith(ZERO_RUN) and self.offset + len(data) == zeros:
                    data = data.rstrip(b"\0")
                    zeros = self.offset + len(data)
                    if not data:
                        break
                self.offset += len(data)
                done += len(data)
                if self.gzip:
                    if not self._inflate(data, keys, window):
                        break
                else:
                    self._lines(data, keys, window)
                # a backlog is read in one poll: fold what left the window as it goes
                self.proc.expire(window)
                if deadline is not None and time.monotonic() > deadline:
                    break
            if self.offset == zeros < end and self.stuck_at is None:
                self._member_end_zeros(fd, end, keys, window)
                self.mark = f"zero-filled tail at byte {self.offset}"
                self.stuck_at = self._change
        except OSError as exc:
            self.mark = f"unreadable: {exc.strerror or exc}"
        finally:
            os.close(fd)
        self.proc.expire(window)
        return done

    def _member_end_zeros(self, fd: int, end: int, keys: KeyTable, window: int) -> None:
        """The last bytes of a member (its CRC and length) may be zeros: taken
        when they end the member being read (zlib checks its CRC)."""
        if self.inflater is None:
            return
        extra = os.pread(fd, min(8, end - self.offset), self.offset)
        for k in range(1, len(extra) + 1):
            trial = self.inflater.copy()
            try:
                trial.decompress(extra[:k])
            except zlib.error:
                return
            if trial.eof:
                self.offset += k
                self._inflate(extra[:k], keys, window)
                return

    def _inflate(self, data: bytes, keys: KeyTable, window: int) -> bool:
        """Inflates data, the bytes of the file that end at self.offset.  A
        member's lines are used when it ends; self.member_start follows the
        members' real starts, whatever the reads that brought them."""
        saved = self.inflater.copy() if self.inflater is not None else None
        chunk_start = self.offset - len(data)
        kept = (len(self.pending), self.pending_n, self.early)
        while data:
            if self.inflater is None:
                self.inflater = zlib.decompressobj(31)
                saved = None
            try:
                out = self.inflater.decompress(data, INFLATE_STEP)
            except zlib.error as exc:
                self._bad_member(exc, data, saved, chunk_start, kept)
                return False
            if self.inflater.eof:
                data = self.inflater.unused_data
                self.inflater = None
                self.pending.append(out)
                text = b"".join(self.pending)
                self.pending, self.pending_n, self.early = [], 0, False
                self.member_start = self.offset - len(data)
                chunk_start = self.member_start
                self.members += 1
                if self.mark.startswith(("corrupt", "zero-filled")):
                    self.mark = ""
                self._lines(text, keys, window)
            else:
                self.pending.append(out)
                self.pending_n += len(out)
                if self.pending_n > PENDING_LIMIT:  # a huge member: use its whole lines now
                    self.early = True
                    saved = None  # its lines are used: no going back in it
                    text = b"".join(self.pending)
                    self.pending, self.pending_n = [], 0
                    self._lines(text, keys, window)  # keeps (or skips) its unfinished line
                data = self.inflater.unconsumed_tail
        return True

    def _bad_member(self, exc: zlib.error, data: bytes, saved: Any, chunk_start: int,
                    kept: Tuple[int, int, bool]) -> None:
        """Bytes that are not gzip: waits where they start until the file
        changes (a tail still being written on a slow file system).  Inside
        a member, the inflater is put back as it was before this read and the
        read starts again there: no byte is inflated twice, and no later
        event is lost once the bytes are right."""
        if saved is not None:  # inside a member, none of its lines used
            at = chunk_start
            self.inflater = saved
            del self.pending[kept[0]:]
            self.pending_n, self.early = kept[1], kept[2]
        elif self.early:  # a huge member whose lines were used: what is left of it is lost
            at = self.offset
            self.inflater, self.pending, self.pending_n, self.early = None, [], 0, False
            self.member_start = at
        else:  # at a member's start
            at = self.member_start
            self.inflater, self.pending, self.pending_n = None, [], 0
        if not data[:4096].strip(b"\0"):
            self.mark = f"zero-filled tail at byte {at}"
        elif at == 0 and not self.members:
            self.mark = "corrupt: not gzip"
        else:
            self.mark = f"corrupt member at byte {self.member_start}: {exc}"
        self.stuck_at = self._change
        self.offset = at

    def _lines(self, text: bytes, keys: KeyTable, window: int) -> None:
        """Uses the whole lines of text; keeps a last line without its newline
        for the next call (skipped, and counted, once it reaches LINE_MAX)."""
        if self.skipping:
            nl = text.find(b"\n")
            if nl < 0:
                return
            text, self.skipping = text[nl + 1:], False
        elif self.carry:
            text, self.carry = self.carry + text, b""
        cut = text.rfind(b"\n") + 1
        if cut < len(text):
            if len(text) - cut >= LINE_MAX:
                self.proc.long_lines += 1
                self.proc.bad_lines += 1
                self.skipping = True
            else:
                self.carry = text[cut:]
            text = text[:cut]
        if text:
            # the tracer's periodic clock pairs (docs/trace-format.md, "Ranks and
            # clocks"), open-span snapshots and memory samples are written for
            # an idle (or hung) process too: not a sign of life
            if text.count(b"\n") > text.count(CLOCK_PAIR) + text.count(OPEN_SNAPSHOT) + \
                    text.count(STACK) + text.count(MEMORY):
                self.active = self.mtime
            # in slices of about CONSUME_STEP, each followed by the window's
            # expiry: a member of a long run holds many seconds
            at = 0
            while at < len(text):
                cut = text.find(b"\n", at + CONSUME_STEP) + 1 or len(text)
                consume(self.proc, text[at:cut], keys, window)
                self.proc.expire(window)
                at = cut

    # ---- state ---------------------------------------------------------------

    def incomplete(self) -> int:
        """Bytes after the last whole member (or line) decoded."""
        if self.gzip:
            return max(self.size - self.member_start, 0) if self.size >= 0 else 0
        return len(self.carry) + max(self.size - self.offset, 0)


def _zero_tail(fd: int, start: int, end: int) -> int:
    """Where the run of zero bytes that ends the file at `end` starts (not
    before start), or end when the file does not end in ZERO_RUN."""
    tail = os.pread(fd, min(len(ZERO_RUN), end - start), end - min(len(ZERO_RUN), end - start))
    if len(tail) < len(ZERO_RUN) or tail != ZERO_RUN:
        return end
    at = end - len(ZERO_RUN)
    while at > start:
        n = min(READ_STEP, at - start)
        block = os.pread(fd, n, at - n)
        kept = len(block.rstrip(b"\0"))
        if kept:
            return at - n + kept
        at -= n
    return start


# ---- finding the files ---------------------------------------------------------

class Finder:
    """The trace files PATHS name, looked up again at each refresh: a directory
    is listed again only when its mtime changed."""

    def __init__(self, args: Iterable[str],
                 ignore: Optional[Dict[str, Tuple[float, int]]] = None) -> None:
        self.args = list(args)
        self.ignore = dict(ignore or {})
        self._dirs: Dict[str, Tuple[int, List[str], List[str]]] = {}
        self.errors: List[Tuple[str, str]] = []

    def find(self) -> List[str]:
        found: List[str] = []
        self.errors = []
        for arg in self.args:
            if os.path.isdir(arg):
                before = len(found)
                self._walk(arg, found)
                if len(found) == before:
                    self.errors.append((arg, "directory holds no .pfw or .pfw.gz file"))
            elif os.path.lexists(arg):
                found.append(arg)
            elif glob.has_magic(arg):
                hits = glob.glob(arg, recursive=True)
                if not hits:
                    self.errors.append((arg, "pattern matches no file"))
                found.extend(p for p in hits if not os.path.isdir(p))
            else:
                self.errors.append((arg, "no such file or directory"))
        out = []
        dup: Set[str] = set()
        for f in found:
            if f in dup:
                continue
            dup.add(f)
            if self.ignore and f in self.ignore:
                try:
                    st = os.stat(f)
                    if (st.st_mtime, st.st_size) == self.ignore[f]:
                        continue
                except OSError:
                    continue
                del self.ignore[f]  # it changed: it belongs to this run
            out.append(f)
        return out

    def _walk(self, top: str, found: List[str]) -> None:
        seen: Set[Tuple[int, int]] = set()
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                st = os.stat(d)
            except OSError:
                continue
            real = (st.st_dev, st.st_ino)
            if real in seen:  # a link loop
                continue
            seen.add(real)
            cached = self._dirs.get(d)
            if cached is not None and cached[0] == st.st_mtime_ns:
                files, subdirs = cached[1], cached[2]
            else:
                files, subdirs = [], []
                try:
                    with os.scandir(d) as it:
                        for entry in it:
                            try:
                                if entry.is_dir():
                                    subdirs.append(entry.path)
                                    continue
                            except OSError:
                                pass
                            if _paths.is_trace_name(entry.name):
                                files.append(entry.path)
                except OSError:
                    continue
                files.sort()
                self._dirs[d] = (st.st_mtime_ns, files, subdirs)
            found.extend(files)
            stack.extend(reversed(subdirs))


# ---- the follower -------------------------------------------------------------

class Follower:
    """Every file PATHS name, followed."""

    def __init__(self, paths: Iterable[str], window: int = 10, flush_interval: float = 1.0,
                 step_name: Optional[str] = None,
                 ignore: Optional[Dict[str, Tuple[float, int]]] = None) -> None:
        self.finder = Finder(paths, ignore)
        self.window = max(int(window), 1)
        self.flush_interval = flush_interval
        self.keys = KeyTable(step_name)
        self.files: Dict[str, FileState] = {}
        self._next = 0  # where the last budgeted refresh stopped
        self.behind = 0  # files with bytes left unread after the last refresh

    def refresh(self, budget_s: float = 0.0, find: bool = True) -> None:
        """Finds new files (unless find is False) and reads what is new in
        each; with budget_s > 0 stops after about that much time, and the
        next refresh goes on from the file where this one stopped."""
        if find:
            for path in self.finder.find():
                path = os.path.normpath(path)
                if path not in self.files:
                    self.files[path] = FileState(path)
        states = list(self.files.values())
        if not states:
            return
        t0 = time.monotonic()
        deadline = t0 + budget_s if budget_s > 0 else None
        n = len(states)
        start = self._next % n
        self._next = start
        for i in range(n):
            f = states[(start + i) % n]
            if deadline is not None and time.monotonic() > deadline:
                self._next = (start + i) % n
                break
            if f.proc.finished and not f.gone and t0 < f.next_look:
                continue  # it will not grow: looked at every FINISHED_LOOK s (deleted?)
            f.poll(self.keys, self.window, deadline)
            if f.proc.finished:
                f.next_look = t0 + FINISHED_LOOK
        self.behind = sum(1 for f in states if f.size > f.offset and f.stuck_at is None)

    def state(self, f: FileState, now: float) -> str:
        """finished (its end event was read; one that names a signal, its
        process then ended by it, has the mark `ended by SIGTERM`), error
        (nothing can be read: the mark says why), silent (no new data for
        SILENT_FLUSHES flush intervals, or deleted) or running.  (snapshot() makes a silent
        launcher of this host whose children run `waiting`.)"""
        if f.proc.finished:
            return "finished"
        if f.mark.startswith(("unreadable", "not a regular", "corrupt")):
            return "error"
        if f.gone or now - f.active > silent_after(self.flush_interval):
            return "silent"
        return "running"

    @staticmethod
    def newest_us(f: FileState) -> int:
        """The newest time a file's process wrote at: its events' ends, its
        snapshots and clock pairs (the hang state's)."""
        st = f.proc.__dict__.get("hang_state")
        return max(f.proc.head or 0, st.last_at if st is not None else 0)

    def snapshot(self, now: Optional[float] = None, only: Optional[Set[str]] = None,
                 top: int = 20) -> Dict[str, Any]:
        """The figures, as `dftracer top --once --json` prints them."""
        now = time.time() if now is None else now
        procs = []
        functions: Dict[Tuple[str, str], List[float]] = {}
        total_window = 0.0
        by_host_pid = {(f.proc.host, f.proc.pid): f.proc for f in self.files.values()}
        # running children per (host, pid): a launcher that writes nothing
        # while they run is waiting for them, not silent
        state_of = {path: self.state(f, now) for path, f in self.files.items()}
        children: Dict[Tuple[str, int], int] = {}
        for path, f in self.files.items():
            if f.proc.ppid and state_of[path] == "running":
                key = (f.proc.host, f.proc.ppid)
                children[key] = children.get(key, 0) + 1
        for path, f in self.files.items():
            p = f.proc
            parent = by_host_pid.get((p.host, p.ppid)) if p.ppid else None
            worker_of = p.ppid if parent is not None and parent is not p else None
            if worker_of is not None and p.rank is not None and parent.rank != p.rank:
                worker_of = None  # a rank its launcher (torchrun) started, not a worker
            length, buckets = p.window(self.window)
            count = io_r = io_w = 0
            by_group = dict.fromkeys(GROUPS, 0)
            chosen = only is None or path in only
            step_us = 0  # the steps' time in the window: the shares' whole when there are steps
            for b in buckets:
                for key, e in b.items():
                    count += e[0]
                    if key.flags & F_READ:
                        io_r += e[3]
                    if key.flags & F_WRITE:
                        io_w += e[3]
                    if key.step and key.step == p.step_source:
                        step_us += e[2]
                    if key.group is not None:
                        by_group[key.group] += e[4]
                        if chosen:
                            fn = functions.get((key.cat, key.name))
                            if fn is None:
                                functions[(key.cat, key.name)] = [e[0], e[2]]
                            else:
                                fn[0] += e[0]
                                fn[1] += e[2]
            if chosen:
                total_window += length
            state = state_of[path]
            incomplete = f.incomplete()
            mark = f.mark
            if not mark and incomplete and state != "running" and f.size > 0:
                mark = f"incomplete last member ({incomplete} bytes)" if f.gzip else \
                    f"incomplete last line ({incomplete} bytes)"
            if not mark and f.size > f.offset and f.stuck_at is None:
                mark = f"catching up ({f.offset * 100 // max(f.size, 1)}%)"
            if not mark and state == "finished" and p.end_signal:
                # its `end` names the signal that then ended it: asked to stop
                mark = f"ended by {liveness.signal_name(p.end_signal)}"
            live = liveness.proc_state(p.host, p.pid, self.newest_us(f)) \
                if state == "silent" and not f.gone and p.pid else None
            if not mark and live is not None:
                if live == "gone":
                    mark = "exited without an end event"
                elif p.rank is None and children.get((p.host, p.pid)):
                    state = "waiting"  # a launcher (torchrun): its ranks run
                    n = children[(p.host, p.pid)]
                    mark = f"waiting for {n} running child process{'es' if n != 1 else ''}"
            if not mark and p.bad_lines:
                mark = f"{p.bad_lines} lines do not parse"
            if not mark and p.bad_dur:
                mark = f"{p.bad_dur} events with a bad duration"
            if not mark and worker_of is not None:
                mark = f"worker of {worker_of}"
            secs = length or 1.0
            cats = p.cats()
            procs.append({
                "path": path, "host": p.host, "pid": p.pid, "rank": p.rank,
                "local_rank": p.local_rank, "world_size": p.world_size, "job_id": p.job_id,
                "ppid": p.ppid, "worker_of": worker_of, "worker": p.worker, "name": p.name,
                # a rank's main process, a worker (of a rank or not), or neither (a launcher)
                "role": "worker" if p.worker is not None or worker_of is not None else
                        "rank" if p.rank is not None else None,
                "state": state, "mark": mark, "end_signal": p.end_signal or None,
                # its process is over (its end read, or silent and gone by
                # liveness' rule): an earlier job's, listed after the live ones
                "ended": state == "finished" or live == "gone",
                "events": p.events, "complete_events": p.complete,
                "bad_duration_events": p.bad_dur, "bad_lines": p.bad_lines,
                "events_per_s": count / secs if length else 0.0,
                "window_s": length,
                "step": p.step, "step_source": STEP_SOURCES.get(p.step_source),
                "step_last_us": p.step_last, "step_median_us": p.step_median(),
                "by_cat": _step_shares(p, self.window) or
                          _shares(by_group, step_us, secs * US if length else 0.0),
                "cats": {c: {"count": v[0], "total_us": v[1]} for c, v in sorted(cats.items())},
                "io_read_bytes": p.io_read, "io_write_bytes": p.io_write,
                "io_read_mb_s": io_r / 1e6 / secs if length else 0.0,
                "io_write_mb_s": io_w / 1e6 / secs if length else 0.0,
                "rss_bytes": p.rss,
                "last_event_ts": p.head or None,
                "idle_s": max(now - f.mtime, 0.0) if f.size >= 0 else None,
                "bytes": max(f.size, 0), "members": f.members,
            })
        fns = [{"cat": c, "name": n, "count": v[0], "time_us": v[1],
                "share": v[1] / (total_window * US) if total_window else 0.0}
               for (c, n), v in functions.items()]
        fns.sort(key=lambda r: (-r["time_us"], -r["count"], r["cat"], r["name"]))
        states = [p["state"] for p in procs]
        return {
            "time": now,
            "window_s": self.window,
            "flush_interval_s": self.flush_interval,
            "files": len(procs),
            "ranks": sum(1 for p in procs if p["role"] == "rank"),
            "workers": sum(1 for p in procs if p["role"] == "worker"),
            "running": states.count("running"),
            "finished": states.count("finished"),
            "silent": states.count("silent"),
            "waiting": states.count("waiting"),
            "events_per_s": float(sum(p["events_per_s"] for p in procs
                                      if p["state"] == "running")),
            "behind": self.behind,
            "errors": [list(e) for e in self.finder.errors],
            "processes": procs,
            "top_functions": fns[:top] if top > 0 else fns,
        }
