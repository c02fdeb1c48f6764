"""DFTRACER_ENABLE_CUPTI is a boolean like every other variable (issue 25):
a value that is not one gets one warning line naming it and the value used."""

from __future__ import annotations

import pytest

from tracefile import find_traces, read_trace, run_python

ENABLED = {"DFTRACER_ENABLE": "1"}


def traced(tmp_path, value: str):
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        log.log_event("e", "c", log.get_time(), 1)
        log.finalize()
        dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})  # a second start: no repeat
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_ENABLE_CUPTI=value),
    )
    # the second trace writes a file of its own (docs/trace-format.md)
    first, second = sorted(find_traces(str(tmp_path)))
    assert second.endswith(".1-app.pfw.gz"), second
    assert len(read_trace(first, check=False).of("X", name="e")) == 1  # tracing went on
    return proc


@pytest.mark.parametrize("value", ["abc", "-1", "2", "enabled"])
def test_junk_enable_cupti_warns_once_and_is_off(tmp_path, value):
    proc = traced(tmp_path, value)
    lines = [ln for ln in proc.stderr.splitlines() if ln]
    assert lines == [f"dftracer: warning: DFTRACER_ENABLE_CUPTI='{value}' is not a boolean "
                     "(1/true/yes/on or 0/false/no/off); using 0"], proc.stderr


@pytest.mark.parametrize("value", ["0", "off", "no", "FALSE", ""])
def test_off_values_are_silent(tmp_path, value):
    assert traced(tmp_path, value).stderr == ""
