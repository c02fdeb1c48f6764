"""The program behind the dftracer 2.x fork samples in fork/: run under
pydftracer 2.0.6 over dftracer 2.2.0 (the reference) it writes a parent, a
fork child, its own fork child (a grandchild) and a multiprocessing fork
worker, each touching a file the parent touched before forking: the children
use the hashes their parent (or grandparent) defined and never define them.

Usage: python fork_tree.py <log-file-stem> <data-dir>   (DFTRACER_ENABLE=1,
DFTRACER_INC_METADATA=1)
"""

import multiprocessing as mp
import os
import sys

from dftracer.python import dft_fn, dftracer

stem, data = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(data, exist_ok=True)
log = dftracer.initialize_log(stem, data, -1)
io = dft_fn("IO")


@io.log
def touch(name):
    with open(os.path.join(data, name), "ab") as f:
        f.write(b"x" * 10)


def child(name):
    touch("shared.bin")
    touch(name)


touch("shared.bin")
pid = os.fork()
if pid == 0:
    child("child.bin")
    grand = os.fork()
    if grand == 0:
        child("grandchild.bin")
        os._exit(0)
    os.waitpid(grand, 0)
    os._exit(0)
os.waitpid(pid, 0)
worker = mp.get_context("fork").Process(target=child, args=("worker.bin",))
worker.start()
worker.join()
log.finalize()
