"""Throughput and peak memory of `dftracer summary` and `dftracer merge`.

Generates a trace set in the exact format dftracer writes (docs/trace-format.md:
"[" line, header metadata, start, complete events with hhash/level/p_idx and
I/O args, end; gzip members of a few thousand lines at level 1), then runs
the command line on it in fresh processes and prints events/s and the peak
RSS of the largest process (the CLI or one of its workers).

    python3 benchmarks/tools/bench_tools.py                    # 20 M events, 8 files
    python3 benchmarks/tools/bench_tools.py --events 2000000   # quicker
    python3 benchmarks/tools/bench_tools.py --dir /tmp/bt --keep

The generator formats a few distinct blocks of events per file and repeats
their compressed members to reach the size asked (ids repeat across blocks;
summary and merge do not care, validate would).  merge is measured on the
first files adding up to --merge-events (default 2 M) since it is slower.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Optional

NAMES = [("compute", "forward"), ("compute", "backward"), ("POSIX", "read"),
         ("POSIX", "write"), ("dataloader", "fetch"), ("data", "item"),
         ("checkpoint", "capture"), ("comm", "all_reduce")]
MEMBER_LINES = 4096
BLOCKS_PER_FILE = 4


def _member(lines: list) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    return comp.compress("".join(lines).encode()) + comp.flush()


def write_trace(path: str, pid: int, events: int, rank: int) -> int:
    host = "node%02d" % (rank // 4)
    hh = "%016x" % (0x9E3779B97F4A7C15 * (rank // 4 + 1) % (1 << 64))
    fh = "%016x" % (0xC2B2AE3D27D4EB4F * (pid + 7) % (1 << 64))
    ts0 = 1_763_745_000_000_000 + rank * 1000
    head = [
        "[\n",
        f'{{"id":1,"name":"HH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{"hhash":"{hh}","name":"{host}","value":"{hh}"}}}}\n',
        f'{{"id":2,"name":"process_name","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{"hhash":"{hh}","name":"python3 rank {rank}","value":"process_name"}}}}\n',
        f'{{"id":3,"name":"FH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{"hhash":"{hh}","name":"/data/train/shard-{rank}.npz","value":"{fh}"}}}}\n',
        f'{{"id":4,"name":"start","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{ts0},"dur":0,"ph":"X","args":{{"hhash":"{hh}","level":1,"p_idx":-1,"version":"0.1.0"}}}}\n',
    ]
    written = 0
    with open(path, "wb") as f:
        f.write(_member(head))
        blocks = []
        for b in range(BLOCKS_PER_FILE):
            lines = []
            for i in range(MEMBER_LINES):
                n = b * MEMBER_LINES + i
                cat, name = NAMES[n % len(NAMES)]
                tid = pid + n % 3
                ts = ts0 + 10 + n * 37
                dur = (n * 7919) % 5000 + 1
                args = f'"hhash":"{hh}","level":1,"p_idx":-1'
                if cat == "POSIX":
                    args += f',"fhash":"{fh}","fd":5,"count":4096,"offset":{n * 4096},"ret":4096'
                else:
                    args += f',"epoch":1,"step":{n}'
                lines.append(f'{{"id":{n + 5},"name":"{name}","cat":"{cat}","pid":{pid},'
                             f'"tid":{tid},"ts":{ts},"dur":{dur},"ph":"X","args":{{{args}}}}}\n')
            blocks.append(_member(lines))
        k = 0
        while written + MEMBER_LINES <= events:
            f.write(blocks[k % len(blocks)])
            written += MEMBER_LINES
            k += 1
        end_ts = ts0 + 10 + written * 37
        f.write(_member([
            f'{{"id":{written + 10},"name":"end","cat":"dftracer","pid":{pid},"tid":{pid},'
            f'"ts":{end_ts},"dur":0,"ph":"X","args":{{"hhash":"{hh}","level":1,"p_idx":-1,'
            f'"num_events":{written + 4}}}}}\n']))
    return written + 5


# The CLI's own peak is its memory's high-water mark (VmHWM): ru_maxrss of
# RUSAGE_SELF keeps the peak of the process this one was forked from, the
# benchmark, whatever it holds (exec does not reset it).
RUNNER = r"""
import resource, sys, time
from dftracer.tools.cli import main
t = time.perf_counter()
rc = main(sys.argv[1:])
dt = time.perf_counter() - t
with open("/proc/self/status") as f:
    hwm = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
