"""Runs a training script unchanged, with a fault put in from outside it:
one rank's model is slowed in its forward, by a CPU spin (work of its own)
or a wait (as a slower device would), for a number of milliseconds, on
every step or only on chosen steps.  For the third-party checks of the
straggler rule, the windows and `whatif` (nanoGPT's train.py, a Lightning
job, the HF Trainer): the script is not edited, so what the tools see is
what its users would get.

    torchrun --nproc_per_node 4 fault_inject.py --module GPT --rank 2 \\
        --spin-ms 5 [--wait-ms 0] [--steps 10-12,40-42] -- train.py ARGS...

--module names the class of the model whose forward is slowed (its calls
are counted as steps: the first call is step 0; a model called several
times a step, as with gradient accumulation, counts each call); the hook is
torch's global forward pre-hook, so no line of the script changes.  The
rank is the RANK environment variable torchrun sets.  The script runs as
`__main__`, with its own folder first on sys.path and sys.argv as it would
have."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from typing import Optional, Set


def parse_steps(text: str) -> Optional[Set[int]]:
    """'10-12,40' -> {10, 11, 12, 40}; '' -> None (every step)."""
    if not text:
        return None
    out: Set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise SystemExit(f"fault_inject: --steps {text!r}: use N or N-M, comma-separated")
        out.update(range(a, b + 1))
    return out


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("fault_inject: give the script after --")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", required=True, help="class name of the model to slow")
    p.add_argument("--rank", type=int, default=-1, help="the rank slowed (-1: none)")
    p.add_argument("--spin-ms", type=float, default=0.0)
    p.add_argument("--wait-ms", type=float, default=0.0)
    p.add_argument("--steps", default="", help="the calls slowed (default: all)")
    a = p.parse_args(argv[:cut])
    script, args = argv[cut + 1], argv[cut + 2:]
    steps = parse_steps(a.steps)
    me = int(os.environ.get("RANK", "0"))
    if me == a.rank and (a.spin_ms > 0 or a.wait_ms > 0):
        import torch

        calls = [0]

        def slow(module, inputs):
            if type(module).__name__ != a.module:
                return None
            n = calls[0]
            calls[0] += 1
            if steps is not None and n not in steps:
                return None
            if a.spin_ms > 0:
                end = time.perf_counter() + a.spin_ms / 1e3
                while time.perf_counter() < end:
                    pass
            if a.wait_ms > 0:
                time.sleep(a.wait_ms / 1e3)
            return None

        torch.nn.modules.module.register_module_forward_pre_hook(slow)
    sys.argv = [script] + args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
