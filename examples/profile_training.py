"""A tiny training loop with the --profile flags (docs/profiler.md).

    python3 examples/profile_training.py --profile --profile-dir /tmp/profiles
    python3 examples/profile_training.py --profile --profile-name run1 \\
        --profile-activities CPU GPU MEM --profile-wait 1 --profile-active 2
    DFTRACER_ENABLE=1 python3 examples/profile_training.py --profile   # + dftracer PP events
    torchrun --nproc_per_node=2 examples/profile_training.py --profile --profile-name tp

Each rank writes {profile-dir}/{profile-name}-rank{r}.trace.json.gz (open it in
ui.perfetto.dev or chrome://tracing, or point Holistic Trace Analysis at the
directory); rank 0 prints the top ops with FLOPs and GFLOP/s.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from dftracer.python import dftracer
from dftracer.python.torch import add_profiler_args, create_profiler_from_args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="training steps (default: 8)")
    add_profiler_args(parser)
    args = parser.parse_args()

    log = dftracer.initialize_log("profile_training.pfw", None, -1)  # a no-op unless DFTRACER_ENABLE=1
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    data = torch.randn(32, 64, device=device)
    target = torch.randint(0, 10, (32,), device=device)

    profiler = create_profiler_from_args(args, profile_name="train")
    with profiler:
        for _ in range(args.steps):
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
            profiler.step()
    if args.profile:
        for path in profiler.trace_paths:
            print(f"Profiler trace saved to: {path}")
    log.finalize()


if __name__ == "__main__":
    main()
