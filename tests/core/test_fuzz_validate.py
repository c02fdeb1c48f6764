"""Every file dftracer writes validates (issue 30's acceptance test): seeded
random mixes of the API -- decorated calls and generators, `with` blocks,
loops, enter_event blocks, log_event, traced I/O, threads, fork,
finalize/initialize_log cycles and a full disk (RLIMIT_FSIZE) -- and the
real `dftracer validate` on every file written: no file is rejected."""

from __future__ import annotations

import glob
import os

import pytest

from tracefile import read_trace, run_python, validate

PROGRAM = r"""
import os, random, resource, signal, threading
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a full file: EFBIG, not a signal
from dftracer.python import dftracer, dft_fn

rng = random.Random(SEED)
stem = os.path.join(OUT, "fz.pfw")
log = dftracer.initialize_log(stem, DATA, -1)
p = dft_fn("fuzz")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

def io(r):
    try:
        fd = os.open(os.path.join(DATA, "f%d" % r.randrange(4)), os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b"x" * r.randrange(1, 64))
        os.lseek(fd, 0, 0)
        os.read(fd, 16)
        os.close(fd)
    except OSError:
        pass  # the disk is "full" for data files too

def gen(r, depth):
    body(r, depth)
    yield 1
    body(r, depth)

def body(r, depth):
    for _ in range(r.randrange(4)):
        k = r.random()
        if depth > 3 or k < 0.3:
            log.log_event("ev%d" % r.randrange(5), "fuzz", log.get_time(), r.randrange(3),
                          int_args={"i": r.randrange(100)}, string_args={"s": "v%d" % r.randrange(9)})
        elif k < 0.45:
            io(r)
        elif k < 0.6:
            p.log(name="fn%d" % depth)(body)(r, depth + 1)
        elif k < 0.7:
            for _ in p.log(name="gen%d" % depth)(gen)(r, depth + 1):
                pass
        elif k < 0.8:
            with dft_fn("fuzz", name="blk%d" % depth):
                body(r, depth + 1)
        elif k < 0.9:
            log.enter_event()
            t = log.get_time()
            body(r, depth + 1)
            log.log_event("enter%d" % depth, "fuzz", t, log.get_time() - t)
            log.exit_event()
        else:
            for _ in p.iter(range(2), name="loop%d" % depth):
                body(r, depth + 1)

def set_full(on):  # full now, or after a few hundred more bytes of trace
    limit = soft
    if on:
        limit = 0 if rng.random() < 0.4 else os.path.getsize(log.trace_path) + rng.randrange(600)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

threads, full = [], False
for step in range(STEPS):
    k = rng.random()
    if k < 0.45:
        body(random.Random(rng.random()), 0)
    elif k < 0.6:
        t = threading.Thread(target=lambda s: [body(random.Random(s), 0) for _ in range(3)],
                             args=(rng.random(),))
        t.start()
        threads.append(t)
    elif k < 0.7 and threads:
        threads.pop(0).join()
    elif k < 0.78:
        pid = os.fork()
        if pid == 0:
            r = random.Random(rng.random())
            body(r, 0)
            if r.random() < 0.5:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
            if r.random() < 0.5:
                log.finalize()
            os._exit(0)  # dftracer finalizes first
        os.waitpid(pid, 0)
    elif k < 0.86:
        log.finalize()
        if rng.random() < 0.5:
            full = not full
            set_full(full)
        log = dftracer.initialize_log(stem, DATA, -1)
    elif k < 0.94:
        full = not full
        set_full(full)
    else:
        log.flush()
for t in threads:
    t.join()
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
log.finalize()
print(log.trace_path)
"""


@pytest.mark.no_asan  # forks
@pytest.mark.parametrize("seed", range(6))
def test_every_file_written_by_random_api_mixes_validates(tmp_path, seed):
    data = tmp_path / "data"
    data.mkdir()
    proc = run_python(f"SEED, STEPS, OUT, DATA = {seed}, 40, {str(tmp_path)!r}, {str(data)!r}\n"
               + PROGRAM, {"DFTRACER_ENABLE": "1", "DFTRACER_FLUSH_INTERVAL": "0.05",
                           "DFTRACER_WRITE_BUFFER_SIZE": "4096"}, timeout=120)
    files = sorted(glob.glob(str(tmp_path / "fz-*-app.pfw.gz")))
    assert files
    results = validate(*files)
    assert len(results) == len(files)
    rejected = [r for r in results if r["verdict"] not in ("ok", "empty")]
    assert not rejected, rejected
    # The last trace ends with space to spare: finalized.  Earlier ones may
    # have lost their end event to a full disk (a warning, not a rejection).
    last = proc.stdout.strip()
    assert [r["finalized"] for r in results if r["path"] == last] == [True]
    for r in results:
        if r["verdict"] == "empty":  # every write failed: nothing at all
            assert os.path.getsize(r["path"]) == 0, r
            continue
        trace = read_trace(r["path"], require_end=r["finalized"])
        by_id = {e["id"]: e for e in trace.events}
        for e in trace.user_events():  # parents in the file agree with their children
            parent = by_id.get(e["args"]["p_idx"])
            if parent is not None:
                assert parent["tid"] == e["tid"] and parent["args"]["level"] == e["args"]["level"] - 1

