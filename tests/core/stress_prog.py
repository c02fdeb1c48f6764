"""Kills traced processes at random moments (tests/core/test_lifecycle_stress.py).

    python stress_prog.py OUT ROUNDS SEED

For each start method and each of SIGTERM and SIGKILL, ROUNDS times: a child
started with that method traces from 16 threads; each thread k logs events
named "t<k>" whose duration is their sequence number.  The child's main thread
appends to bounds-<pid>.txt, every 2 ms, "C", the CLOCK_MONOTONIC time (ns)
after it read them, and the counts the threads have reached (those events are
committed: a SIGTERM sent after that time must keep them; a line written
later may count events logged while the signal's flush ran in another
thread), and every 50-150 ms calls flush() and then appends "F", the time and
the counts read before it (those events are on disk for good: even a SIGKILL
keeps them).  The driver kills the child after a random delay and prints one
JSON line per child: {"method", "sig", "pid", "status", "dir", "kill_ns"},
kill_ns the CLOCK_MONOTONIC time just before the kill.
"""

import json
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time

THREADS = 16
PER_THREAD = 20000


def child(out):
    from dftracer.python import dftracer

    log = dftracer.initialize_log(os.path.join(out, "trace.pfw"), None, -1)
    counts = [0] * THREADS

    def work(k):
        name = "t%d" % k
        for i in range(PER_THREAD):
            log.log_event(name, "stress", log.get_time(), i)
            counts[k] = i + 1
            if i % 10 == 9:
                time.sleep(0.002)

    ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(THREADS)]
    for t in ts:
        t.start()
    with open(os.path.join(out, "bounds-%d.txt" % os.getpid()), "a") as f:
        rng = random.Random(os.getpid())
        next_flush = time.monotonic()
        while True:
            counted = " ".join(map(str, counts))
            seen = "%d %s" % (time.monotonic_ns(), counted)  # the time after the read
            f.write("C " + seen + "\n")
            f.flush()
            if time.monotonic() >= next_flush:
                log.flush()
                f.write("F " + seen + "\n")
                f.flush()
                next_flush = time.monotonic() + rng.uniform(0.05, 0.15)
            time.sleep(0.002)


def main(argv):
    out, rounds, seed = argv[1], int(argv[2]), int(argv[3])
    rng = random.Random(seed)
    for r in range(rounds):
        for method in ("fork", "spawn", "forkserver"):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                d = os.path.join(out, "%s-%s-%d" % (method, sig.name, r))
                os.makedirs(d)
                p = mp.get_context(method).Process(target=child, args=(d,))
                p.start()
                time.sleep(rng.uniform(0.2, 1.5))
                kill_ns = time.monotonic_ns()
                os.kill(p.pid, sig)
                p.join(60)
                print(json.dumps({"method": method, "sig": sig.name, "pid": p.pid,
                                  "status": p.exitcode, "dir": d, "kill_ns": kill_ns}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
