"""DataLoader events: `dataloader/fetch` (the loop waiting in next()) and
`data/item` (one dataset access, in the worker or, with num_workers=0, in
the main process).

The iterator's __next__ is wrapped on the base class every DataLoader
iterator derives from; DataLoader.__iter__ is wrapped to count epochs (the
passes over each loader that ran to the end or yielded len(loader) batches,
as a trainer that stops at len(loader) leaves them (Lightning), so a peek
with next(iter(loader)) is no epoch).  The fetchers of torch.utils.data._utils.fetch
are replaced by versions that time each __getitem__ (torch's code with a
clock read around each access, or, for a batch read sample by sample,
torch's own fetch over indices that read the clock as they are handed out);
if torch's fetchers are not the code they were written against, the whole
fetch is one `item` event instead.

A worker process says once, at its first fetch, which worker of its loader
it is (a `worker` metadata event, docs/trace-format.md "Workers"): without
persistent_workers every epoch starts new processes, and the id is what
ties one epoch's worker 0 to the next one's.

What runs per batch and per item is C (src/torch/autotrace_data.c): the
iterator's __next__ and both fetchers are C callables; only a fetcher of
unknown code is timed in Python, one event per fetch. An iterable dataset's
`item` index counts the samples its fetcher (one per worker) yielded.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import threading
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from torch.utils.data import dataloader as dl
from torch.utils.data import get_worker_info
from torch.utils.data._utils import fetch as fetch_module

from dftracer import _core, _rank_hook
from dftracer._autotrace import modules
from dftracer._autotrace._base import data_enter, emit, now, part, patch

P = part("dataloader")

_epochs: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
# each loader's number in this process, in the order of their first pass
_numbers: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


class _Starting(threading.local):
    """The loader whose pass this thread is starting, workers and all: a
    worker forked inside __iter__ finds its loader's number here (the forking
    thread is the child's only one; a spawned worker does not inherit it)."""

    loader = -1


_starting = _Starting()
# the loaders' numbers, process-wide: a loader collected keeps its number, so
# none is given twice (next() of a count is one step under the GIL)
_numbering = itertools.count()


def _dataset_name(dataset: Any) -> str:
    return type(dataset).__name__ if dataset is not None else ""


def _index(idx: Any) -> Optional[Dict[str, int]]:
    try:
        return {"index": operator.index(idx)}
    except TypeError:
        return None


# ---- the main process: waiting for batches --------------------------------


