"""Whether the process that writes a trace still runs: the one rule every
reader takes for a file without its `end` event (docs/cli.md, "Still running
or ended"): `dftracer top`'s dead and stopped processes, `summary --memory`'s
and `report`'s `end` column, and the dead ranks of the hang post mortem.
And how a process ended: an `end` that names a signal (`"signal":15`,
docs/trace-format.md) was written by a process that signal then ended (a
launcher, a scheduler, `kill`): asked to stop, never finished normally.

A trace names its host and its pid (its name and its `HH`/`start` events,
docs/trace-format.md).  On this host the pid decides: a process with that pid
runs, or is stopped (state T/t: SIGSTOP, a debugger); no such process, or a
zombie, has ended.  Pids are reused, but only once their process has ended,
which is after its last write: a process that started after the trace's
newest time is another one.  (The newest time, not the first: an event
with a made-up early time cannot make a live process look gone.)  Of another
host's process nothing can be asked: it runs when its file was written within
RECENT_S and so was its newest event (a live tracer writes at least a `clock`
pair every ten flush intervals, 10 s by default; a copied or hand-made file
has a new mtime but old times)."""

from __future__ import annotations

import os
import signal
import time
from typing import Optional

from dftracer.tools import trace_name

PID_MAX = 1 << 22     # the kernel's highest pid_max: a larger pid in a name is no process's
RECENT_S = 20.0       # another host's trace written this recently: its process runs
START_SLACK_S = 2.0   # /proc/stat's btime has whole seconds, the ticks 10 ms

_HOSTS = trace_name.hosts()
_BOOT: list = []      # [btime, ticks a second], read once


def on_this_host(host: Optional[str]) -> bool:
    """Whether a trace's host (as the reader passes give it) is this machine."""
    return bool(host) and host in _HOSTS


def _boot() -> Optional[tuple]:
    if not _BOOT:
        btime = None
        try:
            with open("/proc/stat", "rb") as fh:
                for line in fh:
                    if line.startswith(b"btime "):
                        btime = int(line.split()[1])
                        break
            ticks = os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            btime, ticks = None, 0
        _BOOT.append((btime, ticks) if btime is not None and ticks > 0 else None)
    return _BOOT[0]


def _pid_exists(pid: int) -> Optional[bool]:
    """Where /proc cannot say (another OS, hidepid): whether kill(pid, 0) finds it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return True


def proc_state(host: Optional[str], pid: object, newest_us: Optional[int] = None) -> Optional[str]:
    """The process of a trace, when this host can tell: `running` (alive:
    running or sleeping), `stopped` (state T or t), `gone` (no such process,
    a zombie, or one with that pid that started more than START_SLACK_S after
    newest_us, the trace's newest time, us since the epoch), or None (another
    host's, no pid, or not knowable).  A pid no kernel gives is no process."""
    if not on_this_host(host) or not isinstance(pid, int) or isinstance(pid, bool):
        return None
    if not 0 < pid <= PID_MAX:
        return "gone"
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096)
    except FileNotFoundError:
        exists = _pid_exists(pid)  # /proc mounted with hidepid hides others' processes
        return None if exists is None else ("gone" if not exists else None)
    except OSError:
        return None
    rest = stat.rpartition(b")")[2].split()
    if not rest:
        return None
    if rest[0] in (b"Z", b"X"):
        return "gone"  # killed, not yet reaped by its parent (torchrun, a shell)
    boot = _boot()
    if newest_us and boot and len(rest) > 19 and rest[19].isdigit():
        started = boot[0] + int(rest[19]) / boot[1]
        if started > newest_us / 1e6 + START_SLACK_S:
            return "gone"  # the pid was given again, to a later process
    return "stopped" if rest[0] in (b"T", b"t") else "running"


def recently_written(path: Optional[str], newest_us: Optional[int],
                     now: Optional[float] = None) -> bool:
    """Whether a trace was written within RECENT_S: its file's mtime and its
    newest time (us since the epoch, as its events carry it)."""
    if not path or not newest_us:
        return False
    now = time.time() if now is None else now
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return False
    return now - mtime <= RECENT_S and now - newest_us / 1e6 <= RECENT_S


def process_state(host: Optional[str], pid: object, path: Optional[str],
                  newest_us: Optional[int], now: Optional[float] = None) -> str:
    """The process of a trace without `end`: `running`, `stopped` (this
    host's only) or `gone`; by its pid on this host (proc_state), by recent
    writes elsewhere (recently_written).  newest_us: the trace's newest time
    (its events', snapshots', clock pairs')."""
    state = proc_state(host, pid, newest_us)
    if state is not None:
        return state
    return "running" if recently_written(path, newest_us, now) else "gone"


def signal_name(sig: object) -> str:
    """`SIGTERM` for 15; `signal 40` for a number without a name here."""
    try:
        return signal.Signals(int(sig)).name  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return f"signal {sig}"


def end_signal(r: dict) -> int:
    """The signal a reader pass's result says its `end` names (0: none, or
    no `end`): the process was ended by it after finalizing."""
    sig = r.get("end_signal") if r.get("finalized") else 0
    return sig if isinstance(sig, int) and not isinstance(sig, bool) and sig > 0 else 0


def ending(finalized: bool, sigterm: bool, host: Optional[str], pid: object,
           path: Optional[str], newest_us: Optional[int], now: Optional[float] = None,
           signalled: int = 0) -> str:
    """How a trace's process ended (docs/cli.md, "summary --memory", End):
    `finalized` (its `end` event, naming no signal), `exited` (asked to
    stop: its `end` names the signal that ended it, `signalled`, or no `end`
    but its SIGTERM stacks), `running` (neither yet, and its process runs or
    is stopped: process_state), `killed` (neither, and gone), `unknown`
    (gone, and no event with a time)."""
    if finalized:
        return "exited" if signalled else "finalized"
    if sigterm:
        return "exited"
    if process_state(host, pid, path, newest_us, now) != "gone":
        return "running"
    return "killed" if newest_us else "unknown"
