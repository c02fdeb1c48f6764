"""One program written against pydftracer 2.0.6: decorators, the ai tree,
log_event and metadata.  tests/test_compat_reference.py runs it under
pydftracer and under dftracer and compares the traces.

Usage: python program.py <log-file-stem>   (with DFTRACER_ENABLE=1)
"""

import sys

from dftracer.python import (
    TagDType,
    TagType,
    TagValue,
    ai,
    dft_fn,
    dftracer,
)

log = dftracer.initialize_log(sys.argv[1], None, -1)
io = dft_fn("IO")
compute_cat = dft_fn("COMPUTE", "compute_block")


@io.log
def read_file(path, epoch=1, step=2):
    return len(path)


class Loader:
    @io.log_init
    def __init__(self, image_idx=3, image_size=4.5):
        self.image_idx = image_idx


class Model:
    def __init__(self):
        self.epoch = 7
        self.step = 8

    @dft_fn("COMPUTE").log
    def forward(self, x):
        return x * 2

    @staticmethod
    @dft_fn("COMPUTE").log_static
    def helper(x):
        return x + 1


@ai.compute.forward
def forward(batch):
    return batch + 1


@ai.compute.backward(args={"lr": 0.1, "opt": "sgd", "layers": 3})
def backward(batch):
    return batch - 1


@ai.data.item
def get_item(i):
    return i


@ai.data.io.read
def read_sample(i):
    return i


read_file("a.bin")
Loader()
m = Model()
m.forward(3)
Model.helper(3)
for i in io.iter(range(2)):
    pass
with dft_fn("CTX", "block", step=5) as ctx:
    ctx.update(args={"k": "v", "n": 1, "f": 2.5})
for batch in ai.dataloader.fetch.iter(range(3)):
    get_item(batch)
    read_sample(batch)
    forward(batch)
    backward(batch)
with ai.pipeline.epoch(epoch=1):
    ai.checkpoint.capture.start()
    ai.checkpoint.capture.stop()
ai.pipeline.train.start(metadata=True)
ai.pipeline.train.stop(metadata=True)
ai.update(epoch=2)
with ai.compute.step:
    pass
with ai.comm.all_reduce.init():
    pass
with ai.other.log:
    pass
t = log.get_time()
log.log_event(
    "manual",
    "user",
    t,
    5,
    int_args={"n": TagValue(1, TagDType.INT, TagType.KEY).value()},
    float_args={"x": TagValue(1.5, TagDType.FLOAT, TagType.KEY).value()},
    string_args={"s": TagValue("v").value()},
)
log.log_metadata_event("run", "compat")
compute_cat.flush()
log.finalize()
