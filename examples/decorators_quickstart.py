"""Tracing a small training-like program with dft_fn and the ai tree.

    DFTRACER_ENABLE=1 PYTHONPATH=. python3 examples/decorators_quickstart.py
    zcat quickstart-*-app.pfw.gz | head

Without DFTRACER_ENABLE=1 the program runs the same and writes nothing.
"""

import asyncio
import time

from dftracer.python import ai, dftracer
from dftracer.python import dft_fn as Profile

log = dftracer.initialize_log("quickstart.pfw", None, -1)
p = Profile("app")


class Dataset:
    @ai.data.item.init
    def __init__(self, n: int) -> None:
        self.items = list(range(n))

    @ai.data.item
    def __getitem__(self, idx: int) -> int:
        return self.items[idx] * 2


@ai.compute.forward(args={"model": "toy"})
def forward(x: int, step: int = 0) -> int:
    time.sleep(0.001)
    return x + 1


@p.log
def batches(ds: Dataset, size: int):
    """A generator: one event per batch produced."""
    for i in range(0, len(ds.items), size):
        yield [ds[j] for j in range(i, min(i + size, len(ds.items)))]


@p.log(name="save_async")
async def save(step: int) -> None:
    await asyncio.sleep(0.002)


ds = Dataset(8)
for epoch in ai.pipeline.epoch.iter(range(2)):
    ai.update(epoch=epoch)
    for step, batch in enumerate(ai.dataloader.fetch.iter(batches(ds, 4))):
        with ai.compute.backward:
            forward(sum(batch), step=step)
    asyncio.run(save(step=epoch))
    p.log_metadata("epoch_done", epoch)

log.finalize()
print("trace:", log.trace_path)
