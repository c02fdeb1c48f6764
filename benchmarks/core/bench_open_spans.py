"""What marking a span open costs (docs/hang.md, docs/performance.md "Open spans").

    PYTHONPATH=$PWD python3 benchmarks/core/bench_open_spans.py [--calls N] [--rounds R]

In one traced process (DFTRACER_FLUSH_INTERVAL=1), interleaved, best of R
rounds of N calls each:

* ``pair``: `_core._span_open(name, cat, ts, group, seq)` + `_core._span_close(tok)`,
  what each traced collective, iteration, forward, backward, optimizer step and
  fetch adds (a slot written under its sequence lock, and closed);
* ``floor``: the same Python loop calling two empty C methods of the same
  arity (`dict.get` twice), so the Python call overhead itself is visible;
* ``flusher``: the flusher's tick with 16 threads each holding a span open
  for longer than the interval (what a hung process pays, per tick), from
  the `open` events it writes: their number per tick and the wall time of a
  tick is not timed here (the tick runs on the flusher's thread); the figure is
  the bytes the trace grows by per second while they stay open.

The C side of one pair (without Python's call cost) is pair - floor.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(r"""
    import glob, json, os, sys, threading, time
    from dftracer.python import dftracer
    from dftracer import _core
    n, rounds, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    log = dftracer.initialize_log(out, None, -1)
    so, sc = _core._span_open, _core._span_close
    nop, d = dict.get, {}
    ts = _core.get_time()
    best = {"pair": 1e9, "floor": 1e9}
    for r in range(rounds):
        s = time.perf_counter_ns()
        for i in range(n):
            sc(so("all_reduce", "comm", ts, "world", i))
        best["pair"] = min(best["pair"], (time.perf_counter_ns() - s) / n)
        s = time.perf_counter_ns()
        for i in range(n):
            nop(d, nop(d, "all_reduce"))
        best["floor"] = min(best["floor"], (time.perf_counter_ns() - s) / n)
    # 16 threads each inside a span for 3.2 s: the open events they cause
    go = threading.Event()
    def hold():
        t = so("all_reduce", "comm", _core.get_time(), "world", 7)
        go.wait()
        sc(t)
    threads = [threading.Thread(target=hold) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(3.2)
    go.set()
    for t in threads:
        t.join()
    log.finalize()
    import gzip
    path = glob.glob(out.replace(".pfw", "") + "*")[0]
    lines = [l for l in gzip.open(path, "rt") if '"name":"open"' in l]
    best["open_events"] = len(lines)
    best["open_bytes"] = sum(len(l) for l in lines)
    print(json.dumps(best))
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        env.update(DFTRACER_ENABLE="1", DFTRACER_FLUSH_INTERVAL="1")
        r = subprocess.run([sys.executable, "-c", CHILD, str(a.calls), str(a.rounds),
                            os.path.join(tmp, "t.pfw")], env=env, capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stderr)
            return 1
        res = json.loads(r.stdout.strip().splitlines()[-1])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}; load average {os.getloadavg()[0]:.2f}")
    print(f"_span_open + _span_close from Python, ns per pair : {res['pair']:.1f}")
    print(f"two empty C calls of the same shape, ns (floor)  : {res['floor']:.1f}")
    print(f"the pair over the floor, ns                      : {res['pair'] - res['floor']:.1f}")
    print(f"16 threads inside a span for 3.2 s: {res['open_events']} open events, "
          f"{res['open_bytes']} bytes before compression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
