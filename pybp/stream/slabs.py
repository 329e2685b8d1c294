"""The stream's second schedule: parts of an output that stay on the device while every
chunk of the input is added into them (cone beam's slabs of the volume, each the sum
of every projection's pass), then come down once. Each device, on a thread of its own,
takes the next part when it is free, so a faster device takes more; its chunks go
through the same executor, staging, pacing and pipeline threads as the rows' stream's
(pybp/stream/pipeline.py), and an error or Ctrl-C on any device ends every device
within a fraction of a second.

A member (one device's recipe) gives, for a part: ``begin(part)``, the schedule of its
chunks and how to read and copy them (``(rows, read, copy)`` as
:func:`pybp.stream.pipeline.stream` takes them, with its executor: ``executor``, and
``direct``: whether each chunk goes up by one DMA); ``end(part, pool, stop)``, called
once every chunk is in, which reads the part back
into the output (or hands it to writers of its own); and ``settle(stop, quiet)``,
called once it takes no more parts, which waits for those writers (raising their
first error unless ``quiet``).
"""

from __future__ import annotations

import threading

from pybp.stream import numa, pipeline, sources
from pybp.stream.jobs import join_all


def accumulate(members, take, progress=None, stop=None, weight=None) -> int:
    """Run every part ``take()`` gives (None: no more; any thread) on ``members``;
    return the sum of what the stages reported (values replaced). ``progress``: a
    :class:`pybp.stream.progress.Progress` moved on by each chunk, by ``weight(part)``
    times its count where parts differ in size."""
    stop = stop if stop is not None else threading.Event()
    reported = [0] * len(members)

    def runs(index, member):
        def run():
            # (on the CPUs of the device's NUMA node, as the rows' stream: stream/numa.py)
            with numa.near(member.executor.device), sources.copy_pools() as (reading, writing):
                try:
                    while not stop.is_set() and (part := take()) is not None:
                        rows, read, copy = member.begin(part, reading)
                        bar = progress if progress is None or weight is None else \
                            progress.scaled(weight(part))
                        reported[index] += pipeline.stream(member.executor, rows, read, None,
                                                           bar, None, stop, copy, member.direct)
                        if stop.is_set():
                            break
                        member.end(part, writing, stop)
                except BaseException:
                    member.settle(stop, quiet=True)
                    raise
                member.settle(stop)
        return run

    calls = [runs(i, member) for i, member in enumerate(members)]
    if len(calls) == 1:
        calls[0]()
    else:
        join_all(calls, stop)
    return sum(reported)


class Parts:
    """``parts`` handed out in order, one at a time, to any thread; none once ``stop``
    is set."""

    def __init__(self, parts, stop=None):
        self._parts, self._lock = iter(parts), threading.Lock()
        self.stop = stop

    def __call__(self):
        with self._lock:
            if self.stop is not None and self.stop.is_set():
                return None
            return next(self._parts, None)
