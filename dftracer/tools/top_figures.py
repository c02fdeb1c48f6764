"""What `dftracer top` keeps per process, and how event lines get there
(docs/cli.md, "dftracer top").

`consume` adds the whole lines of decoded trace text to a `Process`: the
lines dftracer writes have a fixed key order, which one regular expression
matches (one C call per member); any other line (metadata, the older
dialect, escaped strings) goes through `json`.

What a `Process` keeps does not grow with the run: counters since the start,
the events of the last `window` seconds (plus LATE_MARGIN seconds for threads
that flush late) grouped per second and per (category, name), and the last
STEP_HISTORY step times.  Events are placed by their own time (`ts + dur`,
the tracer's wall clock) and a process's window ends at its newest event, so
a process that stopped keeps its last figures."""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

from dftracer import _core
from dftracer.tools import classes, hang, top_steps, trace_name
from dftracer.tools.line_keys import LINE_KEYS
from dftracer.tools.rank_rule import count_of_value, rank_of_process_name, rank_of_value

US = 1_000_000
STEP_HISTORY = 50       # step times kept per process for the median
LATE_MARGIN = 5         # seconds of buckets kept beyond the window, for late threads
MIN_WINDOW = 0.1       # seconds: the shortest window rates are computed over
# The longest duration the readers use (docs/cli.md, "Bad durations";
# src/reader/reader.h DFT_DUR_MAX_US): a longer or negative one, or an end
# past 64 bits, is counted apart and left out of every time and share.
DUR_MAX_US = 365 * 24 * 3600 * US
INT64_MAX = (1 << 63) - 1
OPEN_MAX = 256          # events per thread kept for the self times of their parents
RECENT_SPANS = 256      # recent collectives and compute events kept for the communication wait
SCAN_SPANS = RECENT_SPANS  # of which the newest are matched against a new event

GROUPS = classes.CLASSES
PENDING_MAX = top_steps.PENDING_MAX

# A complete event as dftracer writes it (docs/trace-format.md "Event kinds"),
# or any other line.  Groups: name, cat, tid, ts, dur, args body, other line.
_VALUE = {"id": rb'\d+', "name": rb'"([^"\\\n]*)"', "cat": rb'"([^"\\\n]*)"', "pid": rb'-?\d+',
          "tid": rb'(-?\d{1,19})', "ts": rb'(\d{1,19})', "dur": rb'(\d{1,19})', "ph": rb'"X"'}
_LINE = re.compile(
    rb'^(?:\{' + b",".join(b'"%s":%s' % (k.encode(), _VALUE[k]) for k in LINE_KEYS if k in _VALUE) +
    rb'(?:,"args":\{([^\n]*)\})?\}|([^\n]+))$', re.M)
# integers of at most 19 digits, not followed by more of a number (a longer
# or fractional one is no int64 and is not used)
_ARG_INT = re.compile(rb'(?:^|,)"(ret|size|count|step)":(-?\d{1,19})(?![\d.eE])')
_STEP_ARG = re.compile(rb'(?:^|,)"step":(-?\d{1,19})(?![\d.eE])')
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")

# step sources, by priority: a name given with --step, pipeline/iteration,
# torch.profiler's ProfilerStep#N, the body of an ai.pipeline.train loop
# (pipeline/train.block), any event's args.step (ai.update(step=...)). The
# order is reader/classify.h's (best first, as the C passes choose); here a
# larger number wins, STEP_NONE (0) least.
_KINDS = classes.STEP_KINDS  # (None, "named", "iteration", ...)
STEP_NONE = 0
STEP_NAMED, STEP_ITERATION, STEP_PROFILER, STEP_TRAIN, STEP_ARGS = (
    len(_KINDS) - _KINDS.index(k) for k in ("named", "iteration", "profiler", "train", "args"))
STEP_SOURCES = {STEP_ARGS: "args.step", STEP_TRAIN: "pipeline/train.block",
                STEP_PROFILER: "ProfilerStep#N", STEP_ITERATION: "pipeline/iteration",
                STEP_NAMED: "--step"}
