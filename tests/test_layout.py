"""src/ is layered (docs/architecture.md): a file includes headers only from
its own folder and the folders below it, so the core knows no integration,
the integrations know the core, and the reader stands apart on the format.
The core's state is private to core/: the layers above see it through
core/core.h (and the self-contained clock, config and compress headers)."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")

# What each folder may include (besides itself and the public dftracer.h).
ALLOWED = {
    "format": set(),
    "core": {"format"},
    "binding": {"format", "core"},
    "profile": {"format", "core", "binding"},
    "torch": {"format", "core", "binding"},
    "io": {"format", "core"},
    "gpu": {"format", "core"},
    "hang": {"format", "core"},
    "reader": {"format"},
    # the test extension (never in the wheel) sits above everything
    "testing": {"format", "core", "binding", "profile", "torch", "io", "gpu", "hang", "reader"},
}
# The integration table is for module.c and the integrations registering in it.
TABLE_USERS = {"profile", "torch", "io", "gpu", "hang", "reader", "testing", ""}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The core headers other folders may include; the rest of core/ is private.
CORE_FACE = {"core/core.h", "core/clock.h", "core/config.h", "core/compress.h"}
# The core's global state: named only inside core/.
CORE_STATE = re.compile(r"\bdft_(g|trace)\b")


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


def test_core_state_is_private():
    """Outside core/, files reach the core through core/core.h's functions:
    none includes another core header or names the core's global state."""
    bad = []
    for path in sources():
        if path.startswith("core" + os.sep):
            continue
        with open(os.path.join(SRC, path), encoding="utf-8") as f:
            text = f.read()
        bad += [f"{path} includes {inc}" for inc in INCLUDE.findall(text)
                if inc.startswith("core/") and inc not in CORE_FACE]
        bad += [f"{path}:{text.count(chr(10), 0, m.start()) + 1} names {m.group(0)}"
                for m in CORE_STATE.finditer(text)]
    assert not bad, "the core's private state used outside core/:\n" + "\n".join(bad)


def test_the_architecture_page_names_every_source_file():
    """docs/architecture.md is the map of src/: every file is named there (as
    `name` in its folder's paragraph, or as `folder/name`)."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    missing = [p for p in sources()
               if f"`{os.path.basename(p)}`" not in doc and f"`{p}`" not in doc
               and f"src/{p}" not in doc]
    assert not missing, "not named in docs/architecture.md: " + ", ".join(sorted(missing))
