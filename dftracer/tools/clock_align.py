"""The clock alignment of ``merge``, ``view``, ``report`` and ``summary
--ranks`` (docs/cli.md, "Clock alignment"): one offset per host, the median
over the collectives it shares with an aligned host of the difference of
their ends, from the sync points of the ranks pass (``_core._rank_file``,
src/reader/ranks.c: per collective its key and its end).  It also holds what
a ranks-pass result is (readable, its rank) for dftracer/tools/ranks.py.
"""

from __future__ import annotations

import statistics
from array import array
from typing import Any, Dict, Iterable, List, Optional, Tuple

from dftracer.tools import common

PLAUSIBLE_US = 978_307_200_000_000   # 2001-01-01: a clock before it is not set
DAY_US = 86_400_000_000              # a host this far off the reference is warned about

Result = Dict[str, Any]


def ok(r: Result) -> bool:
    """A ranks-pass result that was read (whole or up to a truncation)."""
    return r.get("status") in ("ok", "truncated") and "sync" in r


def own_rank(r: Result) -> Optional[int]:
    """The pass's `own_rank` (reader/identity.c applies the rank rule), None
    for none."""
    k = r.get("own_rank", -1)
    return k if k >= 0 else None


def int64s(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    return a


def align(results: Iterable[Result]) -> Dict[str, Any]:
    """One offset per host (us, to subtract from its ts) from the ends of the
    collectives hosts share: the reference is the host of the lowest rank;
    each other host's offset is the median over the collectives it shares
    with an aligned host of the difference of their ends (each end the
    median over the host's files).  Residual: per collective seen in two or
    more files, max - min of its corrected ends."""
    files = [r for r in results if ok(r)]
    ends: Dict[str, Dict[int, List[int]]] = {}
    for r in files:
        s = int64s(r["sync"])
        host = ends.setdefault(r["host"], {})
        for i in range(0, len(s), 2):
            host.setdefault(s[i], []).append(s[i + 1])
    host_end = {h: {k: statistics.median(v) for k, v in e.items()} for h, e in ends.items()}
    drift = max((r["clock"][3] - r["clock"][2] for r in files if r["clock"][0]), default=0)
    out: Dict[str, Any] = {"hosts": sorted(ends), "reference": None, "offsets_us": {},
                           "matched": {}, "unaligned": [], "spread_us": None,
                           "collectives": 0, "clock_drift_us": drift}
    with_sync = [h for h in sorted(host_end) if host_end[h]]
    if not with_sync:
        out["unaligned"] = sorted(ends) if len(ends) > 1 else []
        return out
    # the reference: the host of the lowest rank, among the hosts whose clock is
    # set (one that reads 1970 must not take every other host back with it)
    set_clock = {h for h in with_sync if statistics.median(host_end[h].values()) >= PLAUSIBLE_US}
    ranked = sorted((r["host"] not in set_clock,
                     own_rank(r) if own_rank(r) is not None else 1 << 62, r["host"])
                    for r in files if host_end.get(r["host"]))
    ref = ranked[0][2]
    offsets = {ref: 0.0}
    matched = {ref: len(host_end[ref])}
    # Grow the aligned set one host at a time, each time by the pair (host,
    # aligned host) sharing the most collectives (ties: the first host in
    # name order, then the earliest aligned): Prim's way, each pair's count
    # taken once when its second host is aligned, so hosts cost their square,
    # not their cube.
    order = {h: i for i, h in enumerate(with_sync)}
    pending = [h for h in with_sync if h != ref]
    best: Dict[str, Tuple[int, str]] = {}  # host -> (common collectives, aligned host)

    def consider(g: str) -> None:
        keys_g = host_end[g].keys()
        for h in pending:
            n = len(host_end[h].keys() & keys_g)
            if n and (h not in best or n > best[h][0]):
                best[h] = (n, g)

    consider(ref)
    while best:
        h = max(best, key=lambda x: (best[x][0], -order[x]))
        n, g = best.pop(h)
        pending.remove(h)
        common_keys = host_end[h].keys() & host_end[g].keys()
        offsets[h] = offsets[g] + statistics.median(host_end[h][k] - host_end[g][k]
                                                    for k in common_keys)
        matched[h] = n
        consider(h)
    spreads = []
    by_key: Dict[int, List[float]] = {}
    for h, e in ends.items():
        if h in offsets:
            for k, v in e.items():
                by_key.setdefault(k, []).extend(x - offsets[h] for x in v)
    spreads = sorted(max(v) - min(v) for v in by_key.values() if len(v) >= 2)
    out.update(reference=ref, offsets_us={h: round(v) for h, v in sorted(offsets.items())},
               matched=matched, unaligned=[h for h in sorted(ends) if h not in offsets],
               collectives=len(spreads), warnings=_clock_warnings(files, offsets, by_key, ref))
    if spreads:
        out["spread_us"] = {"median": spreads[len(spreads) // 2],
                            "p95": spreads[min(len(spreads) - 1, int(0.95 * len(spreads)))],
                            "max": spreads[-1]}
    return out


def _clock_warnings(files: List[Result], offsets: Dict[str, float],
                    by_key: Dict[int, List[float]], ref: str) -> List[str]:
    """One warning per kind of absurd clock data: hosts a day or more off the
    reference (a clock never set reads 1970), and a file whose collectives
    end far from the same collectives elsewhere after alignment (its
    sequence numbers shifted: it counts its collectives differently)."""
    out = []
    far = sorted((h for h, v in offsets.items() if abs(v) >= DAY_US), key=lambda h: -abs(offsets[h]))
    if far:
        h = far[0]
        out.append(f"host {h}'s clock is {abs(offsets[h]) / DAY_US:,.0f} days "
                   f"{'behind' if offsets[h] < 0 else 'ahead of'} the reference host {ref}'s"
                   + (f" ({len(far)} hosts are a day or more off)" if len(far) > 1 else "")
                   + "; its times are moved by the offset")
    med = {k: statistics.median(v) for k, v in by_key.items() if len(v) >= 3}
    if len(med) < 3:
        return out
    # On one host (one clock) a rank whose collectives end a little late is
    # its own timing (a later completion), not a clock's: only a file off by
    # about one collective's gap (half the median gap between consecutive
    # collectives) counts its collectives differently.
    one_host = len({r["host"] for r in files if r["host"] in offsets}) < 2
    ends = sorted(med.values())
    gaps = [b - a for a, b in zip(ends, ends[1:]) if b > a]
    shift_floor = statistics.median(gaps) / 2 if one_host and gaps else 0
    devs = []  # (|median distance of a file's ends from the others'|, file)
    for r in files:
        if r["host"] not in offsets:
            continue
        s = int64s(r["sync"])
        dev = [s[i + 1] - offsets[r["host"]] - med[s[i]]
               for i in range(0, len(s), 2) if s[i] in med]
        if len(dev) >= 3:
            devs.append((abs(statistics.median(dev)), r))
    if len(devs) < 3:
        return out
    typical = statistics.median(d for d, _ in devs)
    d, r = max(devs, key=lambda x: x[0])
    if d >= max(10 * typical, 1000, shift_floor):
        who = f"rank {own_rank(r)}" if own_rank(r) is not None else r["path"]
        out.append(f"{who}: its collectives end {common.fmt_us(d)} away from the same ones on "
                   "the other ranks (typical spread "
                   f"{common.fmt_us(typical)}): are its sequence numbers shifted?")
    return out


def describe_alignment(a: Dict[str, Any]) -> List[str]:
    """The lines merge, view and report print about the alignment."""
    lines = [f"warning: clock alignment: {w}" for w in a.get("warnings", [])]
    if a["reference"] is None:
        if len(a["hosts"]) > 1:
            lines.append(f"clock alignment: {len(a['hosts'])} hosts but no collectives with "
                         "group/seq args to align them on; times left as recorded")
        return lines
    if len(a["offsets_us"]) > 1:
        offs = ", ".join(f"{h} {v / 1e3:+.3f} ms ({a['matched'][h]} collectives)"
                         for h, v in a["offsets_us"].items() if h != a["reference"])
        lines.append(f"clock alignment: reference host {a['reference']}; offsets {offs}")
    if a["unaligned"]:
        lines.append("clock alignment: no collective shared with the others, left as "
                     f"recorded: {', '.join(a['unaligned'])}")
    if a["spread_us"]:
        sp = a["spread_us"]
        lines.append(f"collective ends after alignment: spread median "
                     f"{common.fmt_us(sp['median'])}, p95 {common.fmt_us(sp['p95'])}, "
                     f"max {common.fmt_us(sp['max'])} over {a['collectives']} collectives")
    if a["clock_drift_us"] >= 1000:
        lines.append(f"clock drift: the wall clock moved up to "
                     f"{common.fmt_us(a['clock_drift_us'])} against a trace clock during the run "
                     "(the `clock` events)")
    return lines


def file_offsets(results: Iterable[Result], a: Dict[str, Any]) -> Dict[str, int]:
    """path -> us to add to its ts."""
    return {r["path"]: -int(a["offsets_us"].get(r["host"], 0)) for r in results if ok(r)}
