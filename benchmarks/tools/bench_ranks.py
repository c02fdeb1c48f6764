"""Time and peak memory of `dftracer summary --ranks` on a large synthetic job,
locally and with --dask (same numbers both ways).

Generates one trace per rank in the exact format dftracer writes (the `rank`
metadata, then per step: `pipeline/iteration` with args.step, a
`dataloader/fetch` holding the open, 8 POSIX reads of 64 KiB and close of
one data file (rank r's files are the --paths files of a shared data set
from number r * paths / 2 on, so each is read by two ranks; the steps cycle
through them, the second half of the steps as epoch 1), `compute` forward and backward
holding op events, a `comm/all_reduce` with group/seq, `optimizer.step`).
Every host (8 ranks each) gets its own clock offset of up to +-50 ms, and one
rank loads its data slower: the others wait for it in the all_reduce.  Then
it runs the command line in fresh processes and prints the wall time, the
peak RSS of the largest process (the CLI or one of its workers), whether the
straggler and the clock offsets were found, and whether --dask (a
LocalCluster of one worker process per core) gives the same JSON.

    python3 benchmarks/tools/bench_ranks.py                          # 1,024 files x 100k events
    python3 benchmarks/tools/bench_ranks.py --files 64 --events 20000  # quick
    python3 benchmarks/tools/bench_ranks.py --dir /tmp/br --keep     # generate once, rerun

Generating the full set takes a few minutes (one process per core) and about
1.5 GiB of disk.
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

from bench_tools import _member, run_cli  # the same writer and runner

RANKS_PER_HOST = 8
OPS = 90          # op events inside forward and inside backward
READS = 10        # POSIX events inside each fetch: open, 8 reads of 64 KiB, close
CHUNK = 65536
PER_STEP = 6 + 2 * OPS + READS  # iteration, fetch, forward, backward, all_reduce, optimizer.step
SLOW_US = 20_000  # the straggler's extra data wait per step
MEMBER_LINES = 4096


def host_offset(host: int) -> int:
    """The host's clock error, us (deterministic, within +-50 ms)."""
    return (host * 7919 * 104729) % 100_001 - 50_000


def data_path(index: int) -> tuple:
    """A data file of the shared set: (path, its fhash)."""
    return (f"/lustre/data/train/shard{index // 1000:04d}/sample{index:07d}.npy",
            "%016x" % ((0xC2B2AE3D27D4EB4F * (index + 1)) % (1 << 64)))


