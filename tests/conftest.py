import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
SOURCE_TREE = os.path.dirname(TESTS)

# Tests import the helper as a plain module (tests/ holds no dftracer package).
sys.path.insert(0, TESTS)

# The package under test is whichever `import dftracer` finds: the installed
# wheel (make test, make test-wheels), an in-place build through PYTHONPATH
# (make test-dev) or the sanitized build (make test-asan).  Subprocesses that
# tests start inherit the environment, so they import the same one: tests must
# not put the source tree on PYTHONPATH themselves.


def _is_within(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


# The native DDP hook (dftracer/_autotrace/ddp_native.py) is built once per
# session into a cache of the session's own (XDG_CACHE_HOME, which every
# subprocess inherits), so every traced DDP model in the tests gets it, as a
# user's runs do after the first, and no test starts a background build.  Only
# sessions with tests that can run DDP build it (30 to 60 s): a file of these
# folders that names torch, DDP or FSDP (CI's backend runs of the reader and
# writer tests name none).  With DFTRACER_TEST_HOOK_CACHE (the Makefile's
# build/ddp-hook) the build is kept there, keyed as the hook keys it (its
# sources, torch, Python), and copied into the session's cache: one build
# serves every pytest run and CI phase until one of those changes.
_NATIVE = {"cache": "", "state": "not built (no DDP tests)"}
DDP_TESTS = ("torch_integration", "tools", "test_readme.py")


def pytest_collection_finish(session):
    if any(_may_run_ddp(p) for p in {str(item.path) for item in session.items}):
        _build_native_ddp_hook()


def _may_run_ddp(path: str) -> bool:
    if os.path.relpath(path, TESTS).split(os.sep)[0] not in DDP_TESTS:
        return False
    with open(path, "rb") as f:
        text = f.read().lower()
    return any(word in text for word in (b"torch", b"ddp", b"fsdp"))


def _build_native_ddp_hook() -> None:
    if importlib.util.find_spec("torch") is None:
        _NATIVE["state"] = "not built (no torch)"
        return
    kept = os.environ.get("DFTRACER_TEST_HOOK_CACHE", "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    start = time.monotonic()
    if kept:
        proc = subprocess.run([sys.executable, "-c", _KEPT_HOOK, os.path.abspath(kept), _NATIVE["cache"]],
                              env=env, capture_output=True, text=True, cwd=_NATIVE["cache"])
    else:
        proc = subprocess.run([sys.executable, "-m", "dftracer._autotrace.ddp_native", "build"],
                              env=env, capture_output=True, text=True, cwd=_NATIVE["cache"])
    took = time.monotonic() - start
    if proc.returncode == 0:
        _NATIVE["state"] = f"{'' if kept else 'built '}in {took:.0f} s: {proc.stdout.strip()}"
    else:
        _NATIVE["state"] = f"NOT built ({proc.stderr.strip()[-2000:]})"


# Builds the hook into the kept cache (argv[1]) unless the build for these
# sources, torch and Python is there, then copies it into the session's cache
# (argv[2]: XDG_CACHE_HOME), where the tests' processes look.
_KEPT_HOOK = """
import os, shutil, sys
from dftracer._autotrace import ddp_native
os.environ["DFTRACER_CACHE_DIR"] = sys.argv[1]
path = ddp_native.module_path()
how = "kept from an earlier run" if os.path.exists(path) else "built"
if not os.path.exists(path):
    ddp_native.build()
os.environ.pop("DFTRACER_CACHE_DIR")
dest = os.path.dirname(ddp_native.module_path())
shutil.copytree(os.path.dirname(path), dest, ignore=shutil.ignore_patterns(".build-*"))
print(how + ":", os.path.join(dest, os.path.basename(path)))
"""


def pytest_report_header(config):
    import dftracer

    return f"dftracer {dftracer.__version__} from {os.path.dirname(dftracer.__file__)}"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"native DDP hook {_NATIVE['state']}")


def pytest_sessionfinish(session, exitstatus):
    if _NATIVE["cache"]:
        shutil.rmtree(_NATIVE["cache"], ignore_errors=True)


def pytest_sessionstart(session):
    """With DFTRACER_TEST_INSTALLED=1 (set by the Makefile's installed-package
    runs), stops at once when dftracer is the source tree's own folder; gives
    the session its own cache (above)."""
    if os.environ.get("DFTRACER_TEST_INSTALLED") == "1":
        _check_installed()
    _NATIVE["cache"] = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="dftracer-cache-")


def _check_installed():
    import dftracer

    if _is_within(dftracer.__file__, os.path.join(SOURCE_TREE, "dftracer")):
        raise pytest.UsageError(
            f"DFTRACER_TEST_INSTALLED=1 but dftracer was imported from the source tree's "
            f"({dftracer.__file__}): run pytest from another folder, without PYTHONPATH")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No DFTRACER_* setting leaks from the caller's environment into a test."""
    for key in list(os.environ):
        if key.startswith("DFTRACER_"):
            monkeypatch.delenv(key, raising=False)
