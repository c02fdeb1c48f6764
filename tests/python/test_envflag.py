"""Boolean DFTRACER_* variables have one rule, the core's (issue 38):
1/true/yes/on/y and 0/false/no/off/n in any case, anything else the default.
The C reader (core/config.c), the Python helper (dftracer/_envflag.py) and
the start-up .pth line answer the same for every spelling."""

from __future__ import annotations

import builtins
import json
import os
import re

import pytest

from dftracer import _envflag
from tracefile import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON = ["1", "true", "yes", "on", "y", "TRUE", "Yes", "ON", "Y"]
OFF = ["0", "false", "no", "off", "n", "FALSE", "No", "OFF", "N"]
BAD = ["2", " 1", "enable", "tru", "yes please"]
SPELLINGS = ON + OFF + BAD


def expected(value, default):
    return True if value in ON else False if value in OFF else default


@pytest.mark.parametrize("value", SPELLINGS)
def test_python_helper(value, monkeypatch):
    monkeypatch.setenv("DFTRACER_TEST_FLAG", value)
    for default in (False, True):
        assert _envflag.flag("DFTRACER_TEST_FLAG", default) is expected(value, default)


def test_python_helper_unset_and_warning(monkeypatch, capfd):
    monkeypatch.delenv("DFTRACER_TEST_FLAG", raising=False)
    assert _envflag.flag("DFTRACER_TEST_FLAG", True) is True
    monkeypatch.setenv("DFTRACER_TEST_FLAG", "")
    assert _envflag.flag("DFTRACER_TEST_FLAG") is False
    monkeypatch.setenv("DFTRACER_TEST_FLAG", "maybe")
    assert _envflag.flag("DFTRACER_TEST_FLAG", True, warn=True) is True
    assert _envflag.flag("DFTRACER_TEST_FLAG", True, warn=True) is True
    err = capfd.readouterr().err
    assert err.count("DFTRACER_TEST_FLAG='maybe' is not a boolean") == 1 and "using 1" in err


def test_the_core_reads_every_spelling_the_same(tmp_path):
    """The C rule, seen through two flags: DFTRACER_ENABLE (default off: the
    trace starts or not) and DFTRACER_TRACE_COMPRESSION (default on: .gz or
    not), each spelling in turn in one process (initialize_log reads the
    environment again)."""
    proc = run_python(
        f"""
        import json, os
        from dftracer import _core, _envflag
        out = []
        for v in {SPELLINGS!r}:
            os.environ["DFTRACER_ENABLE"] = v
            os.environ["DFTRACER_TRACE_COMPRESSION"] = "1"
            log = _core.logger.initialize_log({str(tmp_path / 'e')!r}, None, -1)
            on = _core.is_active()
            if on:
                _core.logger.finalize()
            os.environ["DFTRACER_ENABLE"] = "1"
            os.environ["DFTRACER_TRACE_COMPRESSION"] = v
            _core.logger.initialize_log({str(tmp_path / 'c')!r}, None, -1)
            gz = _core.logger.trace_path.endswith(".gz")
            _core.logger.finalize()
            out.append([v, on, gz, _envflag.flag("DFTRACER_ENABLE"),
                        _envflag.flag("DFTRACER_TRACE_COMPRESSION", True)])
        print(json.dumps(out))
        """,
    )
    for v, on, gz, _, _ in json.loads(proc.stdout):
        assert (on, gz) == (expected(v, False), expected(v, True)), v
    for v in BAD:  # the core names the variable and the value it used
        assert f"DFTRACER_TRACE_COMPRESSION='{v}' is not a boolean" in proc.stderr


class _Imported(Exception):
    pass


