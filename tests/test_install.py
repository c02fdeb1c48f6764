"""The installed package is the source tree's package (issue 14).

Run by `make test` / `make test-wheels` against the wheel installed into a
venv (DFTRACER_TEST_INSTALLED=1): every file of dftracer/ is in the installed
distribution and nothing else is; the version has one source; the Python
versions the metadata claims are the ones the Makefile builds and tests; a
second distribution of the `dftracer` package is reported once; the frame hook
turns itself off on a Python newer than it was tested on.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from importlib import metadata

import pytest

import dftracer
from dftracer import _conflicts, _core, _version
from tracefile import find_traces, read_trace, run_python

DIST = "dftracer-native"
SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_SRC = os.path.join(SOURCE_TREE, "dftracer")
INSTALLED = os.environ.get("DFTRACER_TEST_INSTALLED") == "1"  # read before _clean_env
BUILT = re.compile(r"(^|/)__pycache__(/|$)|\.(so|o|py[co])$")
EXT = "dftracer/_core" + sysconfig.get_config_var("EXT_SUFFIX")
# The native DDP hook's sources, which setup.py copies from src/ into the
# package (built on the user's machine: docs/ai.md, "The native DDP hook").
NATIVE = {f"dftracer/_autotrace/native/{p}": f"src/{p}"
          for p in ("libtorch/ddp_native.cpp", "torch/ddp_native_api.h")}


def _installed_dist():
    """The dftracer-native distribution that `import dftracer` comes from, or
    None when dftracer is imported from a build on PYTHONPATH (make test-dev)."""
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        dist = None
    # an installed one has a RECORD (a build's egg-info in the source tree has not)
    if dist is not None and dist.read_text("RECORD") is not None:
        init = os.path.realpath(str(dist.locate_file("dftracer/__init__.py")))
        if init == os.path.realpath(dftracer.__file__):
            return dist
    if INSTALLED:
        pytest.fail(f"DFTRACER_TEST_INSTALLED=1 but dftracer ({dftracer.__file__}) is not "
                    f"the installed {DIST} distribution")
    pytest.skip(f"dftracer is not imported from an installed {DIST} (in-place build)")


def _source_files():
    """dftracer/... paths of every file of the package in the source tree."""
    out = set()
    for folder, dirs, files in os.walk(PACKAGE_SRC):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), SOURCE_TREE).replace(os.sep, "/")
            if not BUILT.search(rel):
                out.add(rel)
    return out


def test_installed_distribution_holds_exactly_the_source_tree_package():
    dist = _installed_dist()
    installed = set()
    for f in dist.files:
        p = str(f).replace(os.sep, "/")
        if p.startswith("dftracer/") and "__pycache__" not in p or p == "dftracer-preload.pth":
            installed.add(p)
    # the test extension (_dftracer_testcore) is never part of the package
    assert not [str(f) for f in dist.files if "testcore" in str(f)]
    expected = _source_files() | {"dftracer-preload.pth", EXT} | set(NATIVE)
    assert sorted(expected - installed) == [], "in the source tree, not installed"
    assert sorted(installed - expected) == [], "installed, not in the source tree"
    # ... with the same content: the suite runs the code of this tree
    for rel in sorted(expected - {EXT}):
        with open(os.path.join(SOURCE_TREE, NATIVE.get(rel, rel)), "rb") as a:
            with open(str(dist.locate_file(rel)), "rb") as b:
                assert a.read() == b.read(), f"{rel}: the installed file differs"
    assert os.path.realpath(_core.__file__) == os.path.realpath(str(dist.locate_file(EXT)))
    # the start-up hook sits in the site directory itself, where .pth files are read
    pth = str(dist.locate_file("dftracer-preload.pth"))
    assert os.path.dirname(pth) == os.path.dirname(os.path.dirname(dftracer.__file__))
    # and the console script is there
    assert [ep.value for ep in dist.entry_points if ep.name == "dftracer"] == ["dftracer.tools.cli:main"]


def test_subprocesses_import_the_same_package():
    proc = run_python("import dftracer, dftracer._core as c; print(dftracer.__file__); "
                      "print(c.__file__)")
    assert proc.stdout.split() == [dftracer.__file__, _core.__file__]
    out = subprocess.run([sys.executable, "-m", "dftracer", "--version"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    name, version, _ = _core._compression_backend()
    assert out.startswith(f"dftracer {_version.__version__} (deflate: line encoder + {name} {version}")
    # a build without ISA-L says so (README, Install)
    assert ("no ISA-L at build time" in out) == (name != "isal")


def test_version_has_one_source():
    assert re.fullmatch(r"\d+\.\d+\.\d+", _version.__version__)
    assert dftracer.__version__ == _core.__version__ == _version.__version__
    try:
        installed = metadata.version(DIST)
    except metadata.PackageNotFoundError:
        installed = None
    if INSTALLED or installed is not None:
        assert installed == _version.__version__


def _supported():
    with open(os.path.join(SOURCE_TREE, "Makefile"), encoding="utf-8") as f:
        m = re.search(r"^SUPPORTED := (.+)$", f.read(), re.M)
    assert m, "Makefile: no SUPPORTED line"
    return [tuple(int(x) for x in v.split(".")) for v in m.group(1).split()]


def test_python_versions_claimed_are_the_ones_built_and_tested():
    supported = _supported()
    meta = metadata.metadata(DIST) if INSTALLED else None
    if meta is None:
        pytest.importorskip("tomllib")
        import tomllib

        with open(os.path.join(SOURCE_TREE, "pyproject.toml"), "rb") as f:
            project = tomllib.load(f)["project"]
        requires, classifiers = project["requires-python"], project["classifiers"]
    else:
        requires, classifiers = meta["Requires-Python"], meta.get_all("Classifier")
    low = min(supported)
    assert requires == f">={low[0]}.{low[1]}"
    claimed = sorted(tuple(int(x) for x in c.rsplit(":: ", 1)[1].split("."))
                     for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert claimed == sorted(supported)
    assert sys.version_info[:2] in supported, "this Python is not one the Makefile tests"
    # the frame hook's tested range ends with the newest supported Python
    assert _core.FRAME_HOOK_MAX_PYTHON == max(supported)
    assert _core.FRAME_HOOK is True


# ---- another distribution of the `dftracer` package ------------------------

def _fake_dist(folder, leaf, name, version, meta="METADATA"):
    d = folder / leaf
    d.mkdir(parents=True)
    (d / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
    return d


def test_conflicts_finds_the_other_distributions_in_any_spelling(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _fake_dist(a, "pydftracer-2.0.6.dist-info", "pydftracer", "2.0.6")
    _fake_dist(a, "dftracer_native-0.2.0.dist-info", "dftracer-native", "0.2.0")  # this one
    _fake_dist(a, "dftracer_tools-1.0.dist-info", "dftracer-tools", "1.0")  # another name
    _fake_dist(b, "DFTracer-2.2.0-py3.11.egg-info", "DFTracer", "2.2.0", meta="PKG-INFO")
    _fake_dist(b, "pydftracer.egg-info", "pydftracer", "1.0.0", meta="PKG-INFO")  # 2nd: once
    found = _conflicts.find([str(a), str(tmp_path / "missing"), str(b)])
    assert [(n, v) for n, v, _ in found] == [("pydftracer", "2.0.6"), ("dftracer", "2.2.0")]
    assert found[0][2] == str(a / "pydftracer-2.0.6.dist-info")
    assert _conflicts.find([str(tmp_path / "missing")]) == []


def _import_with(path_entry):
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [path_entry, os.environ.get("PYTHONPATH")])),
           "PYTHONWARNINGS": "default"}
    code = """
        import dftracer
        import dftracer.python
        from dftracer.python import dftracer as logger, ai
        import importlib; importlib.import_module("dftracer.tools.summary")
    """
    return run_python(code, env=env)


def test_import_warns_once_when_pydftracer_is_installed_too(tmp_path):
    _fake_dist(tmp_path, "pydftracer-2.0.6.dist-info", "pydftracer", "2.0.6")
    lines = [ln for ln in _import_with(str(tmp_path)).stderr.splitlines() if "RuntimeWarning" in ln]
    assert len(lines) == 1, lines
    assert "pydftracer 2.0.6 distribution" in lines[0]
    assert str(tmp_path / "pydftracer-2.0.6.dist-info") in lines[0]
    assert "pip uninstall -y pydftracer dftracer-native" in lines[0]


def test_import_is_silent_without_another_distribution(tmp_path):
    assert "RuntimeWarning" not in _import_with(str(tmp_path)).stderr


# ---- the frame hook on a Python newer than it was tested on ---------------

def test_frame_hook_turns_itself_off_on_an_untested_python(tmp_path):
    """Builds the extension as if this Python were newer than the hook's
    tested range (DFTRACER_FRAME_HOOK_MAX_PY below it): it builds and imports,
    tracing works, _core.FRAME_HOOK is False and @dynamo.compile's entry
    says so once, naming this version."""
    pytest.importorskip("setuptools")
    if "DFTRACER_TEST_WHEEL" in os.environ and sys.version_info[:2] != max(_supported()):
        # a whole build (~90 s): `make test` runs it, and test-wheels on the
        # newest Python, the next one's neighbour (the guard is the same C)
        pytest.skip("make test and the newest Python's wheel run this build")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    if not os.path.exists(os.path.join(SOURCE_TREE, "setup.py")):
        pytest.skip("no source tree")
    lib = tmp_path / "lib"
    older = (sys.version_info[0], sys.version_info[1] - 1)  # the "newest tested" Python
    env = dict(os.environ, DFTRACER_FRAME_HOOK_MAX_PY=hex(older[0] << 8 | older[1]),
               DFTRACER_BUILD_CUPTI="0")
    env.pop("DFTRACER_SANITIZE", None)
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build", "--build-base", str(tmp_path / "b"),
         "--build-lib", str(lib)], cwd=SOURCE_TREE, env=env, capture_output=True, text=True,
        timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    warned = [ln for ln in build.stderr.splitlines()
              if "warning" in ln.lower() and "byte-compiling is disabled" not in ln]
    assert warned == []
    # one line says which deflate library the build found (README, Install)
    said = [ln for ln in build.stderr.splitlines() if ln.startswith("dftracer build: ")]
    assert len(said) == 1 and ("ISA-L" in said[0] or "libdeflate" in said[0]
                               or "zlib" in said[0]), build.stderr[-2000:]
    code = f"""
        import sys, warnings
        import dftracer
        from dftracer import _core
        assert _core.__file__.startswith({str(lib)!r}), _core.__file__
        assert _core.FRAME_HOOK is False and _core.FRAME_HOOK_MAX_PYTHON == {older!r}
        assert not hasattr(_core, "_frame_hook_add")
        from dftracer.python import dftracer as logger, dynamo
        compiled = lambda: 1
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for _ in range(3):
                assert dynamo._traced_entry(compiled, compiled, 0) is compiled
        assert len(got) == 1, got
        print(got[0].category.__name__, got[0].message)
        log = logger.initialize_log({str(tmp_path / "trace.pfw")!r}, None, -1)
        log.log_event("still", "works", log.get_time(), 5)
        log.finalize()
    """
    # (from tmp_path: `python -c` puts the current folder first on sys.path)
    proc = run_python(code, env={"PYTHONPATH": str(lib), "DFTRACER_ENABLE": "1"},
                      cwd=str(tmp_path))
    have = ".".join(map(str, sys.version_info[:2]))
    assert proc.stdout.startswith(f"RuntimeWarning dftracer: the torch.compile frame hook is off "
                                  f"on Python {have} ("), proc.stdout
    assert f"tested up to Python {older[0]}.{older[1]})" in proc.stdout
    (path,) = find_traces(str(tmp_path))
    assert [e["name"] for e in read_trace(path).user_events()] == ["still"]


def test_a_build_folder_of_another_configuration_is_rebuilt(tmp_path):
    """setup.py records the build configuration (the deflate library's macros
    and libraries, the flags) next to the objects, and a build that finds
    another one recompiles every object instead of linking the old ones."""
    path = os.path.join(SOURCE_TREE, "setup.py")
    if not os.path.exists(path):
        pytest.skip("no source tree")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    spec = importlib.util.spec_from_file_location("dftracer_setup", path)
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)  # defines, does not build (setup() runs as __main__ only)
    temp = str(tmp_path / "temp")
    assert setup_py.build_config_changed(temp, "isal flags") is False  # a first build
    assert setup_py.build_config_changed(temp, "isal flags") is False  # the same again
    assert setup_py.build_config_changed(temp, "zlib flags") is True   # another library
    assert setup_py.build_config_changed(temp, "zlib flags") is False
    assert setup_py._BACKEND_LINE.startswith("dftracer build: ")


def _mapped_libraries(tmp_path):
    """Paths of the shared libraries a fresh interpreter maps once it has
    imported dftracer._core, and nothing else: this test process also has
    the test extension (_dftracer_testcore, linked against the system's
    library) loaded."""
    env = {"PYTHONPATH": ""}
    proc = run_python("""
        import dftracer._core
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and ".so" in parts[5]:
                    print(parts[5].strip())
        """, env=env, cwd=str(tmp_path))
    return set(proc.stdout.splitlines())


DEFLATE_LIBS = {"isal": "libisal", "libdeflate": "libdeflate"}


@pytest.mark.skipif(os.environ.get("DFTRACER_TEST_WHEEL") != "1",
                    reason="make test-wheels checks the wheels of `make wheel` (DFTRACER_TEST_WHEEL=1)")
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_the_wheel_carries_its_deflate_library(tmp_path):
    """A wheel built with ISA-L or libdeflate loads its own copy of the library
    (grafted by auditwheel into dftracer_native.libs/), not the system's: it
    must run where that library is not installed.  A zlib wheel loads neither."""
    dist = _installed_dist()
    backend = _core._compression_backend()[0]
    mapped = [p for p in _mapped_libraries(tmp_path)
              if os.path.basename(p).startswith(tuple(DEFLATE_LIBS.values()))]
    if backend == "zlib":
        assert mapped == []
        return
    libs_dir = os.path.realpath(str(dist.locate_file("dftracer_native.libs")))
    assert mapped, f"{DEFLATE_LIBS[backend]} is not loaded"
    for p in mapped:
        assert os.path.realpath(p).startswith(libs_dir + os.sep), \
            f"{p} is loaded from outside the wheel ({libs_dir})"
    recorded = [str(f) for f in dist.files if str(f).startswith("dftracer_native.libs/")]
    assert any(os.path.basename(r).startswith(DEFLATE_LIBS[backend]) for r in recorded)
