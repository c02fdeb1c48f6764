"""The native DDP bucket hook (src/libtorch/ddp_native.cpp): built against the
program's own torch, once per torch version, and kept in dftracer's cache.

DDP runs a hook written in C++ without taking the GIL per bucket; a hook it
calls through Python (even dftracer's C one) costs tens of µs a bucket on
DDP's side (docs/performance.md, "DDP's bucket hook").  A C++ hook must be
compiled against the exact libtorch it runs in, which a wheel cannot ship, so
it is built here, on first use:

- DFTRACER_DDP_HOOK=auto (the default): the native hook where it is built;
  where it is not, the C hook, and one background build per machine and
  torch (a detached, low-priority compiler run, started by the first traced
  DDP model), so the next runs get it.
- DFTRACER_DDP_HOOK=native: built now, in the process, if missing (the first
  DDP model waits for it, about a minute); the C hook if that fails.
- DFTRACER_DDP_HOOK=c: the C hook, nothing built.

    python -m dftracer._autotrace.ddp_native build    # build it now, print its path

The cache is $DFTRACER_CACHE_DIR, else $XDG_CACHE_HOME/dftracer, else
~/.cache/dftracer; a build is keyed by the sources, torch's version and
build, and the Python version.  Needs a C++ compiler ($CXX, else c++) and
torch's headers (every torch wheel has them)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any, List, Optional

from dftracer._envflag import choice

NAME = "_dftracer_ddp_native"
MODES = ("auto", "native", "c")
HERE = os.path.dirname(os.path.abspath(__file__))
# stale after this long: a build lock left by a killed build
LOCK_SECONDS = 900

_loaded: Any = None
_tried = False
_build_failed = False  # DFTRACER_DDP_HOOK=native: not tried again in this process
_started = False  # a background build started (or found running) by this process


def mode() -> str:
    return choice("DFTRACER_DDP_HOOK", MODES, "auto")


def _warn(line: str) -> None:
    try:
        os.write(2, line.encode("utf-8", "replace"))  # one write, as the core's warnings
    except OSError:
        pass


SOURCES = [os.path.join("libtorch", "ddp_native.cpp"), os.path.join("torch", "ddp_native_api.h")]


def source_root() -> str:
    """The folder holding the C++ source and the header it shares with _core,
    laid out as src/: in the package (a wheel: dftracer/_autotrace/native/)
    or the source tree's src/."""
    for root in (os.path.join(HERE, "native"),
                 os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")):
        if all(os.path.isfile(os.path.join(root, p)) for p in SOURCES):
            return root
    raise OSError(f"dftracer's DDP hook source is missing: no {SOURCES[0]} in "
                  f"{os.path.join(HERE, 'native')} or the source tree")


def sources() -> List[str]:
    root = source_root()
    return [os.path.join(root, p) for p in SOURCES]


def cache_dir() -> str:
    base = os.environ.get("DFTRACER_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "dftracer")
    return base


def module_path() -> str:
    """Where the build for this torch, Python and source lives."""
    import torch

    h = hashlib.sha256()
    for path in sources():
        with open(path, "rb") as f:
            h.update(f.read())
    for part in (torch.__version__, str(getattr(torch.version, "git_version", "")),
                 sys.version, sysconfig.get_platform(),
                 str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", ""))):
        h.update(part.encode() + b"\0")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return os.path.join(cache_dir(), f"ddp_native-{h.hexdigest()[:16]}", NAME + suffix)


def compiler() -> Optional[str]:
    return shutil.which(os.environ.get("CXX") or "c++")


def build(quiet: bool = True) -> str:
    """Compiles the hook for this torch into the cache (replacing the file in
    one rename, so a process never loads half of it); returns its path.
    Raises OSError (no compiler, no source, the compiler failed)."""
    import torch
    from torch.utils import cpp_extension

    cxx = compiler()
    if cxx is None:
        raise OSError(f"no C++ compiler: {os.environ.get('CXX') or 'c++'} is not on PATH")
    root = source_root()
    src = os.path.join(root, SOURCES[0])
    out = module_path()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    includes: List[str] = []
    for d in cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]:
        includes += ["-isystem", d]
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), prefix=".build-", suffix=".so")
    os.close(fd)
    cmd = [cxx, "-O2", "-fPIC", "-shared", "-std=c++20", "-fvisibility=hidden",
           f"-DTORCH_EXTENSION_NAME={NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I", root, *includes,
           src, "-o", tmp, f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python",
           f"-Wl,-rpath,{lib}"]
    try:
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # the compiler runs bare
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, env=env,
                              stdout=subprocess.DEVNULL if quiet else None,
                              stderr=subprocess.PIPE if quiet else None, text=True)
        if done.returncode != 0:
            raise OSError(f"{cxx} exited with {done.returncode}" +
                          (f": {done.stderr.strip()[-1500:]}" if done.stderr else ""))
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would keep it from a shared cache's other users
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _build_once() -> None:
    """build() unless another process (a rank beside this one) has: they
    take turns on a lock, and the first one builds."""
    import fcntl

    out = module_path()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".flock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        if not os.path.isfile(out):
            build()


