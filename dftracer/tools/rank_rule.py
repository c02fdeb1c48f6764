"""The one rank rule of docs/trace-format.md ("Rank", "Ranks and clocks"), for
the Python readers (`dftracer top`, merge's file_info): src/reader/summary.c
(rank_of, rank_digits) applies the same rule in C, and
tests/tools/test_rank.py holds both to one table."""

from __future__ import annotations

import re
from typing import Any, Optional

RANK_MAX = 2**31 - 1  # ranks are C ints in MPI and torch.distributed

# the name is `rank <N>` or ends in ` rank <N>`
_RANK_SUFFIX = re.compile(r"(?:.* )?rank ([0-9]+)", re.DOTALL)


def _digits(text: str) -> Optional[int]:
    # past 10 significant digits it is too large: never handed to int()
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > 10:
        return None
    value = int(text)
    return value if value <= RANK_MAX else None


def rank_of_process_name(name: str) -> Optional[int]:
    """The rank in a process_name: the name is `rank <N>` or ends in
    ` rank <N>` (the tracer writes `<exec> rank <N>`); None when it has none."""
    m = _RANK_SUFFIX.fullmatch(name)
    return _digits(m.group(1)) if m else None


def rank_of_value(value: Any) -> Optional[int]:
    """The rank in the value of a `rank` metadata event (a JSON integer or a
    string of digits, 0..2147483647), or None (a float such as 1.5 or 1e999,
    a negative number, a bool, anything else)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= RANK_MAX else None
    return _digits(value) if isinstance(value, str) else None


def own_rank(result: Any) -> Optional[int]:
    """A C pass's result's own rank: the `rank` it read (-1: none), else the
    one in its process name (the ranks and I/O passes' Python sides)."""
    rank = result.get("rank", -1)
    if isinstance(rank, int) and rank >= 0:
        return rank
    return rank_of_process_name(result.get("process_name") or "")


def count_of_value(value: Any, least: int = 0) -> Optional[int]:
    """A `local_rank` (least 0) or `world_size` (least 1) by the same rule."""
    v = rank_of_value(value)
    return v if v is not None and v >= least else None