_STEP_OF_KIND = {"iteration": STEP_ITERATION, "profiler": STEP_PROFILER, "train": STEP_TRAIN}

# (cat, name) flags
F_TRACER = 1      # the tracer's own start/end: not in the window
F_STEP = 2        # a step event: in no share and no top function
F_READ = 4        # I/O bytes read
F_WRITE = 8       # I/O bytes written
F_ITEMS = 16      # fread/fwrite: ret and count are items of `size` bytes
F_CHARS = 32      # fgetc/fputc: one character
F_STRING = 64     # fputs: the string's length, in count


def category_group(cat: str, name: str) -> Optional[str]:
    """The share a (cat, name) counts in (reader/classify.c's class), or None
    for the tracer's own events and the containers (steps, pipeline loops)
    that would count everything twice."""
    return classes.event_class(cat, name)


def io_direction(cat: str, name: str) -> int:
    """F_READ/F_WRITE (with how its ret counts) for the POSIX/STDIO calls that
    move file data (reader/classify.c's table); 0 for every other event."""
    io = classes.io_flags(cat, name)
    return ((F_READ if io & classes.IO_READ else 0) | (F_WRITE if io & classes.IO_WRITE else 0)
            | (F_ITEMS if io & classes.IO_ITEMS else 0) | (F_CHARS if io & classes.IO_CHAR else 0)
            | (F_STRING if io & classes.IO_STRING else 0))


def io_bytes(cat: str, name: str, ret: Optional[int], size: Optional[int],
             count: Optional[int]) -> int:
    """Bytes a call moved (`dftracer summary`'s rule, docs/cli.md): what its
    `ret` counts when it has one (a failed call moved nothing), else what was
    asked (`size`, else `count`; `size` x `count` for fread/fwrite).  The
    rule is reader/iobytes.c's, asked through _core (None: not given)."""
    return _core._io_bytes(cat, name, ret, size, count)


class _Key:
    """What a (cat, name) pair is, worked out once."""
    __slots__ = ("cat", "name", "group", "flags", "step")

    def __init__(self, cat: str, name: str, step_name: Optional[str]) -> None:
        self.cat, self.name = cat, name
        self.group = category_group(cat, name)
        self.flags = io_direction(cat, name)
        self.step = STEP_NONE
        kind = classes.step_kind(cat, name)
        if cat == "dftracer":
            self.flags |= F_TRACER
        elif step_name is not None and name == step_name:
            self.step = STEP_NAMED
        elif kind is not None:
            self.step = _STEP_OF_KIND[kind]
        if self.step:
            self.flags |= F_STEP
            self.group = None