def load() -> Any:
    """The built module for this torch, or None (not built, or it does not
    load: then the C hook is used, and an info line says why)."""
    global _loaded, _tried
    if _tried:
        return _loaded
    _tried = True
    try:
        path = module_path()
        if not os.path.isfile(path):
            return None
        spec = importlib.util.spec_from_file_location(NAME, path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded = module
    except Exception as exc:  # a build for another ABI, a missing symbol
        from dftracer._autotrace._base import _say

        _say(f"native DDP hook not used ({type(exc).__name__}: {exc})")
    return _loaded


def build_in_background() -> bool:
    """Starts one detached, low-priority build for this machine and torch,
    unless this process started one, one is running (its lock is fresh), one
    failed (its .failed file: `python -m dftracer._autotrace.ddp_native
    build` tries again and says why) or no compiler is found."""
    from dftracer._autotrace._base import _say

    global _started
    if _started:
        return False
    _started = True
    try:
        out = module_path()
        if compiler() is None or os.path.exists(out + ".failed"):
            return False
        os.makedirs(os.path.dirname(out), exist_ok=True)
        lock = out + ".lock"
        try:
            if time.time() - os.stat(lock).st_mtime > LOCK_SECONDS:
                os.unlink(lock)
        except OSError:
            pass
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")
               or k == "DFTRACER_CACHE_DIR"}  # the build is not traced
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(HERE))] +
            [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        log = open(out + ".log", "w")
        with log:
            subprocess.Popen([sys.executable, "-m", "dftracer._autotrace.ddp_native", "build",
                              "--lock", lock, "--nice"], stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, env=env, start_new_session=True)
        os.close(fd)
        _say(f"building the native DDP hook in the background for the next runs: {out}")
        return True
    except Exception as exc:
        _say(f"native DDP hook not built ({type(exc).__name__}: {exc})")
        return False


def for_ddp() -> Any:
    """The native module to register, or None for the C hook, by
    DFTRACER_DDP_HOOK."""
    m = mode()
    if m == "c":
        return None
    module = load()
    if module is not None:
        return module
    if m == "native":
        global _tried, _build_failed
        if _build_failed:
            return None
        try:
            _build_once()
        except Exception as exc:
            _build_failed = True  # so this warns once
            _warn(f"dftracer: warning: the native DDP hook could not be built "
                       f"({type(exc).__name__}: {str(exc).strip()[-500:]}); using the C hook\n")
            return None
        _tried = False
        return load()
    build_in_background()
    return None


def main(argv: List[str]) -> int:
    if not argv or argv[0] != "build":
        sys.stderr.write("usage: python -m dftracer._autotrace.ddp_native build\n")
        return 2
    lock = argv[argv.index("--lock") + 1] if "--lock" in argv else None
    if "--nice" in argv:  # a background build: the program's ranks come first
        os.nice(19)
    try:
        try:
            path = build(quiet=False)
        except OSError as exc:
            sys.stderr.write(f"dftracer: the native DDP hook could not be built: {exc}\n")
            if lock:  # a background build: later runs do not try again
                try:
                    with open(module_path() + ".failed", "w") as f:
                        f.write(f"{exc}\n")
                except OSError:
                    pass
            return 1
        try:
            os.unlink(path + ".failed")
        except OSError:
            pass
        print(path)
        return 0
    finally:
        if lock:
            try:
                os.unlink(lock)
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
