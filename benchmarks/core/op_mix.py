"""The torch-like op mix the core benchmarks trace (bench_core, bench_writer,
bench_bytes), and the header that hands it to their child processes: those
run under any interpreter (a reference venv too), so the values travel as
source text, not as an import of this module."""

OP_NAMES = ["aten::addmm", "aten::linear", "aten::relu", "aten::empty", "aten::t",
            "aten::transpose", "aten::as_strided", "aten::mm", "aten::add_", "aten::copy_",
            "aten::view", "aten::convolution", "aten::_convolution", "aten::zeros"]
DURATIONS_US = [0, 1, 1, 2, 3, 5, 8, 13, 40, 200]

# Prepended to a phase's source: defines OP_NAMES and DURATIONS_US there.
PHASE_HEADER = f"OP_NAMES = {OP_NAMES!r}\nDURATIONS_US = {DURATIONS_US!r}\n"
