"""A training workload with DLIO's shape (argonne-lcf/dlio_benchmark, its
PyTorch loader over npz files), written for these tests: the same tracer API
calls, categories and event names as DLIO's code makes, the same process
layout (one process per rank, each with a persistent DataLoader worker forked
by torch), and none of DLIO's code.  tests/ecosystem/ traces it with
dftracer and with the reference (pydftracer 2.0.6 over dftracer 2.2.0) and
compares what DFAnalyzer and dftracer-utils read from both traces.

    python dlio_workload.py generate DATA            (untraced: writes the npz files)
    python dlio_workload.py train DATA OUTPUT RANK SIZE

As DLIO: the trace is ``OUTPUT/trace-RANK-of-SIZE.pfw`` named by
``initialize_log(logfile, data_dir, process_id=RANK)``, called after the
storage object was built (its ``@log_init`` constructor runs before tracing
is configured); ``@dft_ai`` is the run, ``dft_ai.pipeline.epoch.iter`` the
epochs, ``@dft_ai.pipeline.train`` an epoch's training,
``dft_ai.dataloader.fetch.iter`` the batches, ``@dft_ai.compute`` a step's
compute, ``@dft_ai.data.item`` a sample read in the worker, whose reader
``open``/``get_sample``/``close`` are ``@dlp.log`` events of category
``reader``; ``worker_init`` does not initialize tracing in a forked worker.
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from dftracer.python import DFTRACER_ENABLE
from dftracer.python import ai as dft_ai
from dftracer.python import dft_fn as Profile
from dftracer.python import dftracer as PerfTrace

NUM_FILES = 16  # one sample per file
BATCH = 2
EPOCHS = 2
COMPUTE_S = 0.05  # longer than the flush interval the tests set: open spans, memory samples
RECORD_BYTES = 64 * 1024

MODULE_DATA_LOADER = "data_loader"
MODULE_AI_FRAMEWORK = "ai_framework"
MODULE_DATA_READER = "reader"
MODULE_STORAGE = "storage"
MODULE_CONFIG = "config"
MODULE_DLIO_BENCHMARK = "dlio_benchmark"


def generate(data):
    train = os.path.join(data, "train")
    os.makedirs(train, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(NUM_FILES):
        x = rng.integers(0, 255, size=(RECORD_BYTES, 1), dtype=np.uint8)
        np.savez(os.path.join(train, f"img_{i:02d}_of_{NUM_FILES}.npz"), x=x, y=np.zeros(1))


storage_dlp = Profile(MODULE_STORAGE)
config_dlp = Profile(MODULE_CONFIG)
loader_dlp = Profile(MODULE_DATA_LOADER)
reader_dlp = Profile(MODULE_DATA_READER)
framework_dlp = Profile(MODULE_AI_FRAMEWORK)
dlp = Profile(MODULE_DLIO_BENCHMARK)


class FileStorage:
    @storage_dlp.log_init
    def __init__(self, root):
        self.root = root

    @storage_dlp.log
    def walk_node(self, path):
        return sorted(os.listdir(path))

    @storage_dlp.log
    def get_node(self, path):
        return os.path.isdir(path)


class Config:
    def __init__(self):
        self.files = []
        self.global_index_map = {}

    @config_dlp.log
    def build_sample_map_iter(self, files):
        self.files = files
        self.global_index_map = {i: (f, 0) for i, f in enumerate(files)}

    def configure_dftracer(self, is_child=False):
        # As DLIO: a forked worker keeps its parent's tracer.
        if is_child:
            return None
        if not DFTRACER_ENABLE:
            return None
        data, output = RUN["data"], RUN["output"]
        checkpoint = os.path.join(output, "checkpoints")
        return PerfTrace.initialize_log(
            logfile=os.path.join(output, f"trace-{RUN['rank']}-of-{RUN['size']}.pfw"),
            data_dir=f"{os.path.abspath(data)}:{data}:./{data}:{checkpoint}:./{checkpoint}",
            process_id=RUN["rank"])


args = Config()
RUN = {}  # data, output, rank, size: set by train()


class NPZReader:
    @reader_dlp.log_init
    def __init__(self, thread_index):
        self.thread_index = thread_index
        self.open_file_map = {}

    @reader_dlp.log
    def open(self, filename):
        return np.load(filename, allow_pickle=True)["x"]

    @reader_dlp.log
    def close(self, filename):
        self.open_file_map[filename] = None

    @reader_dlp.log
    def get_sample(self, filename, sample_index):
        image = self.open_file_map[filename][..., sample_index]
        reader_dlp.update(image_size=image.nbytes)

    @dft_ai.data.preprocess
    def preprocess(self, a=None):
        return a

    @dft_ai.data.item
    def read_index(self, global_sample_idx, step):
        reader_dlp.update(step=step)
        filename, sample_index = args.global_index_map[global_sample_idx]
        self.open_file_map[filename] = self.open(filename)
        self.get_sample(filename, sample_index)
        self.preprocess()
        self.close(filename)
        return np.zeros(8, dtype=np.uint8)


class TorchDataset(Dataset):
    @loader_dlp.log_init
    def __init__(self, num_samples, num_workers):
        self.num_samples = num_samples
        self.reader = None
        self.num_images_read = 0
        if num_workers == 0:
            self.worker_init(-1)

    @loader_dlp.log
    def worker_init(self, worker_id):
        args.configure_dftracer(is_child=True)
        self.reader = NPZReader(worker_id)

    @loader_dlp.log
    def __len__(self):
        return self.num_samples

    def __getitem__(self, image_idx):
        self.num_images_read += 1
        step = int(math.ceil(self.num_images_read / BATCH))
        loader_dlp.update(step=step)
        dft_ai.update(step=step)
        return self.reader.read_index(image_idx, step)


class RankSampler(Sampler):
    def __init__(self, num_samples):
        rank, per = RUN["rank"], int(math.ceil(num_samples / RUN["size"]))
        self.indices = list(range(rank * per, min((rank + 1) * per, num_samples)))

    def __len__(self):
        return len(self.indices)

    def __iter__(self):
        yield from self.indices


class TorchDataLoader:
    @loader_dlp.log_init
    def __init__(self, epoch_number):
        self.epoch_number = epoch_number
        self._dataset = None

    @loader_dlp.log
    def read(self):
        dataset = TorchDataset(NUM_FILES, 1)
        self._dataset = DataLoader(dataset, batch_size=BATCH, sampler=RankSampler(NUM_FILES),
                                   num_workers=1, drop_last=True,
                                   worker_init_fn=dataset.worker_init,
                                   multiprocessing_context="fork", prefetch_factor=2,
                                   persistent_workers=True)

    @loader_dlp.log
    def next(self):
        step = 1
        for batch in dft_ai.dataloader.fetch.iter(self._dataset):
            loader_dlp.update(step=step)
            dft_ai.update(step=step)
            step += 1
            yield batch
        self.epoch_number += 1
        loader_dlp.update(epoch=self.epoch_number)
        dft_ai.update(epoch=self.epoch_number)

    @loader_dlp.log
    def finalize(self):
        pass


class TorchFramework:
    @framework_dlp.log_init
    def __init__(self):
        self.reader_train = None

    @framework_dlp.log
    def init_loader(self, epoch):
        self.reader_train = TorchDataLoader(epoch)

    @framework_dlp.log
    def get_loader(self):
        return self.reader_train

    @dft_ai.compute
    def compute(self, batch, epoch_number, step, computation_time):
        time.sleep(computation_time)
        return torch.as_tensor(batch).sum()


class DLIOBenchmark:
    def __init__(self):
        self.storage = FileStorage(RUN["data"])  # before tracing is configured, as in DLIO
        os.makedirs(RUN["output"], exist_ok=True)
        self.dftracer = args.configure_dftracer(is_child=False)
        with Profile(name=f"{self.__init__.__qualname__}", cat=MODULE_DLIO_BENCHMARK):
            self.framework = TorchFramework()
            self.steps = NUM_FILES // BATCH // RUN["size"]

    @dlp.log
    def initialize(self):
        train_dir = os.path.join(RUN["data"], "train")
        self.storage.get_node(train_dir)
        files = [os.path.join(train_dir, f) for f in self.storage.walk_node(train_dir)
                 if f.endswith(".npz")]
        args.build_sample_map_iter(files)

    @dft_ai.pipeline.train
    def _train(self, epoch):
        overall_step = 1
        loader = self.framework.get_loader()
        for batch in loader.next():
            if overall_step > self.steps:
                break
            self.framework.compute(batch, epoch, overall_step, COMPUTE_S)
            overall_step += 1
        return overall_step

    @dft_ai
    def run(self):
        self.framework.init_loader(1)
        self.framework.get_loader().read()
        for epoch in dft_ai.pipeline.epoch.iter(range(1, EPOCHS + 1), include_iter=False):
            self._train(epoch)
            self.framework.get_loader().finalize()

    @dlp.log
    def finalize(self):
        # As DLIO: the persistent worker is still alive when tracing
        # ends; torch stops it at the interpreter's exit.
        pass


def train(data, output, rank, size):
    RUN.update(data=data, output=output, rank=rank, size=size)
    benchmark = DLIOBenchmark()
    benchmark.initialize()
    benchmark.run()
    benchmark.finalize()
    if benchmark.dftracer:
        benchmark.dftracer.finalize()


if __name__ == "__main__":
    if sys.argv[1] == "generate":
        generate(sys.argv[2])
    else:
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
