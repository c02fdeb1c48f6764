"""The torch-like op mix the core benchmarks trace (bench_core, bench_writer,
bench_bytes, and the writer timed alone: the test extension's _bench_writer),
and the header that hands it to their child processes: those run under any
interpreter (a reference venv too), so the values travel as source text, not
as an import of this module."""

OP_NAMES = ["aten::addmm", "aten::linear", "aten::relu", "aten::empty", "aten::t",
            "aten::transpose", "aten::as_strided", "aten::mm", "aten::add_", "aten::copy_",
            "aten::view", "aten::convolution", "aten::_convolution", "aten::zeros"]
DURATIONS_US = [0, 1, 1, 2, 3, 5, 8, 13, 40, 200]
INPUT_SIZES = [0, 64, 1024, 4096]  # the "input_size" arg of events with args

# Prepended to a phase's source: defines OP_NAMES, DURATIONS_US and INPUT_SIZES there.
PHASE_HEADER = (f"OP_NAMES = {OP_NAMES!r}\nDURATIONS_US = {DURATIONS_US!r}\n"
                f"INPUT_SIZES = {INPUT_SIZES!r}\n")
