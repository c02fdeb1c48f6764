import os
import sys

import pytest

# Tests import the helper as a plain module.
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No DFTRACER_* setting leaks from the caller's environment into a test."""
    for key in list(os.environ):
        if key.startswith("DFTRACER_"):
            monkeypatch.delenv(key, raising=False)
