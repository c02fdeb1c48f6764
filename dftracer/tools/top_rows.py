"""The rows of `dftracer top` (docs/cli.md, "dftracer top"): one per process,
their cells, their order, the headline, and the --once table.  Below both
screens: tools/top.py (the command, --once) and tools/top_view.py (the live
view) import it, and it imports neither."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import common

SORTS = ("rank", "events", "step", "io", "state", "pid", "rss")

# What must not reach a terminal raw (names and paths come from traces): C0
# and C1 controls, DEL, the bidirectional overrides, line separators, and the
# lone surrogates that stand for undecodable bytes of a file name.  rich
# passes ESC through, so the view needs this as much as the tables.
printable = common.printable  # control characters escaped (names, paths)


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.1f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}" if x >= 10 or x == 0 else f"{x:.1f}"


def fmt_share(x: float) -> str:
    return "-" if x <= 0 else ("<1%" if x < 0.005 else f"{100 * x:.0f}%")


def fmt_mbs(x: float) -> str:
    if x <= 0:
        return "-"
    if x < 0.05:
        return "<0.1"
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def fmt_opt_us(us: Optional[float]) -> str:
    return "-" if us is None else common.fmt_us(us)


SHARE_COLUMNS = (("compute", "compute"), ("data", "data"), ("io", "I/O"), ("comm", "comm"),
                 ("checkpoint", "ckpt"), ("other", "other"))
ROW_HEADERS = ["rank", "host", "pid", "name", "state", "events", "ev/s", "step", "last",
               "median"] + [h for _, h in SHARE_COLUMNS] + ["read MB/s", "write MB/s", "RSS", "note"]
RIGHT = [0, 2] + list(range(5, 19))


def fmt_rss(n: Optional[int]) -> str:
    """The last resident memory sample (docs/memory.md), "-" before one."""
    return "-" if not n else common.fmt_bytes(n)


def row_cells(p: Dict[str, Any]) -> List[str]:
    return ([str(p["rank"]) if p["rank"] is not None else "-", printable(p["host"]) or "-",
             str(p["pid"]) if p["pid"] is not None else "-", printable(p["name"]) or "-",
             p["state"],
             f"{p['events']:,}", fmt_rate(p["events_per_s"]),
             str(p["step"]) if p["step"] is not None else "-",
             fmt_opt_us(p["step_last_us"]), fmt_opt_us(p["step_median_us"])]
            + [fmt_share(p["by_cat"][g]) for g, _ in SHARE_COLUMNS]
            + [fmt_mbs(p["io_read_mb_s"]), fmt_mbs(p["io_write_mb_s"]),
               fmt_rss(p.get("rss_bytes")), printable(p["mark"])])


_STATE_ORDER = {"running": 0, "waiting": 1, "silent": 2, "error": 3, "finished": 4}


def sort_rows(procs: List[Dict[str, Any]], by: str, reverse: bool = False) -> List[Dict[str, Any]]:
    def ident(p: Dict[str, Any]) -> Tuple[Any, ...]:
        # a rank's main process before its DataLoader workers, in worker order
        worker = p.get("worker")
        return (p["rank"] is None, p["rank"] or 0, p["host"], p.get("worker_of") is not None,
                worker if isinstance(worker, int) else -1, p["pid"] or 0, p["path"])

    def done(p: Dict[str, Any]) -> bool:
        # finished, or exited without an end event (follow.snapshot's "ended",
        # by liveness' rule): the rows of earlier jobs, after the live job's
        return p["state"] == "finished" or bool(p.get("ended"))

    keys = {
        "rank": lambda p: (done(p),) + ident(p),  # ended processes after the others
        "pid": lambda p: (p["pid"] or 0, p["host"], p["path"]),
        "events": lambda p: (-p["events_per_s"], -p["events"]) + ident(p),
        "step": lambda p: (-(p["step_last_us"] or 0),) + ident(p),
        "io": lambda p: (-(p["io_read_mb_s"] + p["io_write_mb_s"]),) + ident(p),
        "state": lambda p: (_STATE_ORDER.get(p["state"], 9),) + ident(p),
        "rss": lambda p: (-(p.get("rss_bytes") or 0),) + ident(p),
    }
    rows = sorted(procs, key=keys[by])
    return rows[::-1] if reverse else rows


def headline(snap: Dict[str, Any]) -> str:
    n = snap["files"]
    nr, nw = snap.get("ranks", 0), snap.get("workers", 0)
    who = f"{nr} rank{'s' if nr != 1 else ''}, {nw} worker{'s' if nw != 1 else ''}; " if nr else ""
    return (f"{n} process{'es' if n != 1 else ''} ({who}{snap['running']} running, "
            f"{snap['finished']} finished, {snap['silent']} silent"
            + (f", {snap['waiting']} waiting" if snap.get("waiting") else "") + "), "
            f"{fmt_rate(snap['events_per_s'])} events/s, window {snap['window_s']:g} s")


def render_text(snap: Dict[str, Any], sort: str = "rank") -> str:
    """The --once table."""
    rows = [row_cells(p) for p in sort_rows(snap["processes"], sort)]
    out = [f"dftracer top: {headline(snap)}", "", common.table(ROW_HEADERS, rows, RIGHT)]
    if snap.get("hang"):
        out[1:1] = ["", printable(snap["hang"]["message"])]
    fns = snap["top_functions"]
    if fns:
        body = [[printable(f["cat"]), printable(f["name"]), f"{f['count']:,}",
                 common.fmt_us(f["time_us"]),
                 fmt_share(f["share"])] for f in fns]
        out += ["", f"Top functions (last {snap['window_s']:g} s of each process)",
                common.table(["cat", "name", "calls", "time", "share"], body, [2, 3, 4])]
    return "\n".join(out)
