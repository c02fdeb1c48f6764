"""What `dftracer top` costs while it follows a busy job, and how far behind it is.

Synthetic writer processes append to --procs trace files (default 64) in the
exact format the tracer writes (docs/trace-format.md: a first member with `[`
and the header metadata, then one gzip member per file every flush interval
holding the events logged since the previous one, `end` at the close),
--rate events/s in all (default 100,000), a mix of compute, data loading,
POSIX and STDIO reads and writes, comm, and one `pipeline/iteration` step
event every 100 events.  Two runs of the writers, each followed by one of:

- `engine`: the reading and the figures of the view without drawing
  (dftracer.tools.follow.Follower on the view's schedule: a refresh and a
  snapshot every second, reads of the known files every 0.25 s between
  them), in a child process.  After each refresh it records every file's
  event count; an event's lag is the time of the first
  refresh whose count includes it minus the event's own time (`ts`), which
  the writers log per member.
- `view`: the real `dftracer top` on a pseudo-terminal (rich drawing a
  200x60 screen every second), quit with `q` at the end.

Each prints its CPU time (user + system) per wall second; the target is
under half a core for 64 processes at 100k events/s in all, and a lag of at
most the flush interval + 1 s.

    python3 benchmarks/tools/bench_top.py                        # 64 files, 100k events/s, 20 s
    python3 benchmarks/tools/bench_top.py --procs 8 --rate 20000 --seconds 10
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HH = "185b3c7d3c6c6298"
FH = "32583e59313d5c1d"
# (cat, name, extra args) with weights: a DataLoader-fed training loop with file I/O
MIX = [
    ("compute", "forward", "", 20), ("compute", "backward", "", 20),
    ("dataloader", "fetch", ',"batch":3,"workers":4', 10), ("data", "item", ',"index":17', 10),
    ("POSIX", "read", f',"fhash":"{FH}","fd":7,"count":65536,"ret":65536', 15),
    ("POSIX", "lseek64", f',"fhash":"{FH}","fd":7,"offset":0,"whence":0,"ret":0', 5),
    ("STDIO", "fread", f',"fhash":"{FH}","fd":8,"size":4,"count":16384,"ret":16384', 5),
    ("POSIX", "write", f',"fhash":"{FH}","fd":9,"count":4096,"ret":4096', 5),
    ("comm", "all_reduce", ',"bytes":4194304,"group_size":64,"group":"world","seq":9', 5),
    ("checkpoint", "torch.save", ',"bytes":1048576', 1),
]
DURS = [1, 2, 3, 5, 8, 13, 40, 200, 900]


def _member(text: str) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(text.encode()) + c.flush()


def now_us() -> int:
    return time.time_ns() // 1000


# ---- writers -------------------------------------------------------------------

class File:
    def __init__(self, directory: str, index: int, pid: int, rate: float) -> None:
        self.path = os.path.join(directory, f"bench-node{index // 8}-{pid}-app.pfw.gz")
        self.pid, self.rank, self.rate = pid, index, rate
        self.next_id, self.lines, self.step, self.carry = 1, 0, 0, 0.0
        self.tmpl = self.templates()
        self.last = now_us()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        head = ["[\n"] + [self._meta(n, a, v) for n, a, v in (
            ("HH", f"node{index // 8}", HH), ("process_name", f"python3 rank {index}",
                                              "process_name"), ("FH", "/data/shard.npz", FH))]
        head.append(self._x("start", "dftracer", self.last, 0, ',"version":"0.2.0"'))
        self._write(head)

    def _meta(self, name: str, aname: str, value: str) -> str:
        i = self.next_id
        self.next_id += 1
        return (f'{{"id":{i},"name":"{name}","cat":"dftracer","pid":{self.pid},"tid":{self.pid},'
                f'"ph":"M","args":{{"hhash":"{HH}","name":"{aname}","value":"{value}"}}}}\n')

    def _x(self, name: str, cat: str, ts: int, dur: int, extra: str) -> str:
        i = self.next_id
        self.next_id += 1
        return (f'{{"id":{i},"name":"{name}","cat":"{cat}","pid":{self.pid},"tid":{self.pid},'
                f'"ts":{ts},"dur":{dur},"ph":"X","args":{{"hhash":"{HH}","level":1,"p_idx":-1'
                f'{extra}}}}}\n')

    def templates(self) -> list:
        """Per MIX entry: the text before ts and after dur (cheap lines)."""
        return [(f',"name":"{name}","cat":"{cat}","pid":{self.pid},"tid":{self.pid},"ts":',
                 f',"ph":"X","args":{{"hhash":"{HH}","level":1,"p_idx":-1{extra}}}}}\n')
                for cat, name, extra, _ in MIX]

    def _write(self, lines: list) -> None:
        os.write(self.fd, _member("".join(lines)))
        self.lines += sum(1 for ln in lines if ln != "[\n")

    def flush(self, log: list, rng: random.Random, weights: list) -> None:
        """The events logged since the last flush, as one member."""
        t = now_us()
        want = self.rate * (t - self.last) / 1e6 + self.carry
        n = int(want)
        self.carry = want - n
        if n <= 0:
            return
        lines = []
        span = t - self.last
        picks = rng.choices(self.tmpl, weights=weights, k=n)
        durs = rng.choices(DURS, k=n)
        i = self.next_id
        for k in range(n):
            mid, tail = picks[k]
            lines.append(f'{{"id":{i}{mid}{self.last + span * k // n},"dur":{durs[k]}{tail}')
            i += 1
            if i % 100 == 0:
                self.next_id = i
                lines.append(self._x("iteration", "pipeline", self.last + span * k // n - 2000,
                                     2000, f',"step":{self.step}'))
                i = self.next_id
                self.step += 1
        self.next_id = i
        first = self.last
        self.last = t
        self._write(lines)
        log.append((self.path, time.time(), self.lines, first))

    def close(self) -> None:
        t = now_us()
        self._write([self._x("end", "dftracer", t, 0, f',"num_events":{self.lines}')])
        os.close(self.fd)


def writer(directory: str, first: int, count: int, rate: float, flush: float,
           seconds: float, log_path: str) -> None:
    rng = random.Random(first)
    weights = [w for *_, w in MIX]
    files = [File(directory, first + k, 100000 + first + k, rate) for k in range(count)]
    log: list = []
    start = time.monotonic()
    # the files flush in turn, spread over the interval like independent processes
    due = [start + flush * (k + 1) / count for k in range(count)]
    while time.monotonic() - start < seconds:
        k = min(range(count), key=due.__getitem__)
        delay = due[k] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        files[k].flush(log, rng, weights)
        due[k] += flush
    for f in files:
        f.flush(log, rng, weights)
        f.close()
    with open(log_path, "w") as out:
        json.dump(log, out)


# ---- the engine follower -----------------------------------------------------------

def engine(directory: str, seconds: float, flush: float, out_path: str) -> None:
    sys.path.insert(0, ROOT)
    from dftracer.tools.follow import Follower

    from dftracer.tools.top_view import READ_EVERY

    fol = Follower([directory], window=10, flush_interval=flush)
    seen = []
    cpu0, t0 = time.process_time(), time.monotonic()
    due = t0
    while time.monotonic() - t0 < seconds:  # the view's schedule (top_view.live)
        fol.refresh(budget_s=0.8)
        fol.snapshot()
        seen.append((time.time(), {path: f.proc.events for path, f in fol.files.items()}))
        due += 1.0
        while due - time.monotonic() > 0.05:
            time.sleep(min(READ_EVERY, max(due - time.monotonic(), 0)))
            if due - time.monotonic() > 0.05:
                fol.refresh(budget_s=READ_EVERY * 0.8, find=False)
        time.sleep(max(due - time.monotonic(), 0))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    with open(out_path, "w") as out:
        json.dump({"cpu": cpu, "wall": wall, "seen": seen}, out)


# ---- the real view on a pseudo-terminal -------------------------------------------------

def view(directory: str, flush: float, seconds: float, env: dict) -> dict:
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(env)
        os.execv(sys.executable, [sys.executable, "-m", "dftracer", "top", directory,
                                  "--flush-interval", str(flush)])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    t0 = time.monotonic()
    received = 0
    quit_sent = False
    while True:
        left = seconds - (time.monotonic() - t0)
        if left <= 0 and not quit_sent:
            os.write(fd, b"q")
            quit_sent = True
        try:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                data = os.read(fd, 65536)
                if not data:
                    break
                received += len(data)
        except OSError:  # the child closed the terminal
            break
        if quit_sent and time.monotonic() - t0 > seconds + 10:
            os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    os.close(fd)
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "bytes_drawn": received,
            "status": status, "maxrss_mib": usage.ru_maxrss / 1024}


# ---- main ------------------------------------------------------------------------

def lags(engine_out: dict, logs: list) -> tuple:
    """Per member: the first refresh showing its events minus its oldest
    event's time, and minus the time the member was written."""
    out, after_write = [], []
    seen = engine_out["seen"]
    for path, written, count, first_ts in logs:
        for t, counts in seen:
            if counts.get(path, 0) >= count:
                out.append(t - first_ts / 1e6)
                after_write.append(t - written)
                break
    return out, after_write


def pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--rate", type=float, default=100_000, help="events/s, all files together")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--flush", type=float, default=1.0, help="the writers' flush interval (s)")
    ap.add_argument("--writers", type=int, default=4, help="writer processes")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--writer", nargs=3, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--engine", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.writer:
        writer(a.dir, a.writer[0], a.writer[1], a.rate / a.procs, a.flush, a.seconds, a.out)
        return 0
    if a.engine:
        engine(a.dir, a.seconds, a.flush, a.out)
        return 0
    root = a.dir or tempfile.mkdtemp(prefix="bench-top-")
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    load = os.getloadavg()[0]

    def cycle(name: str) -> tuple:
        """Writers for the length of one follower; returns (their member logs,
        their CPU seconds, the follower's result)."""
        directory = os.path.join(root, name)
        os.makedirs(directory, exist_ok=True)
        me = [sys.executable, os.path.abspath(__file__), "--dir", directory, "--procs",
              str(a.procs), "--rate", str(a.rate), "--flush", str(a.flush)]
        per = -(-a.procs // a.writers)
        writers = []
        for w in range(a.writers):
            first, count = w * per, min(per, a.procs - w * per)
            if count > 0:
                writers.append(subprocess.Popen(
                    me + ["--seconds", str(a.seconds + 3), "--writer", str(first), str(count),
                          "0", "--out", os.path.join(directory, f"w{w}.json")], env=env))
        time.sleep(2)  # the files exist, the writers are in their stride
        if name == "engine":
            out = os.path.join(root, "engine.json")
            subprocess.run(me + ["--seconds", str(a.seconds), "--engine", "--out", out],
                           env=env, check=True)
            with open(out) as f:
                result = json.load(f)
        else:
            result = view(directory, a.flush, a.seconds, env)
        cpu, logs = 0.0, []
        for k, w in enumerate(writers):
            usage = os.wait4(w.pid, 0)[2]
            cpu += usage.ru_utime + usage.ru_stime
            with open(os.path.join(directory, f"w{k}.json")) as f:
                logs += json.load(f)
        return logs, cpu, result

    # one after the other, so that they do not compete for the CPU
    logs, writers_cpu, eng_out = cycle("engine")
    _, _, shown = cycle("view")
    t_lo = eng_out["seen"][0][0]
    t_hi = eng_out["seen"][-1][0] - a.flush - 1.5  # members the last refreshes could still show
    lag, after_write = lags(eng_out, [m for m in logs if t_lo <= m[1] <= t_hi])
    last: dict = {}
    for path, _t, count, _ts in logs:
        last[path] = max(last.get(path, 0), count)
    events = sum(last.values())
    print(f"bench_top: {a.procs} files, {a.rate:,.0f} events/s in all, flush interval "
          f"{a.flush:g} s, {a.seconds:g} s ({events:,} events written); {os.cpu_count()} cores, "
          f"load average {load:.1f} at the start; the writers: "
          f"{writers_cpu / (a.seconds + 5):.2f} CPU s per wall s")
    print(f"  engine (read + figures, no drawing): {eng_out['cpu'] / eng_out['wall']:.3f} "
          f"CPU s per wall s")
    print(f"  dftracer top (the view, 200x60 on a pty): {shown['cpu'] / shown['wall']:.3f} "
          f"CPU s per wall s   (target < 0.5); peak RSS {shown['maxrss_mib']:.0f} MiB")
    if lag:
        print(f"  lag (event time -> first refresh showing it), {len(lag)} members: "
              f"p50 {pct(lag, 0.5):.2f} s, p99 {pct(lag, 0.99):.2f} s, max {max(lag):.2f} s"
              f"   (target <= flush interval + 1 s = {a.flush + 1:g} s)")
        print(f"  of which after the member was written: p50 {pct(after_write, 0.5):.2f} s, "
              f"p99 {pct(after_write, 0.99):.2f} s, max {max(after_write):.2f} s")
    if not a.keep and not a.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
