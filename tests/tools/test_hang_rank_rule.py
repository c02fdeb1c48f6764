"""hang.scan (summary --ranks' hang rule) reads a process's rank by the one
rank rule of dftracer/tools/rank_rule.py (issue 38): it had a looser copy
that took any int (2**31, negative world sizes) and no rank given as a
string of digits."""

from __future__ import annotations

import json

import pytest

from dftracer.tools import hang, rank_rule


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
    ([("rank", {"value": 1, "source": "torch.distributed"}), ("rank", {"value": 2})], 1, None),
])
def test_scan_applies_the_rank_rule(tmp_path, meta, rank, world):
    got = hang.scan(_trace(tmp_path, *meta))
    assert (got["rank"], got["world_size"]) == (rank, world)
    for name, args in meta:  # the same answers as the rule itself
        if name == "rank" and rank_rule.rank_of_value(args["value"]) is None:
            assert got["rank"] != args["value"] or got["rank"] is None
