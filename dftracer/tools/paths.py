"""Turning the PATHS arguments (files, directories, globs) into trace files."""

from __future__ import annotations

import glob
import os
import stat
from typing import Iterable, List, Optional, Tuple

from dftracer.tools.trace_name import is_trace_name


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular(path: str) -> Optional[str]:
    """Why path (a symlink followed) is not read: "not a regular file (a
    FIFO)" and the like, or None for a regular file or one that cannot be
    stat'ed (the reader says why).  The readers only read regular files: a
    FIFO would block them, a device such as /dev/zero never ends.  The C
    readers check again on the file they open (src/reader/gz.c)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = next((k for test, k in _KINDS if test(mode)), "")
    return f"not a regular file ({kind})" if kind else "not a regular file"


def expand(args: Iterable[str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """Returns (files, errors): the trace files named by args, sorted and
    without duplicates, and (path, message) for the arguments that name
    nothing and the files that are not regular files (FIFOs, sockets,
    devices: skipped).  A file named explicitly is taken whatever its suffix;
    directories are searched recursively for .pfw and .pfw.gz files."""
    files: List[str] = []
    errors: List[Tuple[str, str]] = []

    def take(paths: List[str]) -> None:
        for p in paths:
            why = not_regular(p)
            if why:
                errors.append((p, why + "; skipped"))
            else:
                files.append(p)

    for arg in args:
        if os.path.isdir(arg):
            found = [
                os.path.join(root, name)
                for root, _dirs, names in os.walk(arg)
                for name in names
                if is_trace_name(name)
            ]
            if not found:
                errors.append((arg, "directory holds no .pfw or .pfw.gz file"))
            take(found)
        elif os.path.exists(arg):
            take([arg])
        elif glob.has_magic(arg):
            found = [p for p in glob.glob(arg, recursive=True) if not os.path.isdir(p)]
            if not found:
                errors.append((arg, "pattern matches no file"))
            take(found)
        else:
            errors.append((arg, "no such file or directory"))
    seen = set()
    unique = []
    for f in sorted(files):
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors
