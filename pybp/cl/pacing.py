"""Keeping Ctrl-C prompt: back-projection in launches of bounded duration, a bounded
amount of device work queued ahead, and waits in short sleeps.

A running kernel cannot be stopped, and a thread blocked in ``clWaitForEvents`` or
``clFinish`` sees ``KeyboardInterrupt`` only when the call returns: one 20000^2 slice
on a CPU device is a minute in one launch. So a slice is back-projected in tiles of
rows (and columns), and sinogram rows are filtered in blocks, each launch about
``LAUNCH_SECONDS`` at the speed measured so far (the kernels take the launch's first
row and column; each pixel's sum is computed as in one launch over the slice, so
results are bit-identical); at most ``QUEUED_SECONDS`` of launches are queued ahead of
the device; and every wait polls the event's status between sleeps. An interrupt then
leaves a fraction of a second of work to drain before device memory is released.
On a GPU a launch covers the whole slice and the queue is never held back: 2048^2
pixels of 2048 angles take 3 ms on the H100.
"""

from __future__ import annotations

import time
from collections import deque

import pyopencl as cl

LAUNCH_SECONDS = 0.1  # the longest a launch should run
QUEUED_SECONDS = 0.3  # device work enqueued ahead of what has finished
# Work per second (updates for back-projection, row points for the filter)
# assumed for a stage before its first launch of an executor has been timed: low for
# the device type, so the first launch is short (PoCL with 2 cores: 0.9 GU/s for one
# slice; the H100: 3750 GU/s).
FIRST_RATE = {"cpu": 0.05e9, "gpu": 20e9, "simulator": 1e5}
OTHER_RATE = 1e9
# The fewest work-items a launch of the iterative methods' operators has per compute
# unit, by device type (launch_items): each launch's last work-groups leave the device
# part idle. On the H100 the parallel forward projection (2048 angles x 2048 bins x 64
# slices) took 0.2749 s in 6 launches, 0.2732 s in 4; the cone pair's (512^3, 496 x 960
# x 1248) 0.1734 / 0.1341 s in launches of 14 images / 16 planes at the first rate,
# 0.1624 / 0.1261 s with these (7 / 5 launches), 0.1604 / 0.1251 s in one. A CPU's stay
# short, for Ctrl-C.
LAUNCH_ITEMS_PER_UNIT = {"gpu": 24576}
OTHER_LAUNCH_ITEMS = 4096
MAX_SLEEP = 0.0005  # the longest sleep between two looks at an event (2 ms overshot
# short launches: 40 ms of the 0.35 s reconstruction of a tiny scan on PoCL)


def launch_items(device) -> int:
    """The fewest work-items a launch should have on ``device`` (a
    :class:`pybp.cl.device.DeviceDescription`) to fill it: LAUNCH_ITEMS_PER_UNIT."""
    return device.compute_units * LAUNCH_ITEMS_PER_UNIT.get(device.type, OTHER_LAUNCH_ITEMS)


class Stopped(Exception):
    """Another stage of the work failed or was interrupted."""


def wait(event, stop=None):
    """``event.wait()`` in short sleeps, so that ``KeyboardInterrupt`` comes at once and
    a set ``stop`` (a ``threading.Event``) raises :class:`Stopped`.

    The event's queue is flushed first: an implementation may hold enqueued commands
    until a flush (rusticl and Oclgrind do; so may a GPU driver that batches), and a
    status poll, unlike ``clWaitForEvents``, does not flush."""
    try:
        queue = event.command_queue
    except cl.Error:  # a user event
        queue = None
    if queue is not None:
        queue.flush()
    delay = 5e-5
    while event.command_execution_status > 0:  # queued, submitted or running
        if stop is not None and stop.is_set():
            raise Stopped
        time.sleep(delay)
        delay = min(2 * delay, MAX_SLEEP)
    event.wait()  # returns at once, or raises for a failed command


def finish(queue, stop=None):
    """``queue.finish()``, interruptible (see :func:`wait`)."""
    wait(cl.enqueue_marker(queue), stop)


