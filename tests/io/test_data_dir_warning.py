"""DFTRACER_DATA_DIR entries that never exist while the program runs are
warned about at the end, one line each (issue 20); entries that exist, or
that the program creates after starting the tracer (a newcomer's first trace,
issue 52), are not."""

from __future__ import annotations

from tracefile import find_traces, read_trace, run_python


def test_missing_data_dir_entries_get_one_warning_each(tmp_path):
    (tmp_path / "data").mkdir()
    entries = [str(tmp_path / "data"), str(tmp_path / "nope"), "relative/missing",
               str(tmp_path / "data" / "later")]
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        import os
        os.makedirs({str(tmp_path / 'data' / 'later')!r})
        with open({str(tmp_path / 'data' / 'later' / 'f.txt')!r}, "w") as f:
            f.write("x")
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1", "DFTRACER_DATA_DIR": ":".join(entries)},
        cwd=str(tmp_path),
    )
    warnings = [l for l in proc.stderr.splitlines() if "DFTRACER_DATA_DIR" in l]
    assert warnings == [
        f"dftracer: warning: DFTRACER_DATA_DIR entry '{e}' does not exist; nothing under it "
        "was traced" for e in entries[1:3]], proc.stderr
    # The entry created later is traced.
    (path,) = find_traces(str(tmp_path))
    files = read_trace(path).hashes("FH")
    assert str(tmp_path / "data" / "later" / "f.txt") in files.values()