class KeyTable:
    """(cat bytes, name bytes) -> _Key, shared by all files; bounded (names
    such as ProfilerStep#N are unique per event)."""
    LIMIT = 50_000

    def __init__(self, step_name: Optional[str] = None) -> None:
        self.step_name = step_name
        self.keys: Dict[Tuple[bytes, bytes], _Key] = {}

    def get(self, cat: bytes, name: bytes) -> _Key:
        k = self.keys.get((cat, name))
        if k is None:
            k = _Key(_text(cat), _text(name), self.step_name)
            if len(self.keys) >= self.LIMIT:
                self.keys.clear()
            self.keys[(cat, name)] = k
        return k


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class Process:
    """The figures of one trace file's process."""

    def __init__(self, path: str) -> None:
        m = trace_name.parse(path)
        self.host = m.host if m else ""
        self.pid: Optional[int] = m.pid if m else None
        self.rank: Optional[int] = None
        self.local_rank: Optional[int] = None
        self.world_size: Optional[int] = None
        self.job_id: Optional[str] = None
        self.rank_source = ""    # "", "rank" (a rank event) or "torch.distributed"
        self.ppid: Optional[int] = None  # from the start event
        self.worker: Optional[int] = None  # a DataLoader worker's id (the `worker` event)
        self.name = ""
        self.events = 0          # every event line (as `dftracer summary` counts them)
        self.complete = 0
        self.bad_lines = 0
        self.long_lines = 0
        self.bad_dur = 0         # complete events with a bad duration (left out of the figures)
        self.finished = False
        self.end_signal = 0      # the signal its `end` names: it ended the process (asked to stop)
        self.first_ts: Optional[int] = None
        self.head = 0            # the newest event end seen (us)
        self.io_read = 0
        self.io_write = 0
        self.rss: Optional[int] = None  # the last `memory` counter sample (docs/memory.md)
        # second -> {key: [count, total dur, dur inside this second, io bytes,
        #                  its share time inside this second (_share)]}
        self.buckets: Dict[int, Dict[_Key, List[int]]] = {}
        self.low = 0             # the oldest second still kept
        self.late: Dict[_Key, List[int]] = {}   # events older than the kept seconds
        self.cat_totals: Dict[str, List[int]] = {}  # folded-away seconds: cat -> [count, dur]
        self.step_source = STEP_NONE
        self.step: Optional[int] = None
        self.step_times: deque = deque(maxlen=STEP_HISTORY)
        self.step_last: Optional[int] = None
        self.step_span: Optional[List[int]] = None  # args.step: [first ts, last end] of the current step
        # the shares (docs/cli.md, "How a rank's time is split"): per thread the
        # (ts, dur) of the events no parent has claimed yet (children end first),
        # the recent collectives and compute events, with their share left
        self.open: Dict[int, List[Tuple[int, int]]] = {}
        self.comm_spans: deque = deque(maxlen=RECENT_SPANS)  # [ts, end, tid, key, left, sec]
        self.compute_spans: deque = deque(maxlen=RECENT_SPANS)
        self.span_end = [0, 0]  # the latest end among the comm, the compute spans
        # the steps' split (as summary --ranks splits a rank's): each event's
        # [ts, end, tid, group, its record in the spans above or None, share]
        # until the step it is in ends (a step is written after its events),
        # then per second a step ended in: [{group: share time}, the steps'
        # time, the comm and compute events' (record, part inside, share)]
        self.pending: deque = deque(maxlen=PENDING_MAX)
        self.last_rec: Optional[List[Any]] = None  # _share's record of the last comm/compute event
        self.last_own = 0  # and its self time
        self.step_split: Dict[int, List[Any]] = {}

    # ---- steps -------------------------------------------------------------

    def step_event(self, source: int, number: Optional[int], ts: int, end: int,
                   tid: Optional[int] = None) -> None:
        if source < self.step_source:
            return
        if source != STEP_ARGS and tid is not None:
            top_steps.split_step(self, ts, end, tid)
        if source > self.step_source:
            self.step_source, self.step, self.step_last, self.step_span = source, None, None, None
            self.step_times.clear()
        if source == STEP_ARGS:
            if number is None or (self.step is not None and number < self.step):
                return  # a late thread's older step
            if self.step is None or number > self.step:
                if self.step_span is not None:
                    self._step_done(self.step_span[1] - self.step_span[0])
                self.step, self.step_span = number, [ts, end]
            else:
                span = self.step_span
                if span is not None:
                    span[0], span[1] = min(span[0], ts), max(span[1], end)
            return
        if number is None:
            number = 0 if self.step is None else self.step + 1
        if self.step is None or number >= self.step:
            self.step = number
        self._step_done(end - ts)

    def pend(self, ts: int, end: int, tid: int, group: str, own: int) -> None:
        top_steps.pend(self, ts, end, tid, group, own)

    def step_shares(self, window: int) -> Optional[Tuple[float, Dict[str, float]]]:
        return top_steps.step_shares(self, window)

    def _step_done(self, dur: int) -> None:
        self.step_last = dur
        self.step_times.append(dur)

    def step_median(self) -> Optional[float]:
        return float(statistics.median(self.step_times)) if self.step_times else None

    # ---- the window --------------------------------------------------------

    def bucket(self, sec: int) -> Dict[_Key, List[int]]:
        b = self.buckets.get(sec)
        if b is None:
            if sec < self.low:
                return self.late
            b = self.buckets[sec] = {}
        return b

    def expire(self, window: int) -> None:
        """Folds the seconds that fell out of the window (and its margin) into
        the totals."""
        low = self.head // US - window - LATE_MARGIN + 1
        if low > self.low:
            self.low = low
        for sec in [s for s in self.buckets if s < self.low]:
            self._fold(self.buckets.pop(sec))
        for sec in [s for s in self.step_split if s < self.low]:
            del self.step_split[sec]
        if self.late:
            self._fold(self.late)
            self.late = {}

    def _fold(self, bucket: Dict[_Key, List[int]]) -> None:
        _add_cats(self.cat_totals, bucket)

    def cats(self) -> Dict[str, List[int]]:
        """Per category: [count, total dur] since the start."""
        out = {c: list(v) for c, v in self.cat_totals.items()}
        for bucket in list(self.buckets.values()) + [self.late]:
            _add_cats(out, bucket)
        return out

    def window(self, window: int) -> Tuple[float, List[Dict[_Key, List[int]]]]:
        """(length in seconds, the per-second buckets) of the last `window`
        seconds ending at the newest event."""
        if not self.head:
            return 0.0, []
        last = self.head // US
        first = last - window + 1
        start = first * US
        if self.first_ts is not None and self.first_ts > start:
            start = self.first_ts
        length = max((self.head - start) / US, MIN_WINDOW)
        return length, [b for s, b in self.buckets.items() if first <= s <= last]


