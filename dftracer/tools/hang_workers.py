"""The DataLoader side of the hang rule (docs/hang.md, "Waiting for a
batch"): of a stuck rank waiting in `fetch`, the worker that is reading --
an I/O call open, then a sample open (`item` in `data`,
src/torch/autotrace_data.c), then stacks inside a fetch -- never one parked
in its index queue's wait; and its words in the hang's message.  hang.py
calls it with its `where` (a process's open spans and innermost frame)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple

MAX_THREADS = 64  # workers listed (hang.py's bound on threads)
PASSIVE = ("pipeline", "compute", "dataloader", "data")  # spans that say when, not what blocks
# a DataLoader worker parked between batches: torch's worker loop waiting on
# its index queue (multiprocessing's Queue.get, down to a select or poll)
_WORKER_LOOP = ("torch/utils/data/_utils/worker.py", "_worker_loop")
_QUEUE_WAIT = ("multiprocessing/queues.py", "multiprocessing/connection.py", "selectors.py",
               "queue.py", "threading.py")


def _fetch_since(st: Any) -> Optional[int]:
    """When the process's open DataLoader `fetch` (waiting for a batch) began."""
    for _, spans in st.open_spans():
        for s in spans:
            if s.get("value") == "fetch" and s.get("span_cat") == "dataloader" and "since" in s:
                return s["since"]
    return None


def _parked(st: Any) -> Optional[bool]:
    """Whether a worker's newest stacks show it idle between batches: its
    worker loop's callee is the index queue's wait (torch's `_worker_loop`
    calling multiprocessing's `Queue.get`), not a fetch.  None without
    stacks (or without the worker loop in them)."""
    seen = None
    for stack in st.stacks.values():
        frames = stack["frames"]
        for i, f in enumerate(frames):
            if f["function"] == _WORKER_LOOP[1] and f["file"].endswith(_WORKER_LOOP[0]):
                callee = frames[i + 1] if i + 1 < len(frames) else None
                if callee is not None and not any(callee["file"].endswith(q) for q in _QUEUE_WAIT):
                    return False  # inside the fetch: busy
                seen = True
    return seen


def _item(st: Any) -> Optional[Dict[str, Any]]:
    """The sample (`item` in `data`, src/torch/autotrace_data.c) a worker's
    newest snapshot has open: it is reading that sample."""
    for _, spans in st.open_spans():
        for s in spans:
            if s.get("value") == "item" and s.get("span_cat") == "data" and "since" in s:
                return s
    return None


def _busy(st: Any) -> Tuple[bool, bool, bool, bool, int]:
    """How sure it is that a worker is the one reading (largest first): an
    I/O call open; a sample open; stacks inside a fetch; not seen parked in
    its index queue's wait; its open spans."""
    spans = [s for _, ss in st.open_spans() for s in ss]
    parked = _parked(st)
    return (any(s.get("span_cat") not in PASSIVE for s in spans), _item(st) is not None,
            parked is False, parked is not True, len(spans))


def batch_wait(p: Dict[str, Any], now_us: int,
               where: Callable[..., Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A rank waiting in `fetch` for its DataLoader workers: the worker that
    is reading (an I/O call or a sample open, or stacks inside a fetch: not
    one parked in its index queue's wait), and where."""
    since = _fetch_since(p["hang"])
    if since is None:
        return None
    best = None
    workers = sorted(p.get("workers", []), key=lambda w: (w.get("worker") is None,
                                                         w.get("worker") or 0, w.get("pid") or 0))
    for w in workers:
        st = w["hang"]
        busy = _busy(st)
        shows = bool(st.open_spans() or st.stacks)
        if shows and busy[:4] != (False, False, False, False) and \
                (best is None or busy > best[0]):
            best = (busy, w)
    out: Dict[str, Any] = {"since_s": round((now_us - since) / 1e6, 1), "worker": None,
                           # every worker, for top to ask for stacks when none shows a sample
                           "workers": [{"worker": w.get("worker"), "pid": w.get("pid"),
                                        "path": w.get("path"), "parked": _parked(w["hang"])}
                                       for w in workers[:MAX_THREADS]]}
    if best is not None:
        w = best[1]
        info = where(w, w["hang"], now_us)
        info["worker"] = w.get("worker")
        info.pop("rank", None)
        item = _item(w["hang"])
        if item is not None:
            info["item"] = {"index": item.get("step"),
                            "since_s": round((now_us - item["since"]) / 1e6, 3)}
        out["worker"] = info
    return out


def batch_text(b: Dict[str, Any]) -> str:
    """`waiting 40.0 s for a batch: worker 0 (pid 123) stopped in dataset.py:31
    __getitem__ (open /data/x.fifo)`."""
    text = f" waiting {b['since_s']:.1f} s for a batch"
    w = b.get("worker")
    if not w:
        return text
    who = f"worker {w['worker']}" if w.get("worker") is not None and w["worker"] >= 0 else "worker"
    text += f": {who} (pid {w.get('pid')})"
    item = w.get("item")
    if item:
        index = f" {item['index']}" if item.get("index") is not None else ""
        text += f", {item['since_s']:.1f} s into item{index},"
    text += " stopped"
    if w.get("file"):
        text += f" in {os.path.basename(str(w['file']))}:{w['line']} {w.get('function') or ''}".rstrip()
    inner = [o for o in w.get("open", []) if o.get("cat") not in PASSIVE]
    if inner:
        o = inner[-1]
        text += f" ({o['name']}" + (f" {o['file']}" if o.get("file") else "") + ")"
    elif not w.get("file") and w.get("call"):
        text += f" in {w['call']}"
    return text
