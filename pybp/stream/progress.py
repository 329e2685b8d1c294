"""The progress line of long work: slices done, GU/s and time left."""

from __future__ import annotations

import sys
import threading
import time

from pybp import checks


class Progress:
    """Slices done, GU/s and time left on standard error, once work has run for
    ``delay`` seconds (short calls print nothing); ``enabled=False`` silences it.
    :meth:`update` counts slices once they are in the output; where the work in flight
    runs ahead of them, the line says how many are written.
    Several pipelines may update one (any thread). Within a long slice, the updates of
    the back-projection launches seen finished (:meth:`work`) move it on: a single
    slice of 20000^2 on a CPU shows its share done."""

    def __init__(self, total, updates_per_slice, enabled=True, delay=2.0, stream=sys.stderr,
                 what="slices", rate="GU/s"):
        self.total, self.per_slice = total, updates_per_slice
        self.enabled = checks.flag(enabled, "progress")  # every call's line comes here
        self.what, self.rate = what, rate
        self.delay, self.stream = delay, stream
        self.done, self.start, self.shown, self.last = 0, time.perf_counter(), False, 0.0
        self.updates = 0  # of the back-projection, seen finished
        self._first = None  # (time, count) when the first work was seen done
        self._lock = threading.Lock()

    def update(self, count):
        with self._lock:
            self.done += count
            if abs(self.done - self.total) <= 1e-9 * self.total:  # weighted counts' rounding
                self.done = self.total
            self._show()

    def scaled(self, weight: float) -> "Scaled":
        """This line as work of ``weight`` times the size it counts in takes it: a slab
        of 112 planes where the line counts slabs of 292 on average moves it by 112/292
        of a projection for each."""
        return Scaled(self, weight)

    def work(self, stage, done):
        """A :class:`pybp.cl.pacing.Pacer`'s listener: ``done`` work of ``stage`` finished."""
        if stage == "backproject":
            with self._lock:
                self.updates += done
                self._show()

    def _show(self):
        now = time.perf_counter()
        elapsed = now - self.start
        finished = self.done >= self.total
        done = self.done if finished else \
            max(self.done, min(self.total, self.updates / max(1, self.per_slice)))
        if done and self._first is None:
            self._first = (now, done)
        if not self.enabled or elapsed < self.delay or (now - self.last < 0.25 and not finished):
            return
        # the rate and the time left at the pace since the first work was done: the
        # set-up before it (kernels built, data up) is not the work's (a 2.7 s run said
        # "582 s left"); until more is done than then, no line
        since, then = self._first or (now, done)
        if not done or (done <= then and not finished):
            return
        self.last, self.shown = now, True
        pace = (now - since) / (done - then) if done > then else elapsed / done
        rate = self.per_slice / pace * 1e-9
        left = pace * (self.total - done)
        speed = f"{rate:.0f}" if rate >= 10 else f"{rate:.2g}"  # a CPU's 0.14 GUPS, not 0
        count = f"{done:.0f}" if done == int(done) or done >= 10 else f"{done:.1f}"
        # update() counts slices once written; the back-projection's work, those in flight
        kept = f" ({self.done:.0f} written)" if self.what == "slices" and \
            int(done) > self.done else ""
        print(f"\rpybp: {count}/{self.total} {self.what}{kept}, {speed} {self.rate}, "
              f"{left:.0f} s left ", end="\n" if finished else "", file=self.stream, flush=True)

    def close(self):
        """End the line of an unfinished bar (once, whichever pipeline stops first)."""
        with self._lock:
            if self.shown and self.done < self.total:
                print(file=self.stream, flush=True)
            self.shown = False


class Scaled:
    """A :class:`Progress` seen by work of another size (:meth:`Progress.scaled`)."""

    def __init__(self, bar: Progress, weight: float):
        self.bar, self.weight = bar, weight

    def update(self, count):
        self.bar.update(count * self.weight)

    def work(self, stage, done):
        self.bar.work(stage, done)

    def close(self):
        self.bar.close()
