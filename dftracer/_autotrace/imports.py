"""Waiting for a module to be imported (the torch hooks wait for ``torch``,
``torch._dynamo`` and the functional collectives): a finder first on
``sys.meta_path`` runs the callbacks once a watched module's code has run.
Imports nothing but ``sys``: the package imports it at start-up."""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List

def _initializing(module: Any) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _Watcher:
    """A meta-path finder that never loads anything itself: for a watched
    name it finds the real spec with the other finders and runs the
    callbacks once the module's code has run."""

    def __init__(self) -> None:
        self.pending: Dict[str, List[Callable[[], None]]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.pending:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        _after_exec(spec.loader, lambda: self.fire(name))
        return spec

    def fire(self, name: str) -> None:
        for callback in self.pending.pop(name, []):
            try:
                callback()
            except Exception:  # the import the program asked for must succeed
                pass
        if not self.pending:
            remove_watcher()


def _after_exec(loader: Any, done: Callable[[], None]) -> None:
    """Runs done() after loader.exec_module(module) succeeds, once.  The
    loader keeps its type (only an instance attribute is set, then removed)."""
    run = getattr(loader, "exec_module", None)
    if run is None:
        return

    def exec_module(module: Any) -> None:
        try:
            run(module)
        finally:
            try:
                del loader.exec_module
            except AttributeError:
                pass
        done()

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):  # a loader without a __dict__: not watched
        pass


_watcher = _Watcher()


def remove_watcher() -> None:
    try:
        sys.meta_path.remove(_watcher)
    except ValueError:
        pass


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Calls callback() once module `name` is imported: now if it already
    is, else right after its import finishes (errors in callback ignored)."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        try:
            callback()
        except Exception:
            pass
        return
    _watcher.pending.setdefault(name, []).append(callback)
    if _watcher not in sys.meta_path:
        sys.meta_path.insert(0, _watcher)
