"""The full-screen view of `dftracer top` (rich, the `top` extra).

One refresh every `interval` seconds: look for new files, read what is new
(at most 80% of the interval, so the keys stay responsive; the rest is read
at the next refresh), then draw.  Between refreshes the known files are read
every READ_EVERY seconds, so the read before drawing is short and what is
drawn is at most one interval (plus that read) behind the files.  Keys are
read from the terminal in cbreak mode between refreshes and act at once.  Everything the view has to say (an unreadable file, a
deleted one) is on the screen: nothing is printed while it is shown."""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import common, follow, hang, stacks, top_rows

KEYS_HELP = ("q quit  s sort  r reverse  ↑/↓ select  enter: functions of the selected "
             "process  a: of all  f: hide finished")

READ_EVERY = 0.25  # seconds between reads of the known files while waiting to draw

_STATE_STYLE = {"running": "green", "waiting": "cyan", "finished": "blue", "silent": "yellow",
                "error": "red"}


class KeyInput:
    """Single keys from the terminal on stdin (cbreak mode, restored on exit);
    nothing when stdin is not a terminal."""

    def __init__(self) -> None:
        self.fd: Optional[int] = None
        self.saved: Any = None

    def __enter__(self) -> "KeyInput":
        try:
            import termios
            import tty

            fd = sys.stdin.fileno()
            if os.isatty(fd):
                self.saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self.fd = fd
        except (OSError, ValueError, ImportError, AttributeError):
            self.fd = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            import termios

            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            except OSError:
                pass

    def read(self, timeout: float) -> List[str]:
        """The keys pressed within timeout (names: 'q', 'up', 'down', 'enter',
        'esc', ...), or [] when none came."""
        if self.fd is None:
            time.sleep(max(timeout, 0))
            return []
        try:
            ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
            if not ready:
                return []
            data = os.read(self.fd, 64)
        except InterruptedError:
            return []
        except OSError:
            self.fd = None
            return []
        return parse_keys(data)


_SEQS = {b"\x1b[A": "up", b"\x1bOA": "up", b"\x1b[B": "down", b"\x1bOB": "down",
         b"\x1b[5~": "pgup", b"\x1b[6~": "pgdown", b"\x1b[H": "home", b"\x1bOH": "home",
         b"\x1b[1~": "home", b"\x1b[7~": "home", b"\x1b[F": "end", b"\x1bOF": "end",
         b"\x1b[4~": "end", b"\x1b[8~": "end"}


def parse_keys(data: bytes) -> List[str]:
    """Key names from what the terminal sent (several keys may come at once;
    escape sequences of other keys are skipped)."""
    keys: List[str] = []
    i = 0
    while i < len(data):
        c = data[i:i + 1]
        if c == b"\x1b":
            if data[i + 1:i + 2] in (b"[", b"O"):
                j = i + 2
                while j < len(data) and not 0x40 <= data[j] <= 0x7E:
                    j += 1
                name = _SEQS.get(data[i:j + 1])
                if name:
                    keys.append(name)
                i = j + 1
                continue
            keys.append("esc")
        elif c in (b"\r", b"\n"):
            keys.append("enter")
        else:
            keys.append(c.decode("latin-1"))
        i += 1
    return keys


class ViewState:
    def __init__(self, sort: str) -> None:
        self.sort = sort
        self.reverse = False
        self.selected = 0         # index in the sorted rows
        self.selected_path = ""   # kept across refreshes and re-sorting
        self.focus: Optional[str] = None  # path whose functions are shown, or None: all
        self.first = 0            # the first row shown
        self.hide_finished = False

    def key(self, k: str, rows: List[Dict[str, Any]]) -> bool:
        """Acts on a key; False for quit."""
        n = len(rows)
        if k in ("q", "Q"):
            return False
        if k == "s":
            self.sort = top_rows.SORTS[(top_rows.SORTS.index(self.sort) + 1) % len(top_rows.SORTS)]
        elif k == "r":
            self.reverse = not self.reverse
        elif k in ("down", "j"):
            self.selected = min(self.selected + 1, max(n - 1, 0))
        elif k in ("up", "k"):
            self.selected = max(self.selected - 1, 0)
        elif k == "pgdown":
            self.selected = min(self.selected + 10, max(n - 1, 0))
        elif k == "pgup":
            self.selected = max(self.selected - 10, 0)
        elif k == "home":
            self.selected = 0
        elif k == "end":
            self.selected = max(n - 1, 0)
        elif k == "enter" and n:
            path = rows[min(self.selected, n - 1)]["path"]
            self.focus = None if self.focus == path else path
        elif k in ("a", "esc"):
            self.focus = None
        elif k == "f":
            self.hide_finished = not self.hide_finished
        if n and k not in ("s", "r"):
            self.selected_path = rows[min(self.selected, n - 1)]["path"]
        return True

    def place(self, rows: List[Dict[str, Any]]) -> None:
        """Keeps the selection on the same process after a refresh or a sort."""
        for i, r in enumerate(rows):
            if r["path"] == self.selected_path:
                self.selected = i
                return
        self.selected = min(self.selected, max(len(rows) - 1, 0))
        if rows:
            self.selected_path = rows[self.selected]["path"]


