"""``dftracer run``: trace an unchanged program and all its Python workers.

    dftracer run [--data-dir D] [--log-file F] [--no-io] -- python script.py args...
    python -m dftracer.tools.run [options] -- python script.py args...

Sets ``DFTRACER_ENABLE=1`` and ``DFTRACER_INIT=PRELOAD`` (plus the options)
and replaces itself with the command, so the exit status and signals are the
command's own.  Every Python interpreter started under it -- the script,
forked and spawned multiprocessing / DataLoader workers -- starts tracing at
start-up through the ``dftracer-preload.pth`` hook installed with the package
(from a source tree, through ``dftracer/_startup/sitecustomize.py``) and
finalizes at exit.
"""

from __future__ import annotations

import argparse
import os
import site
import sys
from typing import Dict, List, Mapping, Optional, Sequence

PTH_NAME = "dftracer-preload.pth"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dftracer run",
        description="Run a command with tracing enabled in every Python process it starts.",
    )
    p.add_argument("--data-dir", metavar="D",
                   help="':'-separated directories whose files' I/O is traced, or 'all' "
                        "(default: $DFTRACER_DATA_DIR; unset: no I/O events)")
    p.add_argument("--log-file", metavar="F",
                   help="trace file stem; each process writes F-<host>-<pid>-app.pfw.gz "
                        "(default: $DFTRACER_LOG_FILE or ./trace)")
    p.add_argument("--no-io", action="store_true", help="do not trace POSIX/stdio calls")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command, after '--' (e.g. -- python train.py --epochs 1)")
    return p


def _site_dirs() -> List[str]:
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if isinstance(user, str):
        dirs.append(user)
    return [os.path.abspath(d) for d in dirs]


def _pth_installed(package_parent: str) -> bool:
    """True when the start-up .pth sits in the site directory holding dftracer."""
    return package_parent in _site_dirs() and os.path.exists(os.path.join(package_parent, PTH_NAME))


def _abs_dirs(value: str) -> str:
    if value == "all":
        return value
    return ":".join(os.path.abspath(p) for p in value.split(":") if p)


def build_env(data_dir: Optional[str], log_file: Optional[str], no_io: bool,
              base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for the traced command."""
    env = dict(os.environ if base is None else base)
    env["DFTRACER_ENABLE"] = "1"
    env["DFTRACER_INIT"] = "PRELOAD"
    if log_file:
        env["DFTRACER_LOG_FILE"] = os.path.abspath(log_file)
    elif env.get("DFTRACER_LOG_FILE"):
        env["DFTRACER_LOG_FILE"] = os.path.abspath(env["DFTRACER_LOG_FILE"])
    if data_dir:
        env["DFTRACER_DATA_DIR"] = _abs_dirs(data_dir)
    if no_io:
        env["DFTRACER_DISABLE_IO"] = "1"
    import dftracer

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(dftracer.__file__)))
    if not _pth_installed(package_parent):
        # A source tree: make the package importable and use the sitecustomize shim.
        startup = os.path.join(package_parent, "dftracer", "_startup")
        extra = [startup, package_parent]
        old = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in extra]
        env["PYTHONPATH"] = os.pathsep.join(extra + old)
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses argv (without the program name) and execs the command."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _parser().error("no command given (use: dftracer run [options] -- python script.py ...)")
    if args.data_dir is not None and not args.data_dir:
        _parser().error("--data-dir must not be empty")
    env = build_env(args.data_dir, args.log_file, args.no_io)
    if args.log_file:
        log_dir = os.path.dirname(env["DFTRACER_LOG_FILE"])
        if not os.path.isdir(log_dir):
            sys.stderr.write(f"dftracer run: --log-file directory does not exist: {log_dir}\n")
            return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"dftracer run: cannot run {command[0]!r}: {exc.strerror}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