def _wrap_next(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`fetch` events and the iteration's batch boundaries, in C."""
    return _core._AtNext(original)


def _wrap_iter(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        t0 = now() if P.on else 0  # workers start prefetching inside original()
        number = -1
        if P.on:
            try:
                number = _numbers.get(self, -1)
                if number < 0:
                    number = _numbers[self] = next(_numbering)
            except TypeError:  # a loader that cannot be weakly referenced
                number = -1
        _starting.loader = number
        passed = _pass_rank(self) if P.on else None
        try:
            it = original(self)
        finally:
            _starting.loader = -1
            if passed is not None:
                _restore_env(*passed)
        modules.search_again()
        if P.on:
            try:
                # the passes over this loader that ran to the end: a peek
                # (next(iter(loader))) starts no epoch of its own
                epoch = _epochs.get(self, 0)
                it._dftracer_epoch = epoch
                it._dftracer_loader = weakref.ref(self)
                # the pass's length: its last batch ends the pass though the
                # iterator is not exhausted (a trainer stopping at len(loader))
                it._dftracer_batches = _length(self)
                ints = {"epoch": epoch, "workers": int(getattr(self, "num_workers", 0) or 0)}
                if number >= 0:
                    ints["loader"] = number
                emit("iter", "dataloader", t0, now(), ints,
                     {"dataset": _dataset_name(getattr(self, "dataset", None))})
            except Exception:  # an iterator without attributes: no epoch
                pass
        return it

    return __iter__


def _length(loader: Any) -> int:
    """len(loader), the batches of a pass; -1 when it has none (an
    IterableDataset without __len__) or it raises."""
    try:
        n = len(loader)
        return n if isinstance(n, int) and n > 0 else -1
    except Exception:  # the program's len: its error is not ours to raise
        return -1


def _pass_rank(loader: Any) -> Optional[Tuple[str, Optional[str]]]:
    """A process that learnt its rank from torch.distributed (no RANK in its
    environment, as under Lightning's own launcher or mp.spawn) passes it to
    the workers its loader starts in __iter__, in _rank_hook.WORKER_RANK_VAR:
    a spawned worker is a new interpreter that knows nothing of it (a forked
    one has it already).  Returns (the variable, its value before) to put
    back once they started, or None when nothing was set."""
    got = _rank_hook.learnt
    try:
        if got is None or not int(getattr(loader, "num_workers", 0) or 0):
            return None
    except (TypeError, ValueError):
        return None
    var = _rank_hook.WORKER_RANK_VAR
    before = os.environ.get(var)
    os.environ[var] = ",".join(str(x) for x in got)
    return var, before


def _restore_env(var: str, before: Optional[str]) -> None:
    if before is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = before


def _epoch_done(it: Any) -> None:
    """An iterator ran to its end or yielded its pass's last batch: the next
    pass over its loader is the next epoch."""
    try:
        loader = it._dftracer_loader()
        if loader is not None:
            _epochs[loader] = max(_epochs.get(loader, 0), it._dftracer_epoch + 1)
    except Exception:  # not one of ours
        pass


# ---- the dataset side: one event per item ----------------------------------


class _Once:
    """Whether this process has said which worker it is (reset in a forked
    child: a worker forked from a process that fetched itself)."""

    noted = False


def _note_worker() -> None:
    """The `worker` event of a DataLoader worker, once per process (the main
    process fetching with num_workers=0 writes none)."""
    _Once.noted = True
    try:
        info = get_worker_info()
        parent = _rank_hook.parent_rank() if info is not None else None
        if parent is not None:  # a spawned worker: its rank is its parent's
            _core._record_rank(parent[0], parent[1], parent[2])
        if info is not None:
            _core._record_worker(int(info.id), int(info.num_workers), _starting.loader,
                                 _dataset_name(info.dataset) or None)
    except Exception:  # no id: readers count the process as a worker of its own
        pass


def _forked() -> None:
    _Once.noted = False


os.register_at_fork(after_in_child=_forked)
_core._at_data_setup(_note_worker, lambda it: _epoch_done(it))


def _timed_item(get: Callable[[Any], Any], idx: Any, ints: Optional[Dict[str, int]]) -> Any:
    start = now()
    value = get(idx)
    emit("item", "data", start, now(), ints)
    return value


def _whole_fetch(original: Callable[..., Any]) -> Callable[..., Any]:
    """A fetcher of unknown code: one `item` event per fetch."""
    @functools.wraps(original)
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        if not P.on:
            return original(self, possibly_batched_index)
        if not _Once.noted:
            _note_worker()
        first = possibly_batched_index
        if isinstance(first, (list, tuple)) and first:
            first = first[0]
        data_enter(1)
        try:
            return _timed_item(lambda i: original(self, i), possibly_batched_index, _index(first))
        finally:
            data_enter(-1)

    return fetch


# The names torch's fetchers use: their code is what the C fetchers
# (_core._AtMapFetch, _core._AtIterFetch) reproduce only when these match.
_KNOWN = {
    "map": {"auto_collation", "hasattr", "dataset", "__getitems__", "collate_fn"},
    "iterable": {"ended", "StopIteration", "auto_collation", "append", "next", "dataset_iter",
                 "len", "drop_last", "collate_fn"},
}
_ORIGINAL: Dict[str, Callable[..., Any]] = {}


def _replace_fetch(kind: str, cls: Any, ours: Callable[..., Any]) -> None:
    original = cls.fetch
    _ORIGINAL[kind] = original
    code = getattr(original, "__code__", None)
    if code is not None and set(code.co_names) == _KNOWN[kind]:
        replacement = ours(original)
    else:
        replacement = _whole_fetch(original)
    patch(P, cls, "fetch", replacement)


def install() -> None:
    patch(P, dl._BaseDataLoaderIter, "__next__", _wrap_next(dl._BaseDataLoaderIter.__next__))
    patch(P, dl.DataLoader, "__iter__", _wrap_iter(dl.DataLoader.__iter__))
    _replace_fetch("map", fetch_module._MapDatasetFetcher, _core._AtMapFetch)
    _replace_fetch("iterable", fetch_module._IterableDatasetFetcher, _core._AtIterFetch)
    P.started()