def _pth_imports(env):
    """Whether the start-up line imports dftracer._preload under env (the
    line run as site runs it, with os.environ replaced)."""
    with open(os.path.join(ROOT, "dftracer-preload.pth"), encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("import os;"), lines
    real = builtins.__import__

    class FakeOs:
        environ = env

    def imp(name, *a, **k):
        if name == "os":
            return FakeOs
        if name == "dftracer._preload":
            raise _Imported
        return real(name, *a, **k)

    try:
        exec(lines[0], {"__builtins__": dict(vars(builtins), __import__=imp)})
    except _Imported:
        return True
    return False


@pytest.mark.parametrize("value", SPELLINGS)
def test_the_pth_line_follows_the_rule(value):
    # on, or not a boolean: _preload starts the trace, or says the value used
    # (test_start_env_warning.py); an off spelling imports nothing
    on = value not in OFF
    assert _pth_imports({"DFTRACER_ENABLE": value, "DFTRACER_INIT": "PRELOAD"}) is on
    assert _pth_imports({"DFTRACER_ENABLE": value, "DFTRACER_INIT": "preload"}) is on
    # an INIT that is not FUNCTION or PRELOAD: _preload says so
    assert _pth_imports({"DFTRACER_ENABLE": value, "DFTRACER_INIT": "BOGUS"}) is on
    assert _pth_imports({"DFTRACER_ENABLE": value, "DFTRACER_INIT": "function"}) is False
    # DFTRACER_TORCH: anything but an off spelling or unset lets _autotrace
    # decide (and warn about a value that is not a boolean)
    assert _pth_imports({"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": value}) is (value not in OFF)
    assert _pth_imports({"DFTRACER_ENABLE": value}) is False


def test_preload_follows_the_rule(monkeypatch):
    from dftracer import _preload

    for value in SPELLINGS:
        for init in ("PRELOAD", "Preload", "FUNCTION"):
            monkeypatch.setenv("DFTRACER_ENABLE", value)
            monkeypatch.setenv("DFTRACER_INIT", init)
            assert _preload.enabled() is (expected(value, False) and init != "FUNCTION")


def test_no_other_copy_of_the_rule():
    """Nothing under dftracer/ spells the boolean rule again: no tuple of the
    spellings, no comparison of a DFTRACER_ variable with "1"."""
    copies = re.compile(r'\(\s*"1",\s*"true"|\(\s*"0",\s*"false"|'
                        r'environ\.get\("DFTRACER_[A-Z_]+"[^)]*\)\s*[!=]=\s*"[01]"')
    bad = []
    for root, _, files in os.walk(os.path.join(ROOT, "dftracer")):
        for f in files:
            if f.endswith(".py") and f != "_envflag.py":
                path = os.path.join(root, f)
                text = open(path, encoding="utf-8").read()
                bad += [f"{os.path.relpath(path, ROOT)}: {m.group(0)}" for m in copies.finditer(text)]
    assert not bad, "copies of the boolean rule (use dftracer._envflag.flag):\n" + "\n".join(bad)


def _documented_booleans():
    """The variables docs/configuration.md's table says are booleans."""
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        rows = [ln for ln in f if ln.startswith("| `DFTRACER_")]
    return {re.match(r"\| `(DFTRACER_[A-Z_]+)`", r).group(1) for r in rows
            if "boolean" in r.split("|")[2] or "1/true/yes/on/y" in r.split("|")[2]}


def test_the_core_reads_its_booleans_in_one_place():
    """No C file but core/config.c reads a boolean DFTRACER_* variable itself
    (getenv): the others ask dft_config_flag, which warns about a value that
    is not a boolean."""
    booleans = _documented_booleans()
    assert {"DFTRACER_ENABLE", "DFTRACER_MEMORY", "DFTRACER_BIND_SIGNALS"} <= booleans, booleans
    bad = []
    for root, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            path = os.path.join(root, f)
            if not f.endswith((".c", ".h", ".cpp")) or path.endswith(os.path.join("core", "config.c")):
                continue
            text = open(path, encoding="utf-8").read()
            for m in re.finditer(r'getenv\("(DFTRACER_[A-Z_]+)"\)', text):
                if m.group(1) in booleans:
                    bad.append(f"{os.path.relpath(path, ROOT)}: {m.group(0)}")
    assert not bad, "booleans read past core/config.c's rule (use dft_config_flag):\n" + "\n".join(bad)


LEVEL_SPELLINGS = ["", "debug", "Debug", "INFO", "info", "warn", "WARNING", "Warning", "error",
                   "ERROR", "verbose", "0", " DEBUG", "DEBUG ", "WARNINGS"]
INTERVAL_SPELLINGS = ["", "1", "0", "off", "OFF", "Off", "0.5", ".5", "5.", "250ms", "250MS",
                      "2s", "2S", "abc", "-1", "+1", " 1", "1 ", "5000", "0.001", "1e3", "nan",
                      "inf", "3600", "3600.5", "0.01", "0ms", "10ms", "1s5", "ms", "."]


def test_log_level_and_flush_interval_are_read_as_the_core_reads_them(monkeypatch):
    """DFTRACER_LOG_LEVEL (_envflag.log_level: dftracer.python's logger and
    the autotrace's info lines) and DFTRACER_FLUSH_INTERVAL (tools/follow.py's
    parse_interval: `dftracer top`'s silence) have copies of the core's rules
    in Python; each spelling reads the same in both."""
    from dftracer.tools import follow
    from tracefile import get_testcore

    core = get_testcore()
    for value in LEVEL_SPELLINGS:
        monkeypatch.setenv("DFTRACER_LOG_LEVEL", value)
        got = _envflag.LEVELS[core._config_for_test()["log_level"]]
        assert got == _envflag.log_level(value), value
    monkeypatch.delenv("DFTRACER_LOG_LEVEL")
    for value in INTERVAL_SPELLINGS:
        monkeypatch.setenv("DFTRACER_FLUSH_INTERVAL", value)
        assert core._config_for_test()["flush_interval"] == follow.parse_interval(value)[0], value
