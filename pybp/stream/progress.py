"""The progress line of long work: slices done, GU/s and time left."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    """Slices done, GU/s and time left on standard error, once work has run for
    ``delay`` seconds (short calls print nothing); ``enabled=False`` silences it.
    Several pipelines may update one (any thread)."""

    def __init__(self, total, updates_per_slice, enabled=True, delay=2.0, stream=sys.stderr,
                 what="slices", rate="GU/s"):
        self.total, self.per_slice, self.enabled = total, updates_per_slice, enabled
        self.what, self.rate = what, rate
        self.delay, self.stream = delay, stream
        self.done, self.start, self.shown, self.last = 0, time.perf_counter(), False, 0.0
        self._lock = threading.Lock()

    def update(self, count):
        with self._lock:
            self._update(count)

    def _update(self, count):
        self.done += count
        now = time.perf_counter()
        elapsed = now - self.start
        finished = self.done >= self.total
        if not self.enabled or elapsed < self.delay or (now - self.last < 0.25 and not finished):
            return
        self.last, self.shown = now, True
        rate = self.done * self.per_slice / elapsed * 1e-9
        left = elapsed / self.done * (self.total - self.done)
        speed = f"{rate:.0f}" if rate >= 10 else f"{rate:.2g}"  # a CPU's 0.14 GUPS, not 0
        print(f"\rpybp: {self.done}/{self.total} {self.what}, {speed} {self.rate}, "
              f"{left:.0f} s left ", end="\n" if finished else "", file=self.stream, flush=True)

    def close(self):
        """End the line of an unfinished bar (once, whichever pipeline stops first)."""
        with self._lock:
            if self.shown and self.done < self.total:
                print(file=self.stream, flush=True)
            self.shown = False
