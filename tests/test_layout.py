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
    # the step code takes where its untraced time went from hang/'s sampler
    "torch": {"format", "core", "binding", "hang"},
    "io": {"format", "core"},
    "gpu": {"format", "core"},
    "hang": {"format", "core"},
    "reader": {"format"},
    # C++ built against the program's torch (not in _core): the DDP hook's API only
    "libtorch": {"torch"},
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
            if f.endswith((".c", ".h", ".cpp")):
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


# ---- one source of truth, and the map true to the code (issue 38) ------------------

DOC = os.path.join(ROOT, "docs", "architecture.md")
LINE_LIMIT = 720


def _doc():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _folder_sections(doc):
    """Each folder's part of the page: its `**`folder/`...**` paragraph(s) up
    to the next folder's; `testing` is "The test extension", "" the top."""
    out = {}
    heads = list(re.finditer(r"^\*\*(?:`([a-z]+)/`|Top)[^\n]*", doc, re.M))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else doc.find("\n## ", m.end())
        out[m.group(1) or ""] = doc[m.start():end if end > 0 else len(doc)]
    t = doc.find("## The test extension")
    out["testing"] = doc[t:doc.find("\n## ", t + 1)] if t >= 0 else ""
    return out


def test_the_architecture_page_names_every_file_in_its_folder():
    """Folder-aware: `module.c` counts for a folder only in that folder's
    paragraph (or written as `folder/module.c`)."""
    doc = _doc()
    sections = _folder_sections(doc)
    missing = []
    for p in sources():
        folder, name = os.path.dirname(p), os.path.basename(p)
        if f"`{p}`" in doc or f"src/{p}" in doc or f"`{name}`" in sections.get(folder, ""):
            continue
        where = f"the **`{folder}/`** paragraph" if folder else "the **Top** paragraph"
        missing.append(f"src/{p}: name `{name}` in {where} of docs/architecture.md")
    assert not missing, "files the map does not name:\n" + "\n".join(sorted(missing))


def _long_files():
    for top in ("src", "dftracer"):
        for root, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".py")):
                    path = os.path.join(root, f)
                    with open(path, encoding="utf-8") as fh:
                        n = sum(1 for _ in fh)
                    if n > LINE_LIMIT:
                        yield f"{os.path.relpath(path, ROOT)}: {n} lines"


def test_no_source_file_passes_the_line_limit():
    if not os.path.isdir(SRC):
        pytest.skip("no source tree next to the tests (installed-package run)")
    long = sorted(_long_files())
    assert not long, f"source files over {LINE_LIMIT} lines (split them):\n" + "\n".join(long)


# Python modules of dftracer/tools/ that hold a rule the others import.
RULE_OWNERS = {"classes.py", "rank_rule.py", "trace_name.py", "line_keys.py"}
CLASS_NAMES = {"compute", "data", "io", "comm", "checkpoint", "other"}
IO_CALL_NAMES = {"read", "write", "pread", "pwrite", "fread", "fwrite", "pread64", "readv"}


def _tools_copies(path, text):
    import ast

    tree = ast.parse(text)
    found = []
    for node in ast.walk(tree):
        strings = []
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            vals = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if len(set(vals) & CLASS_NAMES) >= 2 and not set(keys) <= CLASS_NAMES:
                found.append(f"line {node.lineno}: an event-class table")
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(strings & IO_CALL_NAMES) >= 3:
                found.append(f"line {node.lineno}: a table of I/O calls")
            if len(strings & CLASS_NAMES) >= 4:
                found.append(f"line {node.lineno}: a list of the event classes")
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            returned = {r.value.value for r in ast.walk(node) if isinstance(r, ast.Return)
                        and isinstance(r.value, ast.Constant) and r.value.value in CLASS_NAMES}
            if len(returned) >= 3:
                found.append(f"line {node.lineno}: an event classifier")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compile" and node.args:
            a = node.args[0]
            pat = a.value if isinstance(a, ast.Constant) else ""
            pat = pat.decode("latin-1") if isinstance(pat, bytes) else str(pat)
            if re.search(r"rank", pat, re.I):
                found.append(f"line {node.lineno}: a rank pattern")
            if "pfw" in pat:
                found.append(f"line {node.lineno}: a trace file name pattern")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                ("*-app.pfw" in node.value or "app\\.pfw" in node.value):
            found.append(f"line {node.lineno}: a trace file name pattern ({node.value!r})")
        if isinstance(node, ast.JoinedStr) and path != "common.py" and any(
                isinstance(a, ast.FormattedValue) and isinstance(b, ast.Constant)
                and re.match(r" ?[KMGT]iB\b", str(b.value)) for a, b in zip(node.values, node.values[1:])):
            found.append(f"line {node.lineno}: bytes formatted by hand (common.fmt_bytes)")
        if isinstance(node, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and "-app.pfw" in str(v.value) for v in node.values):
            found.append(f"line {node.lineno}: a trace file name built by hand")
    return found