def write_rank(path: str, rank: int, world: int, events: int, slow: int, paths: int) -> int:
    pid = 20_000 + rank
    host = rank // RANKS_PER_HOST
    hh = "%016x" % ((0x9E3779B97F4A7C15 * (host + 1)) % (1 << 64))
    meta = f'"hhash":"{hh}"'
    x = f',"pid":{pid},"tid":{pid},"ts":'
    t = 1_763_745_000_000_000 + host_offset(host)
    lines = [
        "[\n",
        f'{{"id":1,"name":"HH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{{meta},"name":"node{host:04d}","value":"{hh}"}}}}\n',
        f'{{"id":2,"name":"process_name","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{{meta},"name":"train.py rank {rank}","value":"process_name"}}}}\n',
        f'{{"id":3,"name":"rank","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":{{{meta},"name":"rank","value":{rank},"local_rank":{rank % RANKS_PER_HOST},"world_size":{world},"job_id":"bench","source":"RANK"}}}}\n',
        f'{{"id":4,"name":"start","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{t},"dur":0,"ph":"X","args":{{{meta},"level":1,"p_idx":-1,"version":"0.2.0","ppid":1}}}}\n',
    ]
    steps = max(1, events // PER_STEP)
    first = rank * paths // 2
    data = [data_path(first + i) for i in range(min(paths, steps))]
    lines += [f'{{"id":{5 + i},"name":"FH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M",'
              f'"args":{{{meta},"name":"{p}","value":"{h}"}}}}\n' for i, (p, h) in enumerate(data)]
    members = [_member(lines)]
    lines = []
    n = 4 + len(data)
    t += 1000
    for k in range(steps):
        jitter = (rank * 31 + k * 17) % 97  # a few us of noise per rank and step
        fetch = 2_000 + jitter + (SLOW_US if rank == slow else 0)
        wait = 500 + (0 if rank == slow else SLOW_US) + (97 - jitter)
        fwd, bwd, opt = 9_000, 18_000, 1_000
        step_us = fetch + fwd + bwd + wait + opt + 40
        ev = []
        ev.append(("fetch", "dataloader", t, fetch, 1, f',"batch":{k},"workers":2'))
        fh = data[k % len(data)][1]
        ev.append(("open64", "POSIX", t + 10, 40, 2, f',"fhash":"{fh}","flags":0,"ret":5'))
        for j in range(READS - 2):
            ev.append(("read", "POSIX", t + 160 + j * 150, 100, 2,
                       f',"fhash":"{fh}","fd":5,"count":{CHUNK},"ret":{CHUNK}'))
        ev.append(("close", "POSIX", t + 160 + (READS - 2) * 150, 20, 2,
                   f',"fhash":"{fh}","fd":5,"ret":0'))
        t1 = t + fetch + 10
        ev.append(("forward", "compute", t1, fwd, 1, ',"module":"Net"'))
        for j in range(OPS):
            ev.append((f"aten::op{j % 12}", "compute", t1 + 5 + j * 99, 90, 2, ""))
        t2 = t1 + fwd + 10
        ev.append(("backward", "compute", t2, bwd, 1, ',"module":"Net"'))
        for j in range(OPS):
            ev.append((f"aten::op{j % 12}_backward", "compute", t2 + 5 + j * 199, 190, 2, ""))
        t3 = t2 + bwd + 10
        ev.append(("all_reduce", "comm", t3, wait, 1,
                   f',"bytes":4,"group_size":{world},"group":"world","seq":{k + 1}'))
        t4 = t3 + wait + 5
        ev.append(("optimizer.step", "compute", t4, opt, 1, f',"step":{k},"optimizer":"SGD"'))
        ev.append(("iteration", "pipeline", t, step_us, 1, f',"step":{k},"epoch":{2 * k // steps}'))
        for name, cat, ts, dur, level, args in ev:
            n += 1
            lines.append(f'{{"id":{n},"name":"{name}","cat":"{cat}"{x}{ts},"dur":{dur},"ph":"X",'
                         f'"args":{{{meta},"level":{level},"p_idx":-1{args}}}}}\n')
        if len(lines) >= MEMBER_LINES:
            members.append(_member(lines))
            lines = []
        t += step_us + 100
    lines.append(f'{{"id":{n + 1},"name":"end","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{t},'
                 f'"dur":0,"ph":"X","args":{{{meta},"level":1,"p_idx":-1,"num_events":{n + 1}}}}}\n')
    members.append(_member(lines))
    with open(path, "wb") as f:
        for m in members:
            f.write(m)
    return n + 2


def _write(item: tuple) -> int:
    return write_rank(*item)


def worker_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=1024, help="rank files (default 1,024)")
    ap.add_argument("--events", type=int, default=100_000, help="events per file (default 100k)")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
    ap.add_argument("--no-dask", action="store_true", help="skip the --dask run")
    ap.add_argument("--dir", default=None, help="where to write the set (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--paths", type=int, default=256,
                    help="distinct data files per rank (default 256)")
    ap.add_argument("--io", action="store_true",
                    help="also time `summary --io` (the I/O pass) on the same set")
    opts = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    d = os.path.abspath(opts.dir) if opts.dir else tempfile.mkdtemp(prefix="dft-bench-ranks-")
    os.makedirs(d, exist_ok=True)
    slow = min(7, opts.files - 1)
    if opts.paths < 1:
        ap.error(f"--paths must be at least 1, not {opts.paths}")
    paths = [os.path.join(d, f"trace-node{r // RANKS_PER_HOST:04d}-{20000 + r}-app.pfw.gz")
             for r in range(opts.files)]
    t = time.perf_counter()
    if all(os.path.exists(p) for p in paths):
        print(f"reusing the {opts.files} files in {d}")
    else:
        with ProcessPoolExecutor(cores) as ex:
            total = sum(ex.map(_write, [(p, r, opts.files, opts.events, slow, opts.paths)
                                        for r, p in enumerate(paths)], chunksize=4))
        print(f"generated {total:,} events in {opts.files} files in "
              f"{time.perf_counter() - t:.0f} s ({d})")
    size = sum(os.path.getsize(p) for p in paths)
    print(f"{size / 2**30:.2f} GiB gzip; {cores} cores, load average {os.getloadavg()[0]:.2f}")
    jobs = ["-j", str(opts.jobs)] if opts.jobs else []
    local_json = os.path.join(d, "ranks-local.json")
    try:
        dt, rss = run_cli(["summary", d, "--ranks", "--json", "--no-progress"] + jobs,
                          local_json)
        with open(local_json) as f:
            local = json.load(f)
        events = opts.files * (opts.events // PER_STEP) * PER_STEP
        print(f"summary --ranks: {dt:.1f} s ({events / dt / 1e6:.2f} M events/s), "
              f"peak RSS {rss:.0f} MiB (the largest process: the CLI or a worker)")
        top = local["stragglers"][0] if local["stragglers"] else None
        print(f"straggler: rank {top and top['rank']} (expected {slow}), cause "
              f"{top and top['cause_class']} {top and top['cause_cat']}/"
              f"{top and top['cause_name']}, {top and top['steps']}/"
              f"{top and top['of_steps']} steps, +{top and top['excess_us']} us "
              f"(expected +{SLOW_US})")
        a = local["alignment"]
        ref = int(a["reference"][4:])
        errors = [abs(v - (host_offset(int(h[4:])) - host_offset(ref)))
                  for h, v in a["offsets_us"].items()]
        print(f"clock offsets: {len(a['offsets_us'])} hosts aligned, largest error "
              f"{max(errors)} us; residual spread median {a['spread_us']['median']} us")
        if opts.io:
            io_json = os.path.join(d, "io-local.json")
            dt3, rss3 = run_cli(["summary", d, "--io", "--json", "--no-progress"] + jobs, io_json)
            with open(io_json) as f:
                io = json.load(f)
            steps = opts.events // PER_STEP
            want = opts.files * steps * (READS - 2) * CHUNK
            distinct = len({first + i for r in range(opts.files)
                            for first in [r * opts.paths // 2] for i in range(min(opts.paths, steps))})
            print(f"summary --io: {dt3:.1f} s ({events / dt3 / 1e6:.2f} M events/s), peak RSS "
                  f"{rss3:.0f} MiB; POSIX_BYTES_READ {io['darshan']['POSIX_BYTES_READ']:,} "
                  f"(expected {want:,}); {len(io['files']):,} files (expected {distinct:,}), "
                  f"{sum(min(opts.paths, steps) for _ in range(opts.files)):,} (trace file, "
                  f"data file) pairs; {len(io['by_rank'])} ranks; epochs "
                  + ", ".join(f"{e['epoch']}: read {e['bytes_read']:,} re-read "
                              f"{e['reread_bytes']:,}" for e in io["by_epoch"]))
        if opts.no_dask:
            return
        from distributed import Client, LocalCluster

        # the scheduler (here) and the workers unpickle dftracer's functions: the
        # dftracer this script's Python imports (PYTHONPATH=<tree> for a source tree)

        with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            dask_json = os.path.join(d, "ranks-dask.json")
            dt2, rss2 = run_cli(["summary", d, "--ranks", "--json", "--no-progress",
                                 "--dask", cluster.scheduler_address], dask_json)
            workers = max(client.run(worker_rss_mib).values())
        with open(dask_json) as f:
            same = json.load(f) == local
        print(f"summary --ranks --dask (LocalCluster, {cores} worker processes): {dt2:.1f} s, "
              f"peak RSS {rss2:.0f} MiB (CLI), {workers:.0f} MiB (largest worker); "
              f"same JSON as local: {'yes' if same else 'NO'}")
    finally:
        if not opts.keep and not opts.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
