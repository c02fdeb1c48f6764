"""``dftracer run``: trace an unchanged program and all its Python workers.

    dftracer run [--data-dir D] [--log-file F] [--no-io] [--no-torch] -- python script.py args...
    python -m dftracer.tools.run [options] -- python script.py args...

Sets ``DFTRACER_ENABLE=1`` and ``DFTRACER_INIT=PRELOAD`` (plus the options),
runs the command, passes it the signals it gets, and when it ends prints on
stderr where each process's trace is and the commands that look at them; it
exits with the command's status (or dies of the command's signal).  Every Python interpreter started under it -- the script,
forked and spawned multiprocessing / DataLoader workers -- starts tracing at
start-up through the ``dftracer-preload.pth`` hook installed with the package
(from a source tree, through ``dftracer/_startup/sitecustomize.py``) and
finalizes at exit.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import signal
import site
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dftracer.tools.common import printable
from dftracer.tools import trace_name

PTH_NAME = "dftracer-preload.pth"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dftracer run",
        description="Run a command with tracing enabled in every Python process it starts.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  dftracer run -- python train.py\n"
               "  dftracer run --log-file runs/trace --data-dir data -- \\\n"
               "      torchrun --standalone --nproc_per_node 4 train.py\n"
               "  dftracer summary --ranks runs/      # then: stragglers, hangs, causes\n"
               "(docs/ai.md, docs/cli.md)",
    )
    p.add_argument("--data-dir", metavar="D",
                   help="':'-separated directories whose files' I/O is traced, or 'all' "
                        "(default: $DFTRACER_DATA_DIR; unset: no I/O events)")
    p.add_argument("--log-file", metavar="F",
                   help="trace file stem; each process writes F-<host>-<pid>-app.pfw.gz "
                        "(default: $DFTRACER_LOG_FILE or ./trace); a missing directory is "
                        "created")
    p.add_argument("--no-io", action="store_true", help="do not trace POSIX/stdio calls")
    p.add_argument("--no-torch", action="store_true",
                   help="no automatic torch events (steps, data waits, forward/backward, "
                        "collectives, checkpoints, compiles): DFTRACER_TORCH=0")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="do not list the trace files at the end")
    p.add_argument("--json", action="store_true",
                   help="list the trace files as one JSON object on stderr instead of text")
    p.add_argument("--top", action="store_true",
                   help="show `dftracer top` of the run's traces while it runs; the command's "
                        "output then goes to F-<host>-<pid>-output.log (docs/cli.md)")
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
              base: Optional[Mapping[str, str]] = None, no_torch: bool = False) -> Dict[str, str]:
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
    if no_torch:
        env["DFTRACER_TORCH"] = "0"
    import dftracer

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(dftracer.__file__)))
    if not _pth_installed(package_parent):
        # A source tree: make the package importable and use the sitecustomize shim.
        startup = os.path.join(package_parent, "dftracer", "_startup")
        extra = [startup, package_parent]
        old = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in extra]
        env["PYTHONPATH"] = os.pathsep.join(extra + old)
    return env


MAX_LISTED = 20  # trace files listed by name at the end of a run


def _trace_stem(env: Mapping[str, str]) -> str:
    """The absolute stem the traced processes write F-<host>-<pid>-app.pfw[.gz] under."""
    return os.path.abspath(trace_name.stem(env.get("DFTRACER_LOG_FILE")))


def _snapshot(stem: str) -> Dict[str, Tuple[float, int]]:
    out = {}
    for path in glob.glob(trace_name.pattern(stem)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[path] = (st.st_mtime, st.st_size)
    return out


def written_traces(stem: str, before: Dict[str, Tuple[float, int]]) -> List[Dict[str, Any]]:
    """The trace files under stem made or changed since `before` was taken."""
    out = []
    for path, sig in sorted(_snapshot(stem).items()):
        if before.get(path) == sig:
            continue
        name = trace_name.parse(path, stem)
        if not name:
            continue
        out.append({"path": path, "host": name.host, "pid": name.pid, "bytes": sig[1]})
    return out


def where_message(traces: List[Dict[str, Any]], stem: str, root_pid: int,
                  all_in_dir: bool) -> str:
    """What `dftracer run` prints at the end: each process's trace and how to look."""
    if not traces:
        expected = trace_name.build(stem, "<host>", "<pid>")
        return ("dftracer run: no trace was written (the command started no Python "
                f"interpreter, or tracing could not start); expected {expected}\n")
    directory = os.path.dirname(stem)
    rel = os.path.relpath(directory)
    shown = rel if not rel.startswith("..") else directory
    processes = len({t["pid"] for t in traces})
    per = ("one per process" if processes == len(traces)
           else f"{processes} process{'es' if processes != 1 else ''}; an exec or a second "
                "trace adds a .<k> file")
    lines = [f"dftracer run: {len(traces)} trace file{'s' if len(traces) != 1 else ''} "
             f"({per}) in {shown}/"]
    # the command's own trace first, then the others; a long list is cut
    listed = sorted(traces, key=lambda t: (t["pid"] != root_pid, t["path"]))
    shown_n = len(listed) if len(listed) <= MAX_LISTED else MAX_LISTED - 1
    width = max(len(os.path.basename(t["path"])) for t in listed[:shown_n])
    for t in listed[:shown_n]:
        role = "  (the command)" if t["pid"] == root_pid else ""
        lines.append(f"  {os.path.basename(t['path']).ljust(width)}  pid {t['pid']}{role}")
    if shown_n < len(listed):
        lines.append(f"  ... and {len(listed) - shown_n} more (--json lists them all)")
    def inside(name: str) -> str:
        return name if shown == "." else os.path.join(shown, name)

    if all_in_dir:
        target = shlex.quote(shown)
    elif len(traces) > 1:
        target = shlex.quote(inside(trace_name.pattern(os.path.basename(stem))))
    else:
        target = shlex.quote(inside(os.path.basename(traces[0]["path"])))
    cmds = [(f"dftracer view {target}", "the timeline, in Perfetto"),
            (f"dftracer report {target} -o report.html", "charts of where the time went"),
            (f"dftracer summary {target}", "the same numbers as tables")]
    width = max(len(c) for c, _ in cmds)
    lines.append("look at them:")
    lines += [f"  {c.ljust(width)}  # {why}" for c, why in cmds]
    return "\n".join(lines) + "\n"