def shown_rows(snap: Dict[str, Any], vs: ViewState) -> List[Dict[str, Any]]:
    rows = top_rows.sort_rows(snap["processes"], vs.sort, vs.reverse)
    if vs.hide_finished:
        rows = [r for r in rows if r["state"] != "finished"]
    return rows


def _tail(path: str, n: int) -> List[str]:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(size - 8192, 0))
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []


# Columns left out, in this order, when the terminal is too narrow for all
# (indices into top_rows.ROW_HEADERS), once the note has shrunk to NOTE_MIN.  The
# columns that say which process a row is (rank, host, pid) are never left
# out nor cut; the note is cut first, and left out last.
IDENTITY = (0, 1, 2)
HOST_MAX = 64        # a host name longer than any real one (HOST_NAME_MAX) is cut there
NOTE_MIN = 12
_DROP_ORDER = [14, 13, 15, 9, 5, 11, 17, 3, 8, 12, 16, 10, 18, 7, 6, 4, 19]


def column_widths(texts: List[List[str]]) -> List[int]:
    """Each column's width (its widest cell or header), the note's at most 24."""
    widths = [max([len(h)] + [len(r[i]) for r in texts]) for i, h in enumerate(top_rows.ROW_HEADERS)]
    widths[1] = min(widths[1], HOST_MAX)
    widths[-1] = min(widths[-1], 24)  # the note is cut to what is left
    return widths


def columns_that_fit(texts: List[List[str]], width: int, one_host: bool) -> Tuple[List[int], bool]:
    """The columns of the process table to show in `width` characters (one
    space between columns, or two when they fit so), and whether there is
    room for two.  `one_host` is kept for callers: the host is always shown."""
    n = len(top_rows.ROW_HEADERS)
    widths = column_widths(texts)
    keep = list(range(n))
    if sum(widths) + 2 * (n - 1) <= width:
        return keep, True

    def need(cols: List[int]) -> int:
        note = min(widths[-1], NOTE_MIN) if n - 1 in cols else 0
        return sum(widths[i] for i in cols if i != n - 1) + note + len(cols) - 1

    for col in _DROP_ORDER:
        if need(keep) <= width:
            break
        keep.remove(col)
    return keep, False


