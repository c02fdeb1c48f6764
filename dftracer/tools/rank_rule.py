"""The one rank rule of docs/trace-format.md ("Rank", "Ranks and clocks"), for
the Python readers that parse events themselves (`dftracer top`):
src/reader/identity.c (dft_rank_of_process_name, dft_ident_own_rank) applies
the same rule in C for every pass, whose results carry it as `own_rank`
(merge, summary, the ranks, I/O and memory passes); tests/tools/test_rank.py
holds the C rule to one table of cases."""

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


def count_of_value(value: Any, least: int = 0) -> Optional[int]:
    """A `local_rank` (least 0) or `world_size` (least 1) by the same rule."""
    v = rank_of_value(value)
    return v if v is not None and v >= least else None
