"""Peak memory and time of `dftracer summary --io` over many distinct data
files (issue 53: a million files in at most 1 GiB, `--json` included).

Generates --traces trace files in the format dftracer writes, each opening,
reading 64 KiB from and closing its own --files / --traces data files (FH
names, POSIX events, an `iteration` with its epoch every 1,000 files: the
first half epoch 0, the second epoch 1), then runs `summary --io --json`
and `summary --io` in fresh processes and prints the wall time, the peak RSS
of the largest process (the CLI or one of its workers) and whether every
file and byte was counted.

    python3 benchmarks/tools/bench_io_files.py                     # 1,000,000 files
    python3 benchmarks/tools/bench_io_files.py --files 100000      # quicker
    python3 benchmarks/tools/bench_io_files.py --dir /tmp/bio --keep

Run it with the Python that has dftracer installed (or a built tree on
PYTHONPATH).  Generating a million files' events takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from bench_tools import _member, run_cli

CHUNK = 65536
MEMBER_LINES = 4096


def write_trace(path: str, index: int, first: int, count: int) -> int:
    pid = 30_000 + index
    hh = "%016x" % ((0x9E3779B97F4A7C15 * (index + 1)) % (1 << 64))
    meta = f'"hhash":"{hh}"'
    t = 1_763_745_000_000_000
    lines = [
        "[\n",
        f'{{"id":1,"name":"HH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{{meta},"name":"node{index:04d}","value":"{hh}"}}}}\n',
        f'{{"id":2,"name":"rank","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{{meta},"name":"rank","value":{index},"source":"RANK"}}}}\n',
        f'{{"id":3,"name":"start","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{t},"dur":0,"ph":"X","args":{{{meta},"level":1,"p_idx":-1,"version":"0.2.0","ppid":1}}}}\n',
    ]
    members, n = [], 3
    step_start = t
    for k in range(count):
        f = first + k
        fh = "%016x" % ((0xC2B2AE3D27D4EB4F * (f + 1)) % (1 << 64))
        name = f"/lustre/data/set{f // 10000:04d}/sample{f:08d}.bin"
        lines.append(f'{{"id":{n + 1},"name":"FH","cat":"dftracer","pid":{pid},"tid":{pid},'
                     f'"ph":"M","args":{{{meta},"name":"{name}","value":"{fh}"}}}}\n')
        for call, ts, args in (("open64", t, ',"flags":0,"ret":5'),
                               ("read", t + 50, f',"fd":5,"count":{CHUNK},"ret":{CHUNK}'),
                               ("close", t + 150, ',"fd":5,"ret":0')):
            n += 1
            lines.append(f'{{"id":{n + 1},"name":"{call}","cat":"POSIX","pid":{pid},"tid":{pid},'
                         f'"ts":{ts},"dur":40,"ph":"X","args":{{{meta},"level":1,"p_idx":-1,'
                         f'"fhash":"{fh}"{args}}}}}\n')
        n += 1
        t += 200
        if (k + 1) % 1000 == 0 or k + 1 == count:
            n += 1
            lines.append(f'{{"id":{n + 1},"name":"iteration","cat":"pipeline","pid":{pid},'
                         f'"tid":{pid},"ts":{step_start},"dur":{t - step_start},"ph":"X","args":'
                         f'{{{meta},"level":1,"p_idx":-1,"step":{k // 1000},'
                         f'"epoch":{0 if 2 * k < count else 1}}}}}\n')
            step_start = t
        if len(lines) >= MEMBER_LINES:
            members.append(_member(lines))
            lines = []
    lines.append(f'{{"id":{n + 2},"name":"end","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{t},'
                 f'"dur":0,"ph":"X","args":{{{meta},"level":1,"p_idx":-1,"num_events":{n + 2}}}}}\n')
    members.append(_member(lines))
    with open(path, "wb") as out:
        for m in members:
            out.write(m)
    return n + 2


def _write(item: tuple) -> int:
    return write_trace(*item)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000, help="distinct data files")
    ap.add_argument("--traces", type=int, default=16, help="trace files (default 16)")
    ap.add_argument("--dir", help="where the set goes (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated set")
    ap.add_argument("-j", "--jobs", type=int, help="passed to the CLI")
    opts = ap.parse_args()
    d = opts.dir or tempfile.mkdtemp(prefix="dft-bench-io-")
    os.makedirs(d, exist_ok=True)
    per = opts.files // opts.traces
    paths = [os.path.join(d, f"trace-node{i:04d}-{30_000 + i}-app.pfw.gz")
             for i in range(opts.traces)]
    try:
        if all(os.path.exists(p) for p in paths):
            print(f"reusing the {opts.traces} files in {d}")
        else:
            t = time.perf_counter()
            with ProcessPoolExecutor() as ex:
                events = sum(ex.map(_write, [(p, i, i * per, per) for i, p in enumerate(paths)]))
            print(f"generated {events:,} events, {per * opts.traces:,} data files in "
                  f"{opts.traces} traces in {time.perf_counter() - t:.1f} s")
        jobs = ["-j", str(opts.jobs)] if opts.jobs else []
        # the text first: a process started later inherits this one's peak
        # RSS through fork (ru_maxrss survives exec), and io.json is loaded
        dt, rss = run_cli(["summary", d, "--io", "--no-progress"] + jobs)
        print(f"summary --io: {dt:.1f} s, peak RSS {rss:.0f} MiB")
        out = os.path.join(d, "io.json")
        dt, rss = run_cli(["summary", d, "--io", "--json", "--no-progress"] + jobs, out)
        with open(out) as f:
            io = json.load(f)
        want = per * opts.traces
        print(f"summary --io --json: {dt:.1f} s, peak RSS {rss:.0f} MiB; "
              f"{len(io['files']):,} files (expected {want:,}), bytes read "
              f"{io['totals']['bytes_read']:,} (expected {want * CHUNK:,}); epochs "
              + ", ".join(f"{e['epoch']}: {e['files']:,} files" for e in io["by_epoch"]))
        ok = len(io["files"]) == want and io["totals"]["bytes_read"] == want * CHUNK
        if not ok:
            sys.exit("the counts differ from the set's")
    finally:
        if not opts.keep and not opts.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