rss = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(f"BENCH {dt:.6f} {rss}", file=sys.stderr)
sys.exit(rc)
"""


def run_cli(args: list, out_path: Optional[str] = None) -> tuple:
    """(seconds, peak RSS MiB) of `dftracer ARGS` in a fresh interpreter; its
    output goes to out_path (None: nowhere).  The other tools benchmarks use it too.
    The dftracer is the one this script's Python imports: the installed
    package, or a source tree on PYTHONPATH; the CLI starts in a neutral
    folder so that a checkout in the current one is never imported instead."""
    with open(out_path or os.devnull, "w") as out:
        proc = subprocess.run([sys.executable, "-c", RUNNER] + args, stdout=out,
                              stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("BENCH ")]
    if proc.returncode != 0 or not line:
        sys.exit(f"dftracer {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    _, dt, rss_kib = line[-1].split()
    return float(dt), int(rss_kib) / 1024


def python_baseline(path: str, limit: int) -> float:
    """events/s of the obvious pure-Python reader (gzip + json.loads per line)
    on the first `limit` events of one file, for comparison."""
    import gzip
    import json

    t = time.perf_counter()
    n = 0
    with gzip.open(path, "rt") as f:
        for line in f:
            if line[0] == "{":
                json.loads(line)
                n += 1
                if n >= limit:
                    break
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000_000, help="events in the set")
    ap.add_argument("--files", type=int, default=8, help="trace files in the set")
    ap.add_argument("--merge-events", type=int, default=2_000_000,
                    help="events of the files merged (0: all)")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
    ap.add_argument("--dir", default=None, help="where to write the set (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    opts = ap.parse_args()

    d = os.path.abspath(opts.dir) if opts.dir else tempfile.mkdtemp(prefix="dft-bench-tools-")
    os.makedirs(d, exist_ok=True)
    t = time.perf_counter()
    per_file = opts.events // opts.files
    paths, counts = [], []
    for r in range(opts.files):
        p = os.path.join(d, f"trace-node{r // 4:02d}-{10000 + r}-app.pfw.gz")
        counts.append(write_trace(p, 10000 + r, per_file, r))
        paths.append(p)
    total = sum(counts)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"generated {total:,} events in {opts.files} files, {size / 2**20:.0f} MiB gzip, "
          f"in {time.perf_counter() - t:.1f} s ({d})")
    jobs = ["-j", str(opts.jobs)] if opts.jobs else []
    try:
        dt, rss = run_cli(["summary", d, "--json", "--no-progress"] + jobs)
        print(f"summary: {total / dt / 1e6:6.2f} M events/s  ({total:,} events in {dt:.2f} s, "
              f"peak RSS {rss:.0f} MiB)")
        dt1, rss1 = run_cli(["summary", d, "--json", "--no-progress", "-j", "1"])
        print(f"summary -j 1: {total / dt1 / 1e6:6.2f} M events/s  (peak RSS {rss1:.0f} MiB); "
              f"parallel speed-up {dt1 / dt:.2f}x")
        base = python_baseline(paths[0], 300_000)
        print(f"pure-Python gzip+json.loads reader: {base / 1e6:6.2f} M events/s on one core; "
              f"summary -j 1 is {total / dt1 / base:.1f}x that")
        verdict = "met" if total / dt >= 2e6 else "NOT met (is the machine busy? see os.getloadavg)"
        print(f"target summary >= 2 M events/s: {verdict}; load average "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        chosen, n = [], 0
        for p, c in zip(paths, counts):
            if opts.merge_events and n >= opts.merge_events:
                break
            chosen.append(p)
            n += c
        out = os.path.join(d, "merged.pfw.gz")
        dt, rss = run_cli(["merge", *chosen, "-o", out, "--no-progress"] + jobs)
        print(f"merge:   {n / dt / 1e6:6.2f} M events/s  ({n:,} events in {dt:.2f} s, "
              f"peak RSS {rss:.0f} MiB, output {os.path.getsize(out) / 2**20:.0f} MiB)")
    finally:
        if not opts.keep and not opts.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
