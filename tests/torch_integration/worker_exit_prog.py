"""A DataLoader whose persistent workers are left alive at exit: torch's
exit handling ends them with SIGTERM and its worker handler calls _exit()
(issue 66).  Each `__getitem__` is a pydftracer-API event (`@dft_fn.log`,
as DLIO's readers are), worker 0 optionally keeps 4 MB a sample.
argv: start-method, how the loader ends (alive: left alive at exit; deleted:
`del loader` before exit; exit: os._exit(0) after the loop), api or run
(api: initialize_log here; run: under `dftracer run`), leak (1 or 0)."""

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from dftracer.python import dft_fn, dftracer

ITEMS = 48
reader = dft_fn("reader")


class Items(Dataset):
    def __init__(self, leak: bool) -> None:
        self.leak = leak
        self.kept = []

    def __len__(self) -> int:
        return ITEMS

    @reader.log
    def __getitem__(self, i: int):
        info = get_worker_info()
        if self.leak and info is not None and info.id == 0:
            self.kept.append(bytearray(4 << 20))
        return torch.full((4,), float(i))


def main() -> None:
    method, ending, mode, leak = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    log = None
    if mode == "api":
        log = dftracer.initialize_log(os.path.join(os.getcwd(), "t.pfw"), None, -1)
    loader = DataLoader(Items(leak), batch_size=1, num_workers=2, persistent_workers=True,
                        multiprocessing_context=method)
    seen = sum(len(batch) for batch in loader)
    print(seen, flush=True)
    if ending == "deleted":
        del loader
    elif ending == "exit":
        if log is not None:
            log.finalize()
        os._exit(0)
    if log is not None:
        log.finalize()


if __name__ == "__main__":
    main()
