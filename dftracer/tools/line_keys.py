"""The line's keys in the one order every line dftracer writes carries them
(docs/trace-format.md, "Event kinds"): the Python twin of format/lines.h's
DFT_LINE_* constants, which the writer and the C reader's fast path use.
`dumps` writes an event in that order; `top`'s line pattern is built from it.
`unescape` reads a string back as the C passes hand it over (the one rule
for every reader here)."""

from __future__ import annotations

import json
from typing import Any, Dict

LINE_KEYS = ("id", "name", "cat", "pid", "tid", "ts", "dur", "ph", "s", "args")


def dumps(event: Dict[str, Any], ensure_ascii: bool = True) -> str:
    """One compact JSON line of event, its keys in LINE_KEYS order (any
    other key after them)."""
    ordered = {k: event[k] for k in LINE_KEYS if k in event}
    ordered.update((k, v) for k, v in event.items() if k not in ordered)
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=ensure_ascii)


def unescape(s: str) -> str:
    """A string as the C passes keep it (its JSON escapes as written), decoded;
    one that does not decode (cut inside an escape, the older tools' raw
    backslashes) as it is."""
    if "\\" not in s:
        return s
    try:
        return json.loads('"' + s + '"')
    except ValueError:
        return s
