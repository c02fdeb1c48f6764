"""The console summary printed on rank 0 after each profiled cycle."""

from __future__ import annotations

from typing import Any, List, Optional

ROW_LIMIT = 15


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _device_self(avg: Any) -> float:
    # device_* are the canonical names since torch 2.4; cuda_* before that.
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(type(avg), name) or hasattr(avg, name):
            return _number(getattr(avg, name, 0))
    return 0.0


def _flops_text(flops: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3f}{unit}"
    return f"{flops:.0f}"


def format_summary(
    averages: List[Any], on_device: bool, with_flops: bool, title: str, row_limit: int = ROW_LIMIT
) -> str:
    """A table of the top ops by self device time (when a GPU was profiled)
    or self CPU time, with FLOPs and GFLOP/s (FLOPs over the op's self time)."""
    key = _device_self if on_device else (lambda a: _number(a.self_cpu_time_total))
    rows = sorted(averages, key=key, reverse=True)[:row_limit]
    total_us = sum(key(a) for a in averages)
    total_flops = sum(_number(getattr(a, "flops", 0)) for a in averages)
    sort_label = "Self device" if on_device else "Self CPU"
    header = ["Name", "Self CPU ms"] + (["Self device ms"] if on_device else []) + ["Calls"]
    if with_flops:
        header += ["FLOPs", "GFLOP/s"]
    table = [header]
    for a in rows:
        row = [str(a.key)[:60], f"{_number(a.self_cpu_time_total) / 1e3:.3f}"]
        if on_device:
            row.append(f"{_device_self(a) / 1e3:.3f}")
        row.append(str(a.count))
        if with_flops:
            flops = _number(getattr(a, "flops", 0))
            seconds = key(a) / 1e6
            row += [_flops_text(flops) if flops else "-", f"{flops / seconds / 1e9:.2f}" if flops and seconds else "-"]
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    lines = [f"{title}: top {len(rows)} ops by {sort_label.lower()} time", rule]
    for i, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if i == 0:
            lines.append(rule)
    lines.append(rule)
    footer = f"{sort_label} time total: {total_us / 1e3:.3f} ms"
    if with_flops:
        rate: Optional[float] = total_flops / (total_us / 1e6) / 1e9 if total_us else None
        footer += f"; FLOPs total: {_flops_text(total_flops)}"
        footer += f"; GFLOP/s: {rate:.2f}" if rate is not None and total_flops else "; GFLOP/s: -"
    lines.append(footer)
    return "\n".join(lines)