def _only_these_in_dir(stem: str, traces: List[Dict[str, Any]]) -> bool:
    """True when the traces are the only trace files in the stem's directory
    and it has no subdirectory (the commands search directories recursively)."""
    ours = {t["path"] for t in traces}
    with os.scandir(os.path.dirname(stem)) as it:
        for entry in it:
            if entry.is_dir():
                return False
            if trace_name.is_trace_name(entry.name) and entry.path not in ours:
                return False
    return True


def _terminal_foreground() -> bool:
    """True when this process is in the foreground process group of its terminal."""
    for stream in (sys.stdin, sys.stderr):
        try:
            return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
        except (OSError, ValueError, AttributeError):
            continue
    return False


def _run(command: List[str], env: Dict[str, str], view: Any = None) -> Tuple[int, int]:
    """Runs the command, passing on the signals dftracer run gets; returns
    (its pid, its status as subprocess gives it: -N when killed by signal N).
    With view (--top: top.RunView), the view is shown while it runs."""
    proc = subprocess.Popen(command, env=env, **(view.popen_args() if view else {}))

    def forward(signum: int, frame: Any) -> None:
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    def interrupt(signum: int, frame: Any) -> None:
        # Ctrl-C on a terminal reaches the whole foreground group, the command
        # included: passing it on would deliver it twice.
        if not _terminal_foreground():
            forward(signum, frame)

    old = {signal.SIGINT: signal.signal(signal.SIGINT, interrupt)}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        old[sig] = signal.signal(sig, forward)
    try:
        if view is not None:
            view.watch(proc)
        while True:
            try:
                rc = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return proc.pid, rc


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses argv (without the program name), runs the command traced, and
    says where its traces are."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _parser().error("no command given (use: dftracer run [options] -- python script.py ...)")
    if args.data_dir is not None and not args.data_dir:
        _parser().error("--data-dir must not be empty")
    env = build_env(args.data_dir, args.log_file, args.no_io, no_torch=args.no_torch)
    if args.log_file:
        # created here as every traced process would (docs/configuration.md)
        log_dir = os.path.dirname(env["DFTRACER_LOG_FILE"])
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as exc:
            sys.stderr.write(printable(f"dftracer run: cannot create the --log-file directory "
                                       f"{log_dir}: {exc.strerror}") + "\n")
            return 2
    stem = _trace_stem(env)
    before = _snapshot(stem)
    view = None
    if args.top:
        from dftracer.tools import top

        view = top.RunView.create(stem, before)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid, rc = _run(command, env, view)
    except OSError as exc:
        sys.stderr.write(f"dftracer run: cannot run {command[0]!r}: {exc.strerror}\n")
        return 127 if isinstance(exc, (FileNotFoundError, NotADirectoryError)) else 126
    finally:
        if view is not None:
            view.close()
    traces = written_traces(stem, before)
    if args.json:
        sys.stderr.write(json.dumps({"command": command, "status": rc, "pid": pid,
                                     "traces": traces}) + "\n")
    elif not args.quiet:
        try:
            all_in_dir = bool(traces) and _only_these_in_dir(stem, traces)
        except OSError:
            all_in_dir = False
        text = where_message(traces, stem, pid, all_in_dir)
        sys.stderr.write("".join(printable(line) + "\n" for line in text.splitlines()))
    sys.stderr.flush()
    if rc < 0:  # die of the same signal, so that callers see what the command saw
        try:
            signal.signal(-rc, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: cannot be caught anyway
            pass
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
