"""src/ is layered (docs/architecture.md): a file includes headers only from
its own folder and the folders below it, so the core knows no integration,
the integrations know the core, and the reader stands apart on the format."""
import os
import re

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# What each folder may include (besides itself and the public dftracer.h).
ALLOWED = {
    "format": set(),
    "core": {"format"},
    "binding": {"format", "core"},
    "profile": {"format", "core", "binding"},
    "torch": {"format", "core", "binding"},
    "io": {"format", "core"},
    "gpu": {"format", "core"},
    "reader": {"format"},
}
# The integration table is for module.c and the integrations registering in it.
TABLE_USERS = {"profile", "torch", "io", "gpu", "reader", ""}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    if not os.path.isdir(SRC):
        pytest.skip("no source tree next to the tests (installed-package run)")
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(root, f), SRC)


def test_every_source_is_in_a_known_folder():
    folders = {os.path.dirname(p) for p in sources()}
    assert folders <= set(ALLOWED) | {""}, folders - set(ALLOWED)
    top = sorted(p for p in sources() if not os.path.dirname(p))
    assert top == ["dftracer.h", "integrations.h", "module.c"]


def test_includes_follow_the_layers():
    bad = []
    for path in sources():
        here = os.path.dirname(path)
        with open(os.path.join(SRC, path), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            there = os.path.dirname(inc)
            if inc == "dftracer.h":
                continue
            if inc == "integrations.h":
                if here not in TABLE_USERS:
                    bad.append(f"{path} includes {inc}")
                continue
            assert os.path.exists(os.path.join(SRC, inc)), f"{path}: {inc} names no file under src/"
            if here and there != here and there not in ALLOWED[here]:
                bad.append(f"{path} includes {inc}")
    assert not bad, "includes against the layers:\n" + "\n".join(bad)
