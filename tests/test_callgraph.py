"""The calls of the C sources, read from their symbols, and the imports of
the Python package (docs/architecture.md, "Calls, from symbols"): each source under src/ is compiled on its own and
`nm` says which functions and data it defines and which it uses; a use of a
symbol another file defines is an arrow from that file to the other (a call,
or a read of its state), whether a header declares it or not. Two rules:

- no arrow leaves a folder for one it may not include (tests/test_layout.py,
  ALLOWED): calls go down the layers, never back up;
- the circles (files that reach each other through arrows) are exactly the
  ones the map names, each with its reason: a new one fails here, and so does
  one the map still names after it is gone.

The same for the package's imports (any import, at the top or in a
function, of a module of the package): its circles are the ones the map
names; together with the C ones, at most 4."""

from __future__ import annotations

import os
import ast
import re
import shlex
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Set

import pytest

from test_layout import ALLOWED, ROOT, SRC

DOC = os.path.join(ROOT, "docs", "architecture.md")


def _sources() -> List[str]:
    out = []
    for root, _, files in os.walk(SRC):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), SRC)
            if f.endswith(".c"):  # testing/ too: compiled as the test extension is
                out.append(rel)
    return sorted(out)


def _symbols(tmp: str) -> Dict[str, Dict[str, Set[str]]]:
    """{source: {"defines": ..., "uses": ...}} of every source, compiled
    without optimisation (what it calls is what it names)."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not shutil.which(cc[0]) or not shutil.which("nm"):
        pytest.skip("no C compiler or nm here")
    flags = ["-std=c11", "-O0", "-w", "-c", "-D_GNU_SOURCE", '-DDFT_VERSION="0"', "-I" + SRC,
             "-I" + sysconfig.get_paths()["include"]]

    def one(rel: str) -> Dict[str, Set[str]]:
        obj = os.path.join(tmp, rel.replace(os.sep, "__") + ".o")
        testing = ["-DDFT_TESTING=1"] if rel.startswith("testing" + os.sep) else []
        proc = subprocess.run(cc + flags + testing + [os.path.join(SRC, rel), "-o", obj],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{rel} does not compile on its own:\n{proc.stderr}"
        nm = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        defines, uses = set(), set()
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRC":
                defines.add(parts[2])
            elif len(parts) == 2 and parts[0] == "U":
                uses.add(parts[1])
        return {"defines": defines, "uses": uses}

    srcs = _sources()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        return dict(zip(srcs, ex.map(one, srcs)))


@pytest.fixture(scope="module")
def arrows(tmp_path_factory) -> Dict[str, Set[str]]:
    if not os.path.isdir(SRC):
        pytest.skip("no source tree next to the tests (installed-package run)")
    syms = _symbols(str(tmp_path_factory.mktemp("objs")))
    owner: Dict[str, str] = {}
    for src, s in syms.items():
        for name in s["defines"]:
            owner[name] = src
    graph: Dict[str, Set[str]] = {src: set() for src in syms}
    for src, s in syms.items():
        graph[src] |= {owner[u] for u in s["uses"] if u in owner and owner[u] != src}
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100, "too few arrows: nm read nothing?"
    return graph


def _circles(graph: Dict[str, Set[str]]) -> Set[frozenset]:
    """The strongly connected sets of two files or more (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: Set[frozenset] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    found.add(frozenset(comp))
    return found


def test_calls_never_go_back_up_a_layer(arrows):
    bad = []
    for src, callees in sorted(arrows.items()):
        here = os.path.dirname(src)
        if here in ("", "testing"):  # the module registers every layer
            continue
        for dst in sorted(callees):
            there = os.path.dirname(dst)
            if there != here and there not in ALLOWED[here]:
                bad.append(f"src/{src} calls into src/{dst}: {here}/ may not reach {there or 'src'}/")
    assert not bad, "\n".join(bad)


def _named(marker: str, pattern: str) -> Set[frozenset]:
    """The circles docs/architecture.md lists between <!-- marker --> and
    <!-- /marker -->: one "- " entry each, its files before the first colon."""
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    start, end = doc.find(f"<!-- {marker} -->"), doc.find(f"<!-- /{marker} -->")
    assert start >= 0 and end > start, f"docs/architecture.md has no {marker} list"
    named = set()
    for entry in doc[start:end].split("\n- ")[1:]:
        files = re.findall(pattern, entry.split(":", 1)[0])  # the list, then why
        assert files, f"a circle without files: {entry!r}"
        named.add(frozenset(files))
    return named


def _show(cs: Set[frozenset]) -> List[List[str]]:
    return sorted(sorted(c) for c in cs)


C_FILE = r"`([a-z_]+/[a-z_]+\.c)`"
PY_FILE = r"`([a-z_/]+\.py)`"
EXTENSIONS = {"dftracer._core"}  # compiled: no .py, and it imports nothing of the package


def test_the_circles_are_the_ones_the_map_names(arrows):
    named = _named("call circles", C_FILE)
    found = _circles(arrows)
    assert len(named) + len(_named("import circles", PY_FILE)) <= 4, \
        "the map names more circles than the 4 the design allows"
    assert found == named, (f"circles in the calls: {_show(found)}\n"
                            f"docs/architecture.md names: {_show(named)}")


def _imports() -> Dict[str, Set[str]]:
    """{module file (dftracer/...py): the package's module files it imports}."""
    pkg = os.path.join(ROOT, "dftracer")
    mods: Dict[str, str] = {}
    for root, _, files in os.walk(pkg):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), ROOT)
                name = rel[:-3].replace(os.sep, ".")
                mods[name[:-len(".__init__")] if name.endswith(".__init__") else name] = rel
    graph: Dict[str, Set[str]] = {rel: set() for rel in mods.values()}
    for name, rel in mods.items():
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        here = name if rel.endswith("__init__.py") else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:  # a submodule, else the module the name is in
                    sub = f"{base}.{a.name}"
                    if sub not in EXTENSIONS:
                        targets.append(sub if sub in mods else base)
            graph[rel] |= {mods[t] for t in targets if t in mods and mods[t] != rel}
    return graph


def test_python_import_circles_are_the_ones_the_map_names():
    if not os.path.isdir(os.path.join(ROOT, "dftracer")):
        pytest.skip("no package tree")
    graph = _imports()
    assert sum(map(len, graph.values())) > 50, "too few imports read"
    found = {frozenset(c) for c in _circles(graph)}
    named = _named("import circles", PY_FILE)
    assert found == named, (f"circles in the imports: {_show(found)}\n"
                            f"docs/architecture.md names: {_show(named)}")


def test_the_drawing_of_the_tree_shows_the_circles_the_calls_have(arrows):
    """The tree as a reader draws it (issue 71): each source to the file each
    header it includes is named for (`x/y.h` -> `x/y.c`, through the headers
    it includes in turn), together with the calls.  A header named for a file
    that does not own its code (its inlines calling another, a declaration
    another file defines) draws a circle the calls do not have; so every
    circle of the drawing must be one of the calls'."""
    from test_layout import header_arrows

    drawn = header_arrows()
    assert set(arrows) <= set(drawn), set(arrows) - set(drawn)
    both = {f: arrows[f] | drawn.get(f, set()) for f in arrows}
    extra = {c for c in _circles(both)} - _circles(arrows)
    assert not extra, (f"circles the includes draw and the calls do not have: {_show(extra)}\n"
                       "(a header named for one file, declaring or calling another's code)")
    assert len(_circles(both)) <= 3
