"""One trace reader per language (docs/architecture.md): every pass over
trace files is C (src/reader/); the Python under dftracer/tools/ never
inflates a trace itself, but for the live tail (`follow.py`, which reads
only the members appended since its last look) and `merge.py`, which
decompresses its own temporary parts (written by the C rewriter) into a
plain output. A new gzip or zlib reader anywhere else fails here."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "dftracer", "tools")
ALLOWED = {"follow.py", "merge.py"}
INFLATE = {("gzip", "open"), ("gzip", "GzipFile"), ("gzip", "decompress"),
           ("zlib", "decompress"), ("zlib", "decompressobj")}


def readers(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                (node.value.id, node.attr) in INFLATE:
            found.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module in ("gzip", "zlib"):
            found += [f"from {node.module} import {a.name} (line {node.lineno})" for a in node.names
                      if (node.module, a.name) in INFLATE]
    return found


def test_no_tool_module_inflates_a_trace_but_the_live_tail():
    assert os.path.isdir(TOOLS)
    bad = {}
    for f in sorted(os.listdir(TOOLS)):
        if f.endswith(".py") and f not in ALLOWED:
            hits = readers(os.path.join(TOOLS, f))
            if hits:
                bad[f] = hits
    assert not bad, f"Python readers of gzip outside the live tail: {bad}"
    # the check sees what it looks for: the live tail does inflate
    assert readers(os.path.join(TOOLS, "follow.py"))