def test_tools_hold_no_copy_of_a_rule():
    """No module of dftracer/tools/ defines an event-class table, a table of
    I/O calls, a rank pattern or a trace-file-name pattern of its own: they
    import classes.py (reader/classify.c), rank_rule.py, trace_name.py."""
    tools = os.path.join(ROOT, "dftracer", "tools")
    if not os.path.isdir(tools):
        pytest.skip("no source tree")
    bad = []
    for f in sorted(os.listdir(tools)):
        if f.endswith(".py") and f not in RULE_OWNERS:
            with open(os.path.join(tools, f), encoding="utf-8") as fh:
                bad += [f"dftracer/tools/{f} {w}" for w in _tools_copies(f, fh.read())]
    assert not bad, "copies of a rule in dftracer/tools/:\n" + "\n".join(bad)


def _core_includes():
    """{file.c: the core headers it includes, but its own}."""
    out = {}
    core = os.path.join(SRC, "core")
    for f in sorted(os.listdir(core)):
        if f.endswith(".c"):
            with open(os.path.join(core, f), encoding="utf-8") as fh:
                incs = {i[len("core/"):] for i in INCLUDE.findall(fh.read()) if i.startswith("core/")}
            out[f] = incs - {f[:-2] + ".h", "core.h", "state.h"}
    return out


def _core_graph_in_doc():
    """The "Core includes" list of docs/architecture.md: `file.c`: `a.h`, `b.h`."""
    doc = _doc()
    start = doc.find("<!-- core includes -->")
    end = doc.find("<!-- /core includes -->")
    assert start >= 0 and end > start, "docs/architecture.md has no core includes list"
    out = {}
    for line in doc[start:end].splitlines():
        m = re.match(r"- `([a-z_]+\.c)`(?::|\s*→)\s*(.*)", line.strip())
        if m:
            out[m.group(1)] = set(re.findall(r"`([a-z_]+\.h)`", m.group(2)))
    return out


def test_the_core_call_graph_in_the_doc_is_the_includes():
    """docs/architecture.md lists, for every core file, the core headers it
    includes (besides its own, core.h and state.h): the calls it makes
    inside core/.  The list is the code's."""
    if not os.path.isdir(SRC):
        pytest.skip("no source tree")
    code, doc = _core_includes(), _core_graph_in_doc()
    diff = []
    for f in sorted(set(code) | set(doc)):
        if f not in doc:
            diff.append(f"core/{f}: not in the list; it includes {sorted(code[f]) or 'nothing'}")
        elif f not in code:
            diff.append(f"core/{f}: listed but no such file")
        elif code[f] != doc[f]:
            diff.append(f"core/{f}: the list says {sorted(doc[f])}, the code includes {sorted(code[f])}")
    assert not diff, "docs/architecture.md's core includes against the code:\n" + "\n".join(diff)


def test_core_circles_are_the_documented_ones():
    """The include graph of core/ (file -> the .c of each header it includes)
    has no circle but those docs/architecture.md names as the design."""
    if not os.path.isdir(SRC):
        pytest.skip("no source tree")
    inc = _core_includes()
    graph = {f: {h[:-2] + ".c" for h in hs if h[:-2] + ".c" in inc} for f, hs in inc.items()}
    circles = set()

    def walk(node, path):
        for nxt in graph[node]:
            if nxt in path:
                cyc = path[path.index(nxt):]
                k = cyc.index(min(cyc))
                circles.add(tuple(cyc[k:] + cyc[:k]))
            elif len(path) < 6:
                walk(nxt, path + [nxt])

    for f in graph:
        walk(f, [f])
    doc = _doc()
    start, end = doc.find("<!-- core circles -->"), doc.find("<!-- /core circles -->")
    assert start >= 0 and end > start, "docs/architecture.md has no core circles list"
    named = set()
    for line in doc[start:end].splitlines():
        files = re.findall(r"`([a-z_]+\.c)`", line)
        if files:
            k = files.index(min(files))
            named.add(tuple(files[k:] + files[:k]))
    assert circles == named, (f"circles in core/ {sorted(circles)}; "
                              f"docs/architecture.md names {sorted(named)}")


def header_arrows():
    """{source.c: the sources named by the headers it includes}: each
    `#include "x/y.h"` (and the headers that one includes, in turn) is an
    arrow to `x/y.c` when there is one.  The tree's drawing by names, which
    tests/test_callgraph.py holds to the calls."""
    files = {}
    for rel in sources():
        with open(os.path.join(SRC, rel), encoding="utf-8") as fh:
            files[rel] = INCLUDE.findall(fh.read())

    def resolve(inc, frm):
        for cand in (inc, os.path.join(os.path.dirname(frm), inc)):
            if cand in files:
                return cand
        return None

    out = {}
    for f in files:
        if not f.endswith(".c"):
            continue
        seen, todo, arrows = set(), [resolve(i, f) for i in files[f]], set()
        while todo:
            h = todo.pop()
            if not h or h in seen:
                continue
            seen.add(h)
            named = h[:-2] + ".c"
            if named in files and named != f:
                arrows.add(named)
            todo += [resolve(i, h) for i in files[h]]
        out[f] = arrows
    return out


def test_the_include_drawing_has_no_circle():
    """The tree drawn by its includes alone (header_arrows: a header stands
    for the file it is named for) has no circle: a header shared by several
    files is named for none of them (profile/fn_object.h, reader/iostats_result.h),
    and one declaring another file's code is named for that file
    (torch/autotrace_comm.h, reader/ranks_steps.h, core/writer_file.h)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_callgraph import _circles, _show

    found = _circles(header_arrows())
    assert not found, f"circles the includes draw: {_show(found)}"
