"""The hang post mortem reads a process's rank by the one rank rule of
docs/trace-format.md ("Rank", "Ranks and clocks"): the C ranks pass's
identity (src/reader/identity.c), the last valid `rank` event, else the
process_name.  It had a looser copy of its own (issue 38), then one where
the first plain rank won (issue 48)."""

from __future__ import annotations

import json

import pytest

from dftracer import _core
from dftracer.tools import hang


def _trace(tmp_path, *meta):
    lines = ["["]
    for i, (name, args) in enumerate(meta, 1):
        lines.append(json.dumps({"id": i, "name": name, "cat": "dftracer", "pid": 7, "tid": 7,
                                 "ph": "M", "args": args}, separators=(",", ":")))
    path = tmp_path / "t-h-7-app.pfw"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("meta, rank, world", [
    ([("process_name", {"name": "python rank 3"})], 3, None),
    ([("process_name", {"name": "python rank 99999999999"})], None, None),
    ([("process_name", {"name": "python rank 3"}), ("rank", {"value": "5"})], 5, None),
    ([("rank", {"value": 2**31})], None, None),
    ([("rank", {"value": -1})], None, None),
    ([("rank", {"value": 4, "world_size": 0})], 4, None),
    ([("rank", {"value": 4, "world_size": "8"})], 4, 8),
    ([("rank", {"value": 1, "source": "torch.distributed"}), ("rank", {"value": 2})], 2, None),
    ([("rank", {"value": 2, "source": "RANK"}), ("rank", {"value": "x"})], 2, None),
])
def test_post_mortem_applies_the_rank_rule(tmp_path, meta, rank, world):
    got = hang.procs_of([_core._rank_file(_trace(tmp_path, *meta))])[0]
    assert (got["rank"], got["world_size"]) == (rank, world)