def render(snap: Dict[str, Any], vs: ViewState, paths: List[str], width: int, height: int,
           top_n: Optional[int], output: Optional[str]) -> Any:
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    rows = shown_rows(snap, vs)
    vs.place(rows)
    out_lines = _tail(output, 3) if output else []
    fn_rows = top_n if top_n is not None else max(3, min(10, (height - 12) // 3))
    fns = snap["top_functions"][:fn_rows]
    # header 2, table head 2, functions title + head 3, footer 1, output block
    room = height - 8 - (len(fns) + 1 if fns else 1) - (len(out_lines) + 1 if output else 0)
    room = max(room - (1 if snap.get("hang") else 0), 3)
    if vs.selected < vs.first:
        vs.first = vs.selected
    elif vs.selected >= vs.first + room:
        vs.first = vs.selected - room + 1
    vs.first = max(0, min(vs.first, max(len(rows) - room, 0)))
    shown = rows[vs.first:vs.first + room]

    title = Text.assemble(("dftracer top", "bold"), "  ", top_rows.printable(" ".join(paths)), "  ",
                          (top_rows.headline(snap), ""))
    if snap.get("behind"):
        title.append(f"  (reading: {snap['behind']} files behind)", style="yellow")
    if snap.get("hang"):  # first thing seen: the banner above everything
        title = Group(Text(top_rows.printable(snap["hang"]["message"]), style="bold white on red"), title)
    sort = f"sorted by {vs.sort}{' (reversed)' if vs.reverse else ''}"
    if vs.hide_finished:
        sort += f"; {snap['finished']} finished hidden (f shows them)"
    texts = [top_rows.row_cells(p) for p in shown]
    keep, roomy = columns_that_fit(texts, width, len({p["host"] for p in rows}) <= 1)
    # the box puts one space between columns; a second one when there is room
    table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False, show_edge=False,
                  padding=(0, 1, 0, 0) if roomy else 0, header_style="bold")
    widths = column_widths(texts)
    for i in keep:
        h = top_rows.ROW_HEADERS[i]
        # rank, host and pid keep their width; the other columns may be cut
        table.add_column(h, justify="right" if i in top_rows.RIGHT else "left", no_wrap=True,
                         overflow="ellipsis", min_width=widths[i] if i in IDENTITY else None,
                         max_width=28 if h == "name" else (HOST_MAX if h == "host" else None))
    for i, p in enumerate(shown):
        cells: List[Any] = list(texts[i])
        style = "reverse" if vs.first + i == vs.selected else ("dim" if p["state"] == "finished" else "")
        cells[4] = Text(cells[4], style=_STATE_STYLE.get(p["state"], ""))
        if p["mark"]:
            cells[-1] = Text(cells[-1], style="red" if p["state"] == "error" else "yellow")
        table.add_row(*[cells[k] for k in keep], style=style)
    more = len(rows) - len(shown)
    parts: List[Any] = [title, Text(sort + (f"; {more} more rows (↑/↓ to scroll)" if more else ""),
                                    style="dim"), table]
    if not snap["processes"]:
        why = "; ".join(f"{a}: {m}" for a, m in snap.get("errors", [])) or "no trace file yet"
        why = top_rows.printable(why)
        parts.append(Text(f"waiting for trace files ({why})", style="yellow"))
    who = "all processes" if vs.focus is None else "pid " + str(next(
        (p["pid"] for p in rows if p["path"] == vs.focus), "?"))
    if fns:
        ft = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1),
                   header_style="bold",
                   title=f"top functions, last {snap['window_s']:g} s, {who}", title_justify="left")
        for h, right in (("cat", False), ("name", False), ("calls", True), ("time", True),
                         ("share", True)):
            ft.add_column(h, justify="right" if right else "left", no_wrap=True,
                          overflow="ellipsis", max_width=60 if h == "name" else None)
        for f in fns:
            ft.add_row(top_rows.printable(f["cat"]), top_rows.printable(f["name"]), f"{f['count']:,}",
                       common.fmt_us(f["time_us"]), top_rows.fmt_share(f["share"]))
        parts.append(ft)
    else:
        parts.append(Text(f"no events in the last {snap['window_s']:g} s ({who})", style="dim"))
    if output:
        parts.append(Text(f"output of the command ({top_rows.printable(output)}):", style="dim"))
        parts.extend(Text(top_rows.printable(line), style="dim", no_wrap=True, overflow="ellipsis")
                     for line in out_lines)
    parts.append(Text(KEYS_HELP, style="dim"))
    return Group(*parts)


def live(fol: follow.Follower, paths: List[str], interval: float = 1.0, sort: str = "rank",
         top_n: Optional[int] = None, proc: Any = None, output: Optional[str] = None,
         hang_after: float = hang.DEFAULT_AFTER) -> bool:
    """Shows the view until q (returns False) or, with proc, until that
    process ends (returns True).  SIGTERM and SIGHUP end it like q."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    vs = ViewState(sort)
    stop: List[bool] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(True)

    old = {}
    if proc is None:  # under `dftracer run`, its own handlers pass signals to the command
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                old[sig] = signal.signal(sig, on_signal)
            except (OSError, ValueError):
                pass
    ended = False
    try:
        with KeyInput() as keys, Live(console=console, screen=True, auto_refresh=False,
                                      redirect_stdout=False, redirect_stderr=False) as view:
            due = time.monotonic()
            while not stop:
                fol.refresh(budget_s=0.8 * interval)
                if proc is not None and proc.poll() is not None:
                    ended = True
                    break
                snap = fol.snapshot(only={vs.focus} if vs.focus else None, top=0)
                snap["hang"] = hang.from_follower(fol, snap["time"], hang_after)
                stacks.ask_stacks(fol, snap["hang"])  # file and line at the next refresh
                w, h = console.size
                view.update(render(snap, vs, paths, w, h, top_n, output), refresh=True)
                due += interval
                now = time.monotonic()
                if due < now:
                    due = now  # reading took longer than the interval: no catching up in bursts
                read_at = time.monotonic() + READ_EVERY
                while not stop and (left := due - time.monotonic()) > 0:
                    pressed = keys.read(min(left, read_at - time.monotonic(), READ_EVERY))
                    if not pressed:
                        if proc is not None and proc.poll() is not None:
                            break
                        if time.monotonic() >= read_at and due - time.monotonic() > 0.05:
                            # read as data comes, so that the read before drawing is short
                            fol.refresh(budget_s=READ_EVERY * 0.8, find=False)
                            read_at = time.monotonic() + READ_EVERY
                        continue
                    focus = vs.focus
                    for k in pressed:
                        if not vs.key(k, shown_rows(snap, vs)):
                            return False
                    if vs.focus != focus:
                        snap = fol.snapshot(only={vs.focus} if vs.focus else None, top=0)
                    w, h = console.size
                    view.update(render(snap, vs, paths, w, h, top_n, output), refresh=True)
    except KeyboardInterrupt:
        return False
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return ended
