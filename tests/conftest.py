import os
import sys

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


def pytest_report_header(config):
    import dftracer

    return f"dftracer {dftracer.__version__} from {os.path.dirname(dftracer.__file__)}"


def pytest_sessionstart(session):
    """With DFTRACER_TEST_INSTALLED=1 (set by the Makefile's installed-package
    runs), stops at once when dftracer is the source tree's own folder."""
    if os.environ.get("DFTRACER_TEST_INSTALLED") != "1":
        return
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
