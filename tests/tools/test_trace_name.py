"""The trace file's name (docs/trace-format.md, "Files"): the tracer
(src/core/trace_name.c) writes exactly what dftracer/tools/trace_name.py
builds, and the readers take it apart with the same module (issue 38)."""

from __future__ import annotations

import os

import pytest

from dftracer.tools import trace_name
from tracefile import run_python

ENABLED = {"DFTRACER_ENABLE": "1"}


def test_the_tracer_writes_the_names_the_module_builds(tmp_path):
    """A stem with "-" in it, a second trace of the same process (the numbered
    name), plain and compressed: each file is where build() says, and parse()
    given the stem gives back the host and the pid."""
    stem = str(tmp_path / "my-run")
    proc = run_python(
        f"""
        import os
        from dftracer.python import dftracer
        log = dftracer.initialize_log({stem + '.pfw.gz'!r})
        log.log_event("a", "c", log.get_time(), 1)
        print(log.trace_path)
        log.finalize()
        log = dftracer.initialize_log({stem + '.pfw.gz'!r})
        log.log_event("b", "c", log.get_time(), 1)
        print(log.trace_path)
        log.finalize()
        print(os.getpid())
        """,
        ENABLED,
    )
    first, second, pid = proc.stdout.split()
    host = trace_name.host_name()
    assert first == trace_name.build(stem, host, int(pid))
    assert second == trace_name.build(stem, host, int(pid), k=1)
    for k, path in enumerate((first, second)):
        assert os.path.exists(path)
        got = trace_name.parse(path, stem)
        assert (got.stem, got.host, got.pid, got.k) == ("my-run", host, int(pid), k)
        assert got.on_host(host)
    plain = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'p')!r})
        log.log_event("a", "c", log.get_time(), 1)
        print(log.trace_path)
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_TRACE_COMPRESSION="0"),
    ).stdout.strip()
    got = trace_name.parse(plain)
    assert plain == trace_name.build(str(tmp_path / "p"), host, got.pid, compressed=False)
    assert os.path.basename(plain) in [os.path.basename(p) for p in
                                       __import__("glob").glob(trace_name.pattern(str(tmp_path / "p")))]


@pytest.mark.parametrize("log_file, stem", [
    (None, "./trace"), ("", "./trace"), ("run", "run"), ("d/run.pfw", "d/run"),
    ("d/run.pfw.gz", "d/run"), ("run.gz", "run.gz"), ("run.pfw.pfw", "run.pfw"),
])
def test_stem_strips_one_trace_suffix(log_file, stem):
    assert trace_name.stem(log_file) == stem


def test_a_hyphenated_host_is_read_whole():
    """Where the copies disagreed: paths.py put every "-" in the stem (host
    "1" for ip-10-0-0-1), top_figures.py every "-" in the host (host
    "run-ip-10-0-0-1" under the stem "my-run").  Without a stem the stem ends
    at the first "-"; given one, the split is exact; on_host needs neither."""
    name = "trace-ip-10-0-0-1-4242-app.pfw.gz"
    got = trace_name.parse("/x/" + name)
    assert (got.stem, got.host, got.pid, got.k) == ("trace", "ip-10-0-0-1", 4242, 0)
    got = trace_name.parse("my-run-ip-10-0-0-1-4242.3-app.pfw", "/somewhere/my-run")
    assert (got.stem, got.host, got.pid, got.k) == ("my-run", "ip-10-0-0-1", 4242, 3)
    assert got.on_host("ip-10-0-0-1") and not got.on_host("ip-10-0-0-2")
    assert trace_name.parse("other-ip-1-7-app.pfw", "my-run") is None


@pytest.mark.parametrize("name", [
    "trace.pfw.gz", "trace-host-app.pfw.gz", "trace-host-12-app.pfw.gzip",
    "trace-host-12x-app.pfw", "trace-host-12-app.json", "trace-host-12.-app.pfw",
])
def test_not_trace_names(name):
    assert trace_name.parse(name) is None


def test_build_and_parse_are_inverse():
    for stem in ("trace", "a-b", "x.y"):
        for host in ("node17", "ip-10-0-0-1", "h_1"):
            for k in (0, 1, 999):
                for gz in (True, False):
                    got = trace_name.parse(trace_name.build(stem, host, 4242, k, gz), stem)
                    assert got[:4] == (stem, host, 4242, k)
