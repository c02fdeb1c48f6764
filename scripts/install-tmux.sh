#!/usr/bin/env bash
# Installs tmux, which the live-view tests of `dftracer top`
# (tests/tools/test_top.py) drive: they start the view in a tmux pane and
# read the screen back with `tmux capture-pane`.
#
# usage: scripts/install-tmux.sh
#
# Idempotent: does nothing when tmux is on PATH.  Exits 0 when it could not
# be installed (no root, no apt): those tests then skip and say why, unless
# DFTRACER_REQUIRE_TMUX=1 (CI), where that is a failure.
set -uo pipefail

if command -v tmux >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-tmux: installing tmux"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends tmux; } >/tmp/install-tmux.log 2>&1; then
        echo "install-tmux: apt-get failed (see /tmp/install-tmux.log); the live-view tests will skip" >&2
    fi
else
    echo "install-tmux: tmux is missing and apt-get cannot run here (needs root); the live-view tests will skip" >&2
fi
exit 0