def _add_cats(totals: Dict[str, List[int]], bucket: Dict[_Key, List[int]]) -> None:
    """Adds a second's events to per-category [count, total dur] totals."""
    for key, e in bucket.items():
        if e[0]:
            t = totals.get(key.cat)
            if t is None:
                totals[key.cat] = [e[0], e[1]]
            else:
                t[0] += e[0]
                t[1] += e[1]


def _share(p: Process, key: _Key, tid: int, t0: int, d: int, keys: "KeyTable") -> int:
    """The time the event counts in its class's share: its self time (its
    duration minus its children's, which were written before it on its
    thread), less the communication wait when it is a compute event while a
    collective of another thread was outstanding, or a collective another
    thread's compute event waited for (that time counts once, as comm/`wait in
    NAME`: docs/cli.md, "How a rank's time is split").  The threads' events
    come in any order, so each new compute event is matched against the
    recent collectives and each new collective against the recent compute."""
    lst = p.open.get(tid)
    if lst is None:
        lst = p.open[tid] = []
    inner = 0
    while lst and lst[-1][0] >= t0:
        inner += lst.pop()[1]
    lst.append((t0, d))
    if len(lst) > OPEN_MAX:
        del lst[:OPEN_MAX // 2]
    own = d - inner if d > inner else 0
    group = key.group
    p.last_rec = None
    if not own or group not in ("comm", "compute"):
        return own
    end = t0 + d
    mine, theirs = (p.comm_spans, p.compute_spans) if group == "comm" else \
        (p.compute_spans, p.comm_spans)
    rec = [t0, end, tid, key, own, end // US]
    if theirs and t0 >= p.span_end[group == "comm"]:  # [0]: comm, [1]: compute
        theirs = ()  # all of them ended before this began (the common case)
    for o in itertools.islice(reversed(theirs), SCAN_SPANS):  # the newest first
        if rec[4] <= 0:
            break
        if o[2] == tid or o[4] <= 0 or o[0] >= end or o[1] <= t0:
            continue
        w = min(min(end, o[1]) - max(t0, o[0]), rec[4], o[4])
        rec[4] -= w
        o[4] -= w
        _move_wait(p, keys, o, w)
        if group == "compute":
            _add_wait(p, keys, key, rec[5], w)
    mine.append(rec)
    p.last_rec, p.last_own = rec, own
    side = group == "comm"
    if end > p.span_end[not side]:
        p.span_end[not side] = end
    return rec[4]


def _move_wait(p: Process, keys: "KeyTable", o: List[Any], w: int) -> None:
    """Takes w off the share of the already counted event o; when o is a
    compute event, w goes to its wait key (the collective's own share is
    simply not counted twice)."""
    b = p.buckets.get(o[5])
    e = b.get(o[3]) if b is not None else None
    if e is not None:
        e[4] -= w
    if o[3].group == "compute":
        _add_wait(p, keys, o[3], o[5], w)


def _add_wait(p: Process, keys: "KeyTable", key: _Key, sec: int, w: int) -> None:
    if w <= 0 or sec < p.low:
        return
    b = p.bucket(sec)
    wk = _wait_key(keys, key)
    e = b.get(wk)
    if e is None:
        b[wk] = [0, 0, w, 0, w]
    else:
        e[2] += w
        e[4] += w


def _wait_key(keys: KeyTable, key: _Key) -> _Key:
    """comm/`wait in NAME`: the communication wait inside a compute event."""
    return keys.get(b"comm", b"wait in " + key.name.encode("utf-8", "replace"))


def consume(p: Process, text: bytes, keys: KeyTable, window: int) -> None:
    """Adds the event lines of `text` (whole lines) to the process's figures.
    The per-event path: one tuple from the line pattern, a dict lookup for
    the (cat, name), and one for its entry in the second it ended in."""
    get_key = keys.keys.get
    lo = hi = 0  # the second `cur` stands for: [lo, hi) us
    cur: Dict[_Key, List[int]] = {}
    head = p.head
    first = p.first_ts if p.first_ts is not None else 1 << 62
    generic = p.step_source <= STEP_ARGS
    n = 0
    for name, cat, tid, ts, dur, args, other in _LINE.findall(text):
        if other:
            p.head, p.first_ts = head, (first if first != 1 << 62 else None)
            if _slow_line(p, other, keys, window):
                hi = 0  # the slow path may have made buckets
                generic = p.step_source <= STEP_ARGS
            head = p.head
            first = p.first_ts if p.first_ts is not None else 1 << 62
            continue
        n += 1
        d = int(dur)
        t0 = int(ts)
        end = t0 + d
        key = get_key((cat, name))
        if key is None:
            key = keys.get(cat, name)
        if d > DUR_MAX_US or end > INT64_MAX:
            p.bad_dur += 1
            if key.flags & F_TRACER and key.name == "end":
                _end_event(p, args)
            continue
        if end > head:
            head = end
        if t0 < first:
            first = t0
        nbytes = 0
        flags = key.flags
        if flags:
            if flags & F_TRACER:
                if key.name == "end":
                    _end_event(p, args)
                elif key.name == "start" and args:
                    m = _PPID_ARG.search(args)
                    p.ppid = int(m.group(1)) if m else p.ppid
                continue
            if key.step:
                m = _STEP_ARG.search(args) if args else None
                own = _share(p, key, int(tid), t0, d, keys)  # its children's nesting, first
                p.step_event(key.step, int(m.group(1)) if m else _profiler_number(key), t0, end,
                             int(tid))
                generic = p.step_source <= STEP_ARGS
            if flags & (F_READ | F_WRITE):
                nbytes = _io_args(key, args)
                if flags & F_READ:
                    p.io_read += nbytes
                if flags & F_WRITE:
                    p.io_write += nbytes
        if generic and args and b'"step":' in args:
            m = _STEP_ARG.search(args)
            if m:
                p.step_event(STEP_ARGS, int(m.group(1)), t0, end)
                generic = p.step_source <= STEP_ARGS
        if not key.step:
            own = _share(p, key, int(tid), t0, d, keys)
            if own and key.group is not None:
                p.pend(t0, end, int(tid), key.group, own)
        if end >= hi or end < lo:
            lo = end - end % US
            hi = lo + US
            cur = p.bucket(lo // US)
        if t0 >= lo:
            e = cur.get(key)
            if e is None:
                cur[key] = [1, d, d, nbytes, own]
            else:
                e[0] += 1
                e[1] += d
                e[2] += d
                e[3] += nbytes
                e[4] += own
        else:
            _spread(p, key, t0, d, end, nbytes, window, own)
            hi = 0
    p.events += n
    p.complete += n
    p.head = head
    p.first_ts = first if first != 1 << 62 else None


_PPID_ARG = re.compile(rb',"ppid":(\d{1,19})(?![\d.eE])')
_SIGNAL_ARG = re.compile(rb',"signal":(\d{1,3})(?![\d.eE])')
SIGNAL_MAX = 64  # reader.h's DFT_SIGNAL_MAX: a larger number is no signal


def _end_signal(sig: Any) -> int:
    """The signal an `end` names, as the C passes read it: a JSON integer
    from 1 to SIGNAL_MAX, else 0 (none)."""
    return sig if type(sig) is int and 1 <= sig <= SIGNAL_MAX else 0


def _end_event(p: "Process", args: Optional[bytes]) -> None:
    """An `end` read on the fast path (args: its args body, or None)."""
    p.finished = True
    m = _SIGNAL_ARG.search(args) if args else None
    p.end_signal = _end_signal(int(m.group(1)) if m else None)


def _io_args(key: "_Key", args: bytes) -> int:
    """io_bytes() of a fast-path line's args body."""
    a = dict(_ARG_INT.findall(args))
    return io_bytes(key.cat, key.name, _int(a.get(b"ret")), _int(a.get(b"size")),
                    _int(a.get(b"count")))


def _int(b: Optional[bytes]) -> Optional[int]:
    return int(b) if b is not None else None


def _profiler_number(key: _Key) -> Optional[int]:
    m = _PROFILER_STEP.match(key.name)
    return int(m.group(1)) if m else None


def _tracer_event(p: Process, name: str, ts: int, args: Dict[str, Any]) -> None:
    if name == "end":
        p.finished = True
        p.end_signal = _end_signal(args.get("signal"))


def _spread(p: Process, key: _Key, t0: int, d: int, end: int, nbytes: int, window: int,
            own: int, counted: bool = True) -> None:
    """An event that began in an earlier second: its count and duration go
    to the second it ended in, its time inside each kept second to that
    second, and `own` of its `d` in proportion to the shares.  A wait (not
    counted: no event of its own) is only its `own` time, in proportion."""
    frac = own / d if d else 0.0
    sec = end // US
    lowest = max(t0 // US, sec - window - LATE_MARGIN, p.low)
    s = sec
    while s >= lowest:
        part = min(end, (s + 1) * US) - max(t0, s * US)
        if part > 0 or s == sec:
            share = int(part * frac)
            b = p.bucket(s)
            e = b.get(key)
            if e is None:
                e = b[key] = [0, 0, 0, 0, 0]
            if s == sec and counted:
                e[0] += 1
                e[1] += d
                e[3] += nbytes
            e[2] += part if counted else share
            e[4] += share
        s -= 1


def _slow_line(p: Process, line: bytes, keys: KeyTable, window: int) -> bool:
    """A line the fast pattern does not match.  Returns True when it added a
    complete event."""
    s = line.strip(b" \t\r,")
    if s in (b"", b"[", b"]"):
        return False
    try:
        ev = json.loads(s)
    except RecursionError:
        ev = None
    except ValueError:
        try:  # the older tools' bytes that are not UTF-8
            ev = json.loads(s.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            ev = None
    if not isinstance(ev, dict) or "name" not in ev or "ph" not in ev:
        p.bad_lines += 1
        return False
    p.events += 1
    ph = str(ev.get("ph"))[:1]
    args = ev.get("args")
    if not isinstance(args, dict):
        args = {}
    if p.pid is None:
        p.pid = _as_int(ev.get("pid"))
    if ph == "M":
        _metadata(p, str(ev.get("name")), args, ev)
        return False
    if ph == "C" and ev.get("name") == "memory":
        rss = _as_int(args.get("rss_bytes"))
        p.rss = rss if rss is not None else p.rss
        return False
    ts, dur = ev.get("ts"), ev.get("dur")
    if ph != "X" or not isinstance(ts, int) or not isinstance(dur, int) \
            or isinstance(ts, bool) or isinstance(dur, bool):
        return False
    p.complete += 1
    if not (0 <= dur <= DUR_MAX_US and -INT64_MAX <= ts <= INT64_MAX - dur):
        p.bad_dur += 1
        if str(ev["name"]) == "end" and ev.get("cat") == "dftracer":
            p.finished = True
            p.end_signal = _end_signal(args.get("signal"))
        return False
    name = str(ev["name"]).encode("utf-8", "replace")
    cat = str(ev.get("cat", "")).encode("utf-8", "replace")
    # re-enter the fast path with the parsed values
    key = keys.get(cat, name)
    end = ts + dur
    p.head = max(p.head, end)
    if key.flags & F_TRACER:
        _tracer_event(p, key.name, ts, args)
        if key.name == "start":
            p.ppid = _as_int(args.get("ppid"))
        return False
    step = _as_int(args.get("step"), signed=True)
    tid = ev.get("tid")
    tid = tid if isinstance(tid, int) and not isinstance(tid, bool) else 0
    own = _share(p, key, tid, ts, dur, keys)
    if own and key.group is not None and not key.step:
        p.pend(ts, end, tid, key.group, own)
    if key.step:
        p.step_event(key.step, step if step is not None else _profiler_number(key), ts, end, tid)
    elif step is not None and p.step_source <= STEP_ARGS:
        p.step_event(STEP_ARGS, step, ts, end)
    nbytes = 0
    if key.flags & (F_READ | F_WRITE):
        nbytes = io_bytes(key.cat, key.name, _as_int(args.get("ret"), signed=True),
                          _as_int(args.get("size"), signed=True),
                          _as_int(args.get("count"), signed=True))
        if key.flags & F_READ:
            p.io_read += nbytes
        if key.flags & F_WRITE:
            p.io_write += nbytes
    if p.first_ts is None or ts < p.first_ts:
        p.first_ts = ts
    _spread(p, key, ts, dur, end, nbytes, window, own)
    return True


_HANG_NAMES = frozenset(("open", "stack", "FH", "clock"))


def _metadata(p: Process, name: str, args: Dict[str, Any], ev: Dict[str, Any]) -> None:
    """Host, process name and rank, by the one rule of docs/trace-format.md
    ("Rank", "Ranks and clocks"; dftracer/tools/rank_rule.py): the last valid
    `rank` event (also the older tools' rank metadata), else a process_name
    that is or ends in " rank N"."""
    aname = args.get("name")
    if name in _HANG_NAMES:  # what it is inside of, for hang detection
        hang.state_of(p).observe(name, args, ev.get("tid"))
    if name == "HH" and isinstance(aname, str):
        p.host = aname
    elif name == "process_name" and isinstance(aname, str):
        p.name = aname
        pid = _as_int(ev.get("pid"))
        if pid is not None:
            p.pid = pid
        if not p.rank_source:
            p.rank = rank_of_process_name(aname)
    elif name == "rank" or aname == "rank":
        value = rank_of_value(args.get("value"))
        if value is None:
            return
        p.rank = value
        p.rank_source = "torch.distributed" if args.get("source") == "torch.distributed" \
            else "rank"
        local, world = (count_of_value(args.get("local_rank")),
                        count_of_value(args.get("world_size"), least=1))
        if local is not None:
            p.local_rank = local
        if world is not None:
            p.world_size = world
        if isinstance(args.get("job_id"), str):
            p.job_id = args["job_id"]
    elif name == "worker":  # docs/trace-format.md, "Workers": the last valid one
        worker = rank_of_value(args.get("value"))
        if worker is not None:
            p.worker = worker


def _as_int(v: Any, signed: bool = False) -> Optional[int]:
    """An int64 (non-negative unless signed) from a JSON value: an integer or
    a string of digits; None for anything else (a bool, a float such as 1e999,
    a number past 64 bits)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        t = v[1:] if signed and v.startswith("-") else v
        if not (t.isascii() and t.isdigit()) or len(t.lstrip("0")) > 19:
            return None
        v = int(v)
    if not isinstance(v, int):
        return None
    return v if (-INT64_MAX if signed else 0) <= v <= INT64_MAX else None
