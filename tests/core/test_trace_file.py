"""The trace file itself: how it is opened (no symbolic links, never someone
else's file), and what a failing write leaves on disk (issue 20).
docs/configuration.md, "The trace file"."""

from __future__ import annotations

import gzip
import os
import socket
import zlib

import pytest

from tracefile import find_traces, read_trace, run_python, validate

ENABLED = {"DFTRACER_ENABLE": "1"}
# In a test program: what each open descriptor is ("3=/path", comma-joined;
# listdir's own descriptor is closed, so no link, by the time it is looked at).
FDS = ('fds = lambda: ",".join(sorted(fd + "=" + os.readlink("/proc/self/fd/" + fd) '
       'for fd in os.listdir("/proc/self/fd") if os.path.islink("/proc/self/fd/" + fd)))')


def members(path):
    """Each gzip member of path decoded on its own; raises if one does not decode."""
    data = open(path, "rb").read()
    out = []
    while data:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data))
        assert d.eof, f"{path}: gzip member {len(out)} is torn"
        data = d.unused_data
    return out


def host():
    return socket.gethostname().replace("/", "_")


def test_symlink_at_trace_path_is_not_followed(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    proc = run_python(
        f"""
        import os, socket
        stem = {str(tmp_path / 'run')!r}
        link = f"{{stem}}-{{socket.gethostname()}}-{{os.getpid()}}-app.pfw.gz"
        os.symlink({str(target)!r}, link)
        from dftracer.python import dftracer
        log = dftracer.initialize_log(stem + ".pfw")
        print(log.trace_path)
        log.log_event("work", "c", log.get_time(), 3)
        log.finalize()
        # Again in the same process: the link is still there, and .1 holds
        # the first trace: the next free name.
        log = dftracer.initialize_log(stem + ".pfw")
        print(log.trace_path)
        log.log_event("more", "c", log.get_time(), 3)
        log.finalize()
        """,
        ENABLED,
    )
    assert target.read_text() == "keep me\n"
    first, second = proc.stdout.split()
    assert first.endswith(".1-app.pfw.gz") and second == first.replace(".1-", ".2-"), proc.stdout
    errors = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: error")]
    assert len(errors) == 2 and all("is a symbolic link" in e for e in errors)
    assert first in errors[0] and second in errors[1]
    link = first.replace(".1-app.pfw.gz", "-app.pfw.gz")
    assert os.path.islink(link) and errors[0].split()[4] == link
    # One whole trace per file.
    assert [e["name"] for e in read_trace(first).of("X", cat="c")] == ["work"]
    assert [e["name"] for e in read_trace(second).of("X", cat="c")] == ["more"]


def test_existing_file_of_another_process_is_never_appended_to(tmp_path):
    """A file left by an earlier process with the same pid (containers reuse
    pids; initialize_log(process_id=...) names files by rank)."""
    stem = tmp_path / "rank"
    old = tmp_path / f"rank-{host()}-7-app.pfw.gz"
    old.write_bytes(gzip.compress(b"[\n") + b"earlier run")
    before = old.read_bytes()
    code = f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(stem) + '.pfw'!r}, None, 7)
        log.log_event("work", "c", log.get_time(), 3)
        log.finalize()
        print(log.trace_path)
        """
    proc = run_python(code, ENABLED)
    assert old.read_bytes() == before
    path = proc.stdout.strip()
    assert path == str(tmp_path / f"rank-{host()}-7.1-app.pfw.gz")
    assert "already exists and was not written by this process" in proc.stderr
    tr = read_trace(path)
    assert [e["name"] for e in tr.of("X", cat="c")] == ["work"]
    # The next run takes the next free name.
    assert run_python(code, ENABLED).stdout.strip().endswith("-7.2-app.pfw.gz")
    assert sorted(find_traces(str(tmp_path), "rank")) == sorted(
        [str(old), path, str(tmp_path / f"rank-{host()}-7.2-app.pfw.gz")])


@pytest.mark.no_asan
def test_fill_then_free_leaves_every_member_whole(tmp_path):
    """A write that does not fit (RLIMIT_FSIZE: a short write, then EFBIG) is cut
    back to the last whole member; events logged after space frees are kept."""
    proc = run_python(
        f"""
        import os, resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'full.pfw')!r})
        path = log.trace_path
        def burst(tag, n):
            for i in range(n):
                log.log_event(f"{{tag}}{{i}}", "c" * 200, log.get_time(), 1)
            log.flush()
        burst("before", 3000)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = os.path.getsize(path) + 5000
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        burst("full", 3000)
        print(os.path.getsize(path) <= limit)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        burst("after", 3000)
        log.finalize()
        print(path)
        """,
        {**ENABLED, "DFTRACER_WRITE_BUFFER_SIZE": "65536"},
    )
    fits, path = proc.stdout.split()
    assert fits == "True"
    errors = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: error")]
    assert len(errors) == 1 and "File too large" in errors[0] and path in errors[0]
    members(path)  # every member decodes
    tr = read_trace(path)  # checks the format, the end event and num_events
    names = [e["name"] for e in tr.of("X", cat="c" * 200)]
    assert sum(n.startswith("before") for n in names) == 3000
    assert sum(n.startswith("after") for n in names) == 3000
    assert 0 < sum(n.startswith("full") for n in names) < 3000


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_finalize_leaves_no_descriptor_of_the_tracers_open(tmp_path):
    # The memory counters read /proc/self/statm through a descriptor of their
    # own (core/memory_read.c); finalize closes it with the trace file, so a
    # program that counts its descriptors (or closes them) after the trace
    # sees only its own.  The flush interval makes the samples certain.
    proc = run_python(
        f"""
        import os, time
        from dftracer.python import dftracer
        {FDS}
        before = fds()
        for i in range(2):
            log = dftracer.initialize_log({str(tmp_path / 'fd.pfw')!r})
            log.log_event("e", "c", log.get_time(), 1)
            time.sleep(0.3)  # several flusher ticks, each a memory sample
            log.finalize()
            print("after", i, fds() == before, fds())
        print("before", before)
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL="0.02"),
    )
    assert [l.split()[2] for l in proc.stdout.splitlines() if l.startswith("after")] == \
        ["True", "True"], proc.stdout
    for path in find_traces(str(tmp_path)):  # the samples were taken, so statm was open
        assert read_trace(path).of("C", name="memory"), path


@pytest.mark.no_asan
def test_first_write_failure_reported_once_and_the_file_closed(tmp_path):
    # The "[" line travels with the first events (docs/trace-format.md, member
    # layout), so a disk that is full from the start shows at the first write:
    # one error line, the program goes on, finalize closes the descriptor and
    # the file holds no torn member.
    proc = run_python(
        f"""
        import os, resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from dftracer.python import dftracer
        {FDS}
        before = fds()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8, hard))
        for i in range(3):
            log = dftracer.initialize_log({str(tmp_path / 'hdr.pfw')!r})
            for k in range(1000):
                log.log_event("e", "c", log.get_time(), 1)
            log.finalize()
        print("fds", before, fds())
        print("sizes", [os.path.getsize(os.path.join({str(tmp_path)!r}, f))
                        for f in os.listdir({str(tmp_path)!r})])
        """,
        ENABLED,
    )
    lines = proc.stdout.splitlines()
    _, before, after = lines[0].split()
    assert before == after, proc.stdout
    # one file per trace, each cut back to its last whole member: none
    assert lines[1] == "sizes [0, 0, 0]", proc.stdout
    errors = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: error")]
    assert errors and all("File too large" in e for e in errors), proc.stderr
    assert len(errors) <= 3, proc.stderr  # at most once per trace


@pytest.mark.no_asan
def test_forked_child_write_failure_reported_once(tmp_path):
    proc = run_python(
        f"""
        import os, resource, signal
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'parent.pfw')!r})
        pid = os.fork()
        if pid == 0:
            # The child opens its own file at its first write; it cannot grow.
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
            for i in range(50000):
                log.log_event("e", "c", log.get_time(), 1)
            log.finalize()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status)
        log.finalize()
        """,
        ENABLED,
    )
    assert "child status 0" in proc.stdout
    errors = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: error")]
    assert len(errors) == 1 and "File too large" in errors[0], proc.stderr
    files = find_traces(str(tmp_path), "parent")
    # The parent's trace reads whole; the child's file, cut back to its last
    # whole member, holds none (the "[" line travels with the first events).
    sizes = sorted(os.path.getsize(f) for f in files)
    assert len(files) == 2 and sizes[0] == 0, sizes
    read_trace(max(files, key=os.path.getsize))


def test_own_file_replaced_between_traces_is_not_written(tmp_path):
    """initialize_log after finalize never opens the earlier trace's name
    again: a FIFO put in its place (which would block an open) is not
    touched, and the new trace goes to the next numbered name."""
    proc = run_python(
        f"""
        import os
        from dftracer.python import dftracer
        stem = {str(tmp_path / 'own')!r}
        log = dftracer.initialize_log(stem + ".pfw")
        first = log.trace_path
        log.finalize()
        os.rename(first, first + ".moved")
        os.mkfifo(first)
        log = dftracer.initialize_log(stem + ".pfw")
        log.log_event("second", "c", log.get_time(), 1)
        log.finalize()
        print(first, log.trace_path)
        """,
        ENABLED,
        timeout=60,
    )
    first, second = proc.stdout.split()
    assert second == first.replace("-app.pfw.gz", ".1-app.pfw.gz")
    assert "dftracer: error" not in proc.stderr  # the name was this process's own
    assert [e["name"] for e in read_trace(second).of("X", cat="c")] == ["second"]


