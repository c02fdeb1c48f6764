"""Start-up hook for ``dftracer run`` from a source tree (no installed .pth).

``dftracer run`` puts this directory first on PYTHONPATH only when the
``dftracer-preload.pth`` file is not installed.  It starts tracing, then runs
the ``sitecustomize`` module this one shadows, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys

import dftracer._preload  # noqa: F401  (starts tracing when asked to)


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