class Pacer:
    """Launch sizes and the queue's depth for one executor, from the speed of its
    launches so far, per stage (``rates``: work per second).

    On a GPU a launch's duration comes from its profiling timestamps. Elsewhere (CPU
    runtimes, simulators), and where the timestamps cannot be trusted at all
    (``timers=False``, see :func:`pybp.cl.device.probe`), the wall clock bounds it: the
    launches seen finished at one look took at most the time since the look before
    (or since the first of them was launched), so a stage's rate is at most their
    work over that time. PoCL's timestamps passed the probe but now and then said a
    launch that took seconds took microseconds (rates of 1e12 to 1e15 updates a second
    on 2 cores): the next launch then took a whole chunk, and Ctrl-C 13 to 19 s.
    ``listener``: called with the work of each stage's launches seen finished
    (progress within a long slice)."""

    def __init__(self, device_type: str, timers: bool = True):
        self.first_rate = FIRST_RATE.get(device_type, OTHER_RATE)
        self.timers = timers
        self.wall = device_type != "gpu" or not timers
        self.rates = {}
        self.in_flight = deque()  # (event, stage, work, launched at) not seen finished
        self._last_seen = 0.0  # when the last launch was seen finished
        self.listener = None

    def rate(self, stage: str) -> float:
        return self.rates.get(stage, self.first_rate)

    def blocks(self, stage: str, total: int, item_work: int, step: int = 1, most=None):
        """``(start, count)`` of launches over ``total`` items of ``item_work`` work
        each: ``LAUNCH_SECONDS`` each at the rate measured when the launch starts, in
        multiples of ``step`` items, at most ``most``."""
        start = 0
        while start < total:
            count = int(LAUNCH_SECONDS * self.rate(stage) / max(1, item_work)) // step * step
            count = min(total - start, max(step, count), most or total)
            yield start, count
            start += count

    def tiles(self, slice_shape, side: int, updates_per_pixel: int):
        """``(x, y, columns, rows)`` of the back-projection launches over a slice:
        bands of whole rows of ``LAUNCH_SECONDS`` each, split along the row where one
        row of work-groups takes longer; every tile starts at a multiple of the
        work-group side ``side``, so the pixels' sums are those of one launch."""
        ny, nx = slice_shape
        y = 0
        while y < ny:
            pixels = int(LAUNCH_SECONDS * self.rate("backproject") / max(1, updates_per_pixel))
            rows = max(side, pixels // nx // side * side)
            columns = nx if pixels >= side * nx else max(side, pixels // side // side * side)
            rows = min(rows, ny - y)
            for x in range(0, nx, columns):
                yield x, y, min(columns, nx - x), rows
            y += rows

    def admit(self, stage: str, work: int, stop=None):
        """Wait until a launch of ``work`` fits beside the queued ones within
        ``QUEUED_SECONDS``."""
        self._retire()
        while self.in_flight and (sum(u / self.rate(s) for _, s, u, _ in self.in_flight)
                                  + work / self.rate(stage) > QUEUED_SECONDS):
            wait(self.in_flight[0][0], stop)
            self._retire()

    def launched(self, event, stage: str, work: int):
        self.in_flight.append((event, stage, work, time.perf_counter()))

    def _retire(self):
        """Forget finished launches; their speed becomes their stage's rate."""
        finished = []
        while self.in_flight and self.in_flight[0][0].command_execution_status <= 0:
            finished.append(self.in_flight.popleft())
        if not finished:
            return
        now = time.perf_counter()
        since = max(finished[0][3], self._last_seen)  # the wall time they can have taken
        self._last_seen = now
        work = {}
        for event, stage, count, _ in finished:
            work[stage] = work.get(stage, 0) + count
            if self.timers and not self.wall:
                try:
                    seconds = (event.profile.end - event.profile.start) * 1e-9
                except cl.Error:  # a caller's queue without profiling
                    continue
                if seconds > 0:
                    self.rates[stage] = count / seconds
        if self.wall and now > since:
            for stage, count in work.items():
                self.rates[stage] = count / (now - since)
        if self.listener is not None:
            for stage, count in work.items():
                self.listener(stage, count)

    def clear(self):
        """Learn the rates of the launches that finished, then forget the rest (after
        ``finish``, so the last launch of a call is timed too)."""
        self._retire()
        self.in_flight.clear()


def launches(launch, total, step, wait_for=None):
    """``launch(first, count, wait_for)`` over ``total`` items in steps of ``step`` (the
    first launch waits for ``wait_for``), each launch waited for (:func:`wait`) once the
    next is queued, so that one is queued ahead of another; the last launch's event."""
    event, ahead = None, None
    for first in range(0, total, step):
        event = launch(first, min(step, total - first), wait_for if first == 0 else None)
        if ahead is not None:
            wait(ahead)
        ahead = event
    return event
