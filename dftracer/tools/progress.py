"""A progress bar on stderr, shown only on a terminal and after one second."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: Optional[TextIO] = None,
                 enabled: Optional[bool] = None, delay: float = 1.0) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.start = time.monotonic()
        self.delay = delay
        self.done = 0
        self.events = 0
        self.shown = False
        self._last = 0.0

    def update(self, files: int = 1, events: int = 0) -> None:
        self.done += files
        self.events += events
        self.tick()

    def tick(self) -> None:
        """Redraws the bar (elapsed time moves on while a large file is read)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.delay or (now - self._last < 0.1 and self.done < self.total):
            return
        self._last = now
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        elapsed = now - self.start
        rate = self.events / max(elapsed, 1e-9)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{' ' * (width - filled)}] "
            f"{self.done}/{self.total} files, {self.events:,} events ({rate / 1e6:.1f} M/s), "
            f"{elapsed:.0f} s"
        )
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
