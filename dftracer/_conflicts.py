"""One warning at import when another distribution of the ``dftracer`` import
package is installed too.

dftracer-native, pydftracer and dftracer all install a top-level ``dftracer``
package; with two of them in one environment the files of whichever was
installed last win, and uninstalling either leaves a broken package.  This
scans the import path for the others' metadata folders directly (listing a few
folders costs microseconds; importlib.metadata, or even typing, would add
milliseconds to every traced process's start-up).
"""

from __future__ import annotations

import os
import sys
import warnings

#: Distributions other than this one that install the ``dftracer`` package.
OTHERS = ("pydftracer", "dftracer")


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _version(meta_dir: str) -> str:
    for leaf in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(meta_dir, leaf), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break
        except OSError:
            continue
    return "?"


def find(path: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(name, version, metadata folder) of each other distribution on path
    (default sys.path), in path order, each name once."""
    found: list[tuple[str, str, str]] = []
    seen = set()
    for entry in sys.path if path is None else path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # not a folder (a zip, a missing entry)
            continue
        for leaf in names:
            if leaf.endswith(".dist-info"):
                name = leaf[: -len(".dist-info")].split("-", 1)[0]
            elif leaf.endswith(".egg-info"):
                name = leaf[: -len(".egg-info")].split("-", 1)[0]
            else:
                continue
            name = _norm(name)
            if name in OTHERS and name not in seen:
                seen.add(name)
                meta = os.path.join(os.path.abspath(entry or "."), leaf)
                found.append((name, _version(meta), meta))
    return found


def warn() -> None:
    """Warns once (this runs at the package's import) about each other
    distribution found."""
    for name, version, meta in find():
        warnings.warn(
            f"dftracer: the {name} {version} distribution ({meta}) is installed in this "
            f"environment too; it provides the same `dftracer` package as dftracer-native, "
            f"and whichever was installed last overwrote the other's files. Uninstall "
            f"both and reinstall one: pip uninstall -y {name} dftracer-native && "
            f"pip install dftracer-native",
            RuntimeWarning, stacklevel=2)
