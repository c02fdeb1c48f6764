"""Argument errors name the argument, whatever the value (issue 20)."""

from __future__ import annotations

from tracefile import read_trace, find_traces, run_python


def test_out_of_range_ints_and_hostile_keys_name_the_argument(tmp_path):
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})

        class Key(str):
            def __repr__(self):
                raise RuntimeError("repr fails")

        cases = [
            lambda: log.log_event("n", "c", 0, 0, int_args={{"big": 2 ** 64}}),
            lambda: log.log_event("n", "c", 0, 0, int_args={{"neg": -2 ** 63 - 1}}),
            lambda: log.log_event("n", "c", 0, 0, int_args={{"tag": (1, 10 ** 30)}}),
            lambda: log.log_event("n", "c", 2 ** 63, 0),
            lambda: log.log_event("n", "c", 0, 10 ** 5000),
            lambda: log.log_event("n", "c", 0, 0, float_args={{"f": 10 ** 400}}),
            lambda: log.log_event("n", "c", 0, 0, int_args={{Key("odd"): "x"}}),
            lambda: log.log_event("n", "c", 0, 0, string_args={{Key("odd2"): 1}}),
            lambda: log.log_event("n", "c", 0, 0, int_args={{Key("odd3"): 2 ** 70}}),
            lambda: dftracer.initialize_log(None, None, 2 ** 64),
        ]
        for case in cases:
            try:
                case()
            except Exception as e:
                print(type(e).__name__ + ":", e)
            else:
                print("no error")
        log.log_event("kept", "c", log.get_time(), 0, int_args={{"max": 2 ** 63 - 1, "min": -2 ** 63}})
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1"},
    )
    assert proc.stdout.splitlines() == [
        "OverflowError: int_args['big'] does not fit in a signed 64-bit integer",
        "OverflowError: int_args['neg'] does not fit in a signed 64-bit integer",
        "OverflowError: int_args['tag'] does not fit in a signed 64-bit integer",
        "OverflowError: start_time does not fit in a signed 64-bit integer",
        "OverflowError: duration does not fit in a signed 64-bit integer",
        "OverflowError: float_args['f'] is too large for a float",
        "TypeError: int_args['odd'] must be int, not str",
        "TypeError: string_args['odd2'] must be str, not int",
        "OverflowError: int_args['odd3'] does not fit in a signed 64-bit integer",
        "OverflowError: process_id does not fit in a signed 64-bit integer",
    ], proc.stdout + proc.stderr
    (path,) = find_traces(str(tmp_path))
    (ev,) = read_trace(path).user_events()
    assert ev["name"] == "kept" and ev["args"]["max"] == 2 ** 63 - 1
    assert ev["args"]["min"] == -2 ** 63
