"""The program behind the checked-in dftracer 2.x samples of this folder: run
under pydftracer 2.0.6 over dftracer 2.2.0 (the reference), it writes the
trace format that `dftracer validate` recognises as dftracer 2.x.

Usage: python program.py <log-file-stem> <data-dir>   (with DFTRACER_ENABLE=1;
DFTRACER_INC_METADATA=1 or 0)
"""

import os
import sys

from dftracer.python import dft_fn, dftracer

stem, data = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(data, exist_ok=True)
log = dftracer.initialize_log(stem, data, -1)
io = dft_fn("IO")


@io.log
def step(n=0):
    src = os.path.join(data, "a.bin")
    with open(src, "wb") as f:
        f.write(b"x" * 3000)
    with open(src, "rb") as f:
        f.read()
    a = os.open(src, os.O_RDONLY)
    b = os.open(os.path.join(data, "b.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.sendfile(b, a, 0, 3000)
    os.close(a)
    os.close(b)


for n in range(2):
    step(n=n)
t = log.get_time()
log.log_event("ProfilerStep#1", "PP", t, 10)
log.log_event("ProfilerStep#2", "PP", t + 10, 10)
log.log_event('say "hi"', "cpp", t + 20, 5)  # 2.x writes the quotes unescaped
log.log_metadata_event("run", "sample")
log.finalize()