def test_a_second_trace_of_the_same_stem_is_a_file_of_its_own(tmp_path):
    """initialize_log after finalize with the same stem, and a trace started
    by the first event then replaced by initialize_log: every file holds one
    whole trace that the real `dftracer validate` accepts; no error line (the
    names are expected)."""
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        from dftracer import _core
        stem = {str(tmp_path / 'run')!r}
        log = dftracer.initialize_log(stem + ".pfw")
        log.log_event("first", "c", log.get_time(), 1)
        log.finalize()
        for name in ("second", "third"):
            log = dftracer.initialize_log(stem + ".pfw.gz")
            log.log_event(name, "c", log.get_time(), 1)
            log.finalize()
        print(log.trace_path)
        """,
        ENABLED,
    )
    assert "dftracer: error" not in proc.stderr
    files = find_traces(str(tmp_path), "run")
    base = str(tmp_path / f"run-{host()}-")
    assert proc.stdout.strip() == files[-1] and len(files) == 3, files
    assert [f[len(base):].split("-")[0].partition(".")[2] for f in files] == ["", "1", "2"]
    results = validate(*files)
    assert [r["verdict"] for r in results] == ["ok"] * 3, results
    names = [[e["name"] for e in read_trace(f).of("X", cat="c")] for f in files]
    assert names == [["first"], ["second"], ["third"]]
    # started by an event (DFTRACER_LOG_FILE), then initialize_log, same stem
    lazy = tmp_path / "lazy"
    lazy.mkdir()
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        from dftracer import _core
        _core.logger.log_event("implicit", "c", _core.get_time(), 1)
        log = dftracer.initialize_log({str(lazy / 'run.pfw')!r})
        log.log_event("explicit", "c", log.get_time(), 1)
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_LOG_FILE=str(lazy / "run")),
    )
    # initialize_log takes the trace that started by itself over: one file,
    # both events (docs/configuration.md, "The trace file")
    files = find_traces(str(lazy), "run")
    assert len(files) == 1 and "dftracer: error" not in proc.stderr
    assert [r["verdict"] for r in validate(*files)] == ["ok"]
    assert [e["name"] for e in read_trace(files[0]).of("X", cat="c")] == ["implicit", "explicit"]


def test_full_from_the_start_then_freed_gives_a_valid_file(tmp_path):
    """A disk full at initialize_log (RLIMIT_FSIZE 0: every write fails with
    EFBIG), then space again: the first member that reaches the file holds
    "[", the header and the hash definitions the lost pieces held, and the
    real `dftracer validate` accepts the file."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_bytes(b"x" * 10)
    proc = run_python(
        f"""
        import os, resource, signal, threading
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from dftracer.python import dftracer
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
        log = dftracer.initialize_log({str(tmp_path / 'full.pfw')!r}, {str(data)!r}, -1)
        def work(tag):  # the file's FH definition goes with the first read
            fd = os.open({str(data / 'f')!r}, os.O_RDONLY)
            os.read(fd, 4)
            os.close(fd)
            log.log_event(tag, "app", log.get_time(), 1)
        def both(tag):
            work(tag)
            t = threading.Thread(target=work, args=(tag + "_thread",))
            t.start(); t.join()
        both("lost")
        log.flush()
        print(os.path.getsize(log.trace_path))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        both("kept")
        log.finalize()
        print(log.trace_path)
        """,
        ENABLED,
    )
    size, path = proc.stdout.split()
    assert size == "0"
    errors = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: error")]
    assert len(errors) == 1 and "File too large" in errors[0], proc.stderr
    first = members(path)[0].decode()
    assert first.startswith("[\n") and '"name":"HH"' in first and '"name":"start"' in first
    (result,) = validate(path)
    assert result["verdict"] == "ok" and result["finalized"], result
    tr = read_trace(path)  # one HH/process_name/start, every hash defined, num_events
    assert sorted(e["name"] for e in tr.of("X", cat="app")) == ["kept", "kept_thread"]
    reads = [e for e in tr.user_events() if e["cat"] == "POSIX" and e["name"] == "read"]
    assert len(reads) == 2 and tr.hashes("FH")[reads[0]["args"]["fhash"]] == str(data / "f")
