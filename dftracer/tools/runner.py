"""Running one function per file on local processes or a Dask cluster."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from dftracer.tools import common
from dftracer.tools.progress import Progress


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run(func: Callable[..., Dict[str, Any]], items: Sequence[Any], *, jobs: Optional[int] = None,
        dask: Optional[str] = None, label: str = "", progress: Optional[bool] = None,
        extra: Sequence[Any] = (),
        on_result: Optional[Callable[[int, Dict[str, Any]], None]] = None) -> List[Dict[str, Any]]:
    """Returns [func(item, *extra) for item in items], in order.

    on_result(i, result), when given, is called in this process as each
    result arrives (in any order), before the next is waited for: a caller
    may fold it and shrink it in place instead of keeping all of it.

    func must be a module-level function (it is pickled to workers) that
    returns a dict, optionally with an "events" count for the progress bar.
    With dask, the calls are tasks on the cluster at that scheduler address;
    otherwise they are spread over `jobs` local processes."""
    bar = Progress(len(items), label, enabled=progress)
    results: List[Any] = [None] * len(items)
    try:
        if dask:
            _run_dask(func, items, extra, dask, results, bar, on_result)
        else:
            jobs = jobs or default_jobs()
            if (jobs <= 1 or len(items) <= 1) and not bar.enabled:
                for i, item in enumerate(items):
                    results[i] = func(item, *extra)
                    _arrived(i, results, bar, on_result)
            else:
                # A bar on a terminal keeps moving while a long file is read,
                # so even one file is read in a worker then.
                import multiprocessing  # here: one file or -j 1 never needs them
                from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

                ctx = multiprocessing.get_context("fork")
                workers = max(1, min(jobs, len(items)))
                # a few files per worker in flight, the next submitted as one
                # ends: each wait() looks at a handful of futures, not at every
                # file of a 10,000-rank job
                window = 4 * workers
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
                    futures: Dict[Any, int] = {}
                    todo = iter(enumerate(items))
                    for i, item in todo:
                        futures[ex.submit(func, item, *extra)] = i
                        if len(futures) >= window:
                            break
                    while futures:
                        done, _ = wait(futures, timeout=0.25, return_when=FIRST_COMPLETED)
                        for fut in done:
                            i = futures.pop(fut)
                            results[i] = fut.result()
                            _arrived(i, results, bar, on_result)
                            nxt = next(todo, None)
                            if nxt is not None:
                                futures[ex.submit(func, nxt[1], *extra)] = nxt[0]
                        bar.tick()
    finally:
        bar.close()
    return results


def _arrived(i: int, results: List[Any], bar: Progress,
             on_result: Optional[Callable[[int, Dict[str, Any]], None]]) -> None:
    bar.update(1, results[i].get("events", 0))
    if on_result is not None:
        on_result(i, results[i])


def _run_dask(func: Callable[..., Dict[str, Any]], items: Sequence[Any], extra: Sequence[Any],
              address: str, results: List[Any], bar: Progress,
              on_result: Optional[Callable[[int, Dict[str, Any]], None]]) -> None:
    try:
        from distributed import Client, as_completed as dask_completed
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            f"--dask needs dask's distributed scheduler: {common.install_hint('dask')}"
        ) from exc
    with Client(address, timeout="30s") as client:
        futures = [client.submit(func, item, *extra, pure=False) for item in items]
        index = {f.key: i for i, f in enumerate(futures)}
        for fut in dask_completed(futures):
            i = index[fut.key]
            results[i] = fut.result()
            _arrived(i, results, bar, on_result)
