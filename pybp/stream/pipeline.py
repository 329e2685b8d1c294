"""Streaming slices through one executor (paper Sect. 4, Fig. 4; docs/architecture.md).

A reader thread copies each chunk from the caller's input into the executor's
page-locked staging, the calling thread enqueues the chunk's device work, and a writer
thread downloads finished slices and hands them, a piece at a time, to the executor's
writing threads, which copy them into the caller's output. Bounded hand-offs keep at most
the executor's slots in flight, so host memory stays a few chunks beyond the caller's
arrays. Copies of NumPy arrays are split over a few threads (NumPy releases the GIL
while copying): one thread copies pageable memory at a fraction of what the device's
DMA and the host's memory can do (pybp/stream/sources.py). Several pipelines (one per
device) can share one
:class:`Rows`: each reader takes the next chunk when a slot of its own is free, so a
faster device takes more.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from pybp.cl.pacing import Stopped, wait
from pybp.stages.normalize import NonFinite

POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Span:
    """The rows of one chunk: its own ``count`` rows from ``start`` (those it writes),
    read with ``before`` and ``after`` rows of margin (the stages' margins, fewer where
    the rows that exist end): rows ``[first, first + rows)`` are read. On a grid of
    chunks (:class:`Rows`), ``grid``: rows of its grid chunk before and after its own,
    outside the run (read among the margins: a stage that reaches across rows treats
    the grid chunk as the chunk, so that its values do not depend on the run)."""

    start: int
    count: int
    before: int = 0
    after: int = 0
    grid: tuple = (0, 0)
    skip: tuple = (0, 0)  # first and last own rows not kept (computed, neither written nor counted)
    origin: int = 0  # the detector row of row 0 (a stage weighting each row by its place)

    @property
    def first(self) -> int:
        return self.start - self.before

    @property
    def rows(self) -> int:
        return self.before + self.count + self.after


class Rows:
    """Rows ``[0, n_slices)`` handed out in chunks, in order, to one or more pipelines
    (any thread). Chunks start at multiples of ``align`` (the widest pass), so slices
    group into kernel passes as they do through one device, and give the same values.
    ``before`` and ``after``: rows that exist beyond them on each side (the detector
    rows around a slab), which margins may read.

    With ``grid``, chunks are those of a grid of ``grid`` rows fixed by the detector
    (row 0 here is its row ``origin``), cut to the rows asked for, each read with its
    grid chunk's rows: whatever rows a run takes, a stage that reaches across rows sees
    the chunks of the whole detector (:class:`pybp.stream.recipe.Recipe.chunk_grid`)."""

    def __init__(self, n_slices, align=1, before=0, after=0, origin=0, grid=None, keep=None):
        self.n_slices, self.align = n_slices, align
        self.before, self.after = before, after
        self.origin, self.grid = origin, grid
        self.keep = keep or (0, n_slices)  # rows kept: the others computed, not written
        self.next, self._lock = 0, threading.Lock()

    def span(self, start, count, margin) -> Span:
        """Rows ``[start, start + count)`` with ``margin`` rows each side (and the rest
        of their grid chunk), where they exist."""
        lead = trail = 0
        if self.grid:
            first = (self.origin + start) // self.grid * self.grid - self.origin
            lead = start - first
            trail = max(0, min(first + self.grid, self.n_slices + self.after) - start - count)
        kept = (max(start, self.keep[0]), min(start + count, self.keep[1]))
        skip = (kept[0] - start, start + count - kept[1]) if kept[0] < kept[1] else (count, 0)
        return Span(start, count, min(lead + margin, start + self.before),
                    min(trail + margin, self.n_slices + self.after - start - count),
                    (lead, trail), skip, self.origin)

    def take(self, most):
        """The next ``(start, count)`` of at most ``most`` rows (on a grid: the rest of
        a grid chunk), or None when all are taken."""
        if most >= self.align:  # (chunks narrower than a pass cannot keep the grouping)
            most = most // self.align * self.align
        with self._lock:
            start = self.next
            if start >= self.n_slices:
                return None
            if self.grid:
                stop = ((self.origin + start) // self.grid + 1) * self.grid - self.origin
            else:
                stop = start + most
            self.next = min(self.n_slices, stop)
            return start, self.next - start


def _get(hand_off, stop):
    while True:
        try:
            return hand_off.get(timeout=POLL_SECONDS)
        except queue.Empty:
            if stop.is_set():
                raise Stopped from None


def _put(hand_off, item, stop):
    while True:
        try:
            return hand_off.put(item, timeout=POLL_SECONDS)
        except queue.Full:
            if stop.is_set():
                raise Stopped from None


def _acquire(semaphore, stop):
    while not semaphore.acquire(timeout=POLL_SECONDS):
        if stop.is_set():
            raise Stopped


def _writer(write, start, progress):
    """``write`` for the pieces of the chunk from row ``start`` (and its ``download``,
    where the output takes the chunk by DMA: :meth:`pybp.stream.executor.Executor.download`).
    Each piece moves ``progress`` once it is written, by the rows ``write`` says it wrote
    (None: all of them), so that the line never counts slices not yet in the output."""
    def placed(a, b, slices):
        wrote = write(start + a, b - a, slices)
        if progress is not None:
            progress.update(b - a if wrote is None else wrote)
    direct = getattr(write, "download", None)
    if direct is not None:
        placed.download = lambda queue, buffer, count: direct(queue, buffer, start, count)
    return placed


def _counted_by_writes(executor, write) -> bool:
    """Whether a chunk's slices move the progress line as their pieces are written
    (:func:`_writer`); else once the chunk is down (the stages keep what they make, or
    one DMA puts them in place)."""
    return executor.layout.output is not None and getattr(write, "download", None) is None


@contextlib.contextmanager
def _alone(executor, progress, stop):
    """A stream on the calling thread alone: ``stop`` set elsewhere ends it quietly;
    an error, or Ctrl-C, sets it and closes the progress line; the device work in flight
    is waited for either way."""
    try:
        yield
    except Stopped:
        pass
    except BaseException:
        stop.set()
        if progress is not None:
            progress.close()
        raise
    finally:
        executor.finish()


def _serial(executor, rows, read, write, progress, timings, stop, copy) -> int:
    """:func:`stream` in the calling thread, one step after another, for
    implementations that take commands from one thread at a time."""
    stop = stop if stop is not None else threading.Event()
    clipped, slices = 0, 0
    with _alone(executor, progress, stop):
        while (taken := rows.take(executor.memory.chunk_slices)) is not None:
            start, count = taken
            span = rows.span(start, count, executor.margin)
            block, references = read(span)
            event, stages = executor.upload(0, block, references, copy, stop)
            wait(event, stop)
            computed, computing = executor.compute(0, span, stop)
            wait(computed, stop)
            try:
                downloaded, _, reported = executor.download(
                    0, count, _writer(write, start, progress), stop)
            except NonFinite as exc:
                exc.rows = (start, count)
                raise
            executor.record(stages + computing + downloaded)
            clipped += reported
            slices += count
            if progress is not None and not _counted_by_writes(executor, write):
                progress.update(count)
        executor.written(stop)
    if timings is not None:
        timings.update(wait_device=0.0, slices=slices)
    return clipped


def _direct(executor, rows, read, progress, timings, stop) -> int:
    """:func:`stream` where every chunk goes up by one DMA (from page-locked memory:
    :meth:`pybp.stream.executor.Executor.upload`'s ``upload``) and the stages keep what
    they make and report nothing: one thread enqueues each chunk's upload and then its
    stages at once, the device ordering them (the upload after the slot's last chunk
    has read its input, the stages after the upload: :meth:`Executor.upload`'s and
    :meth:`Executor.compute`'s ``wait_for``), and waits only where the pacer holds it. A
    host wait for each of those events (its polls' sleeps included) left cone beam's
    passes from its store (512^3 at a quarter limit, H200: 341 of them, 0.28 ms of
    kernel each) at about 0.55 ms a pass (docs/design.md, section 8)."""
    stop = stop if stop is not None else threading.Event()
    slots, slices = len(executor.slots), 0
    computed = collections.deque()  # (event, stages, count): enqueued, not yet seen done

    def seen(everything=False):
        nonlocal slices
        while computed and (everything or computed[0][0].command_execution_status <= 0):
            event, stages, count = computed.popleft()
            wait(event, stop)
            executor.record(stages)
            slices += count
            if progress is not None:
                progress.update(count)

    with _alone(executor, progress, stop):
        i = 0
        while (taken := rows.take(executor.memory.chunk_slices)) is not None:
            span, slot = rows.span(*taken, executor.margin), i % slots
            block, references = read(span)
            last_reader = executor.slots[slot].input_read
            up, uploaded = executor.upload(
                slot, block, references, stop=stop,
                wait_for=None if last_reader is None else [last_reader])
            done, stages = executor.compute(slot, span, stop, wait_for=[up])
            computed.append((done, uploaded + stages, span.count))
            seen()
            i += 1
        seen(everything=True)
    if timings is not None:
        timings.update(wait_device=0.0, slices=slices)
    return 0


def _in_place(executor, rows, read, write, progress, timings, stop) -> int:
    """:func:`stream` where every chunk goes up by one DMA, its stages work in place and
    it comes down by one (``write.download``: from and into page-locked memory, cone
    beam's store filled in place): each slot's chunks go up, through their stages and
    down on a queue of the slot's own, in order, with no host wait between, and the
    slots' queues overlap on the device (one's upload beside another's kernels and a
    third's download). One thread enqueues; it waits only to keep at most two chunks
    a slot in flight, and reads each chunk's counters once it is down. With the
    three threads' hand-offs the store's fill of 512^3 (62 chunks, H200) took 0.166 s
    for 0.133 s of transfers and kernels, of which 0.031 s overlapped."""
    stop = stop if stop is not None else threading.Event()
    slots, clipped, slices = len(executor.slots), 0, 0
    pending = collections.deque()  # (last event, counters, stages, count), oldest first

    def settle():
        nonlocal clipped, slices
        event, counts, stages, count = pending.popleft()
        wait(event, stop)
        executor.record(stages)
        clipped += executor.counted(counts)  # (a stage may refuse the chunk here)
        slices += count
        if progress is not None:
            progress.update(count)

    with _alone(executor, progress, stop):
        i = 0
        while (taken := rows.take(executor.memory.chunk_slices)) is not None:
            span = rows.span(*taken, executor.margin)
            while pending and (len(pending) >= 2 * slots or
                               pending[0][0].command_execution_status <= 0):
                settle()
            slot = i % slots
            on = executor.slot_queue(slot)
            block, references = read(span)
            _, stages = executor.upload(slot, block, references, stop=stop, queue=on)
            _, computed = executor.compute(slot, span, stop, on)
            counts, down = executor.download_after(
                slot, span.count, _writer(write, span.start, None), on)
            pending.append((down[-1][1], counts, stages + computed + down, span.count))
            i += 1
        while pending:
            settle()
    if timings is not None:
        timings.update(wait_device=0.0, slices=slices)
    return clipped


def stream(executor, rows, read, write, progress=None, timings=None, stop=None,
           copy=np.copyto, direct=False) -> int:
    """Run the chunks of ``rows`` (a :class:`Rows`, or a number of slices) through
    ``executor`` (its slots reserved).

    ``read(span)`` returns the rows of ``span`` (a :class:`Span`: the chunk's own rows
    and the margins its stages need) as an array of the layout's input shape, and what
    goes up beside them (host arrays for the stages' uploaded buffers by name, such as
    the dark and flat means of its rows; or None); the reader thread uploads them,
    copied piece by piece into page-locked staging by ``copy(destination, source)``;
    the calling thread enqueues its device stages; the writer thread downloads it and
    hands its slices to ``write(start, count, slices)``, a piece at a time, several
    pieces at once on threads of their own (so ``write`` must take disjoint rows from
    several threads; the slices are a view of staging, used again once it returns).
    Returns the sum of what the stages report (values normalisation replaced). ``timings`` (a dict) gets the seconds the
    writer waited for the device (``wait_device``) and the slices done (``slices``).
    An exception in any thread, or Ctrl-C, stops all of them and is raised here once
    the device work in flight ends (a fraction of a second: see :mod:`pybp.cl.pacing`);
    ``stop`` (a ``threading.Event`` shared by several pipelines) ends this one quietly
    when set elsewhere, and is set when this one fails. ``direct``: every chunk's rows
    go up by one DMA, and one thread enqueues them: where nothing comes down (``write``
    None, stages that report nothing), :func:`_direct`; where the chunks come down in
    place by one DMA each (``write.download``), :func:`_in_place`.
    """
    if not isinstance(rows, Rows):
        rows = Rows(rows)
    # The back-projection's launches move the progress line on within a long slice.
    executor.pacer.listener = progress.work if progress is not None else None
    try:
        if not executor.threads:
            return _serial(executor, rows, read, write, progress, timings, stop, copy)
        if direct and write is not None:
            if getattr(write, "download", None) is None or \
                    executor.layout.output != executor.layout.input:
                raise ValueError("direct: chunks that come down go by one DMA, in place")
            return _in_place(executor, rows, read, write, progress, timings, stop)
        if direct:
            if any(stage.reports for stage in executor.stages):
                raise ValueError("direct: a stream whose stages report takes the threads")
            return _direct(executor, rows, read, progress, timings, stop)
        return _threaded(executor, rows, read, write, progress, timings, stop, copy)
    finally:
        executor.pacer.listener = None


def _threaded(executor, rows, read, write, progress, timings, stop, copy) -> int:
    """:func:`stream` on a reader, the calling and a writer thread."""
    return _Threads(executor, rows, read, write, progress, stop, copy).run(timings)


class _Threads:
    """One stream's three threads and what they hand each other: ``ready`` (chunks
    uploaded, for the calling thread to compute), ``done`` (chunks computed, for the
    writer), and per slot a semaphore for its input (free once its chunk's stages are
    enqueued) and one for its output (free once its slices are down). Where the stages
    work in place (the layout's output is its input buffer), the reader takes the
    output's before it uploads, as the next chunk overwrites the last one's slices."""

    def __init__(self, executor, rows, read, write, progress, stop, copy):
        self.executor, self.rows, self.read, self.write = executor, rows, read, write
        self.progress, self.copy = progress, copy
        self.slots = len(executor.slots)
        self.ready = queue.Queue(maxsize=self.slots)
        self.done = queue.Queue(maxsize=self.slots)
        self.input_free = [threading.Semaphore(1) for _ in range(self.slots)]
        self.output_free = [threading.Semaphore(1) for _ in range(self.slots)]
        self.stop = stop if stop is not None else threading.Event()
        self.errors, self.clipped = [], 0
        self.spent = dict(wait_device=0.0, slices=0)
        self.in_place = executor.layout.output == executor.layout.input
        # A CPU device runs one command at a time, whatever its queue: a chunk's download
        # enqueued behind the next chunk's kernels waited for them, and with 3 chunks in
        # flight the first slices reached the output at 70% of the run (48 rows of 1024
        # on 2 cores; an interrupt then kept none). There the next chunk's kernels wait
        # for the last chunk's slices to be down; a GPU copies beside its kernels.
        self.in_turn = executor.device.type == "cpu"
        self.turns, self.downloaded = threading.Condition(), 0

    def guarded(self, work):
        """``work`` on a thread: an error is handed to the calling thread and stops
        the others."""
        def run():
            try:
                work()
            except Stopped:
                pass
            except BaseException as exc:  # handed to the calling thread
                self.errors.append(exc)
                self.stop.set()
        return run

    def reader(self):
        executor, stop, i = self.executor, self.stop, 0
        while True:
            slot = i % self.slots
            if not self.in_place:
                self.slot_free(slot)  # only now take rows (several pipelines share them)
            taken = self.rows.take(executor.memory.chunk_slices)
            if taken is None:
                _put(self.ready, None, stop)
                return
            start, count = taken
            span = self.rows.span(start, count, executor.margin)
            block, references = self.read(span)
            if self.in_place:
                # The slot is free only once its last chunk is down: this one goes into
                # page-locked staging first, while the device works on that one (H200,
                # cone beam's store of 512^3: 0.14-0.15 s against 0.20 s; copying ahead
                # everywhere made one piece of 512^3 no faster, 0.22 s against 0.21 s).
                block = executor.stage(block, self.copy, stop)
                self.slot_free(slot)
                _acquire(self.output_free[slot], stop)  # ... and its slices are down
            event, stages = executor.upload(slot, block, references, self.copy, stop)
            # The calling thread waits for the upload before it enqueues the chunk's
            # stages; this one goes on to copy the next chunk meanwhile.
            _put(self.ready, (i, span, event, stages), stop)
            i += 1

    def slot_free(self, slot):
        """Wait until the slot's last chunk was enqueued and computed."""
        _acquire(self.input_free[slot], self.stop)
        self.executor.input_free(slot, self.stop)

    def writer(self):
        executor, stop, spent = self.executor, self.stop, self.spent
        while True:
            item = _get(self.done, stop)
            if item is None:
                executor.written(stop)  # the last pieces' writes, and their errors
                return
            i, start, count, computed, stages = item
            slot = i % self.slots
            tick = time.perf_counter()
            wait(computed, stop)
            spent["wait_device"] += time.perf_counter() - tick
            try:
                downloaded, waited, reported = executor.download(
                    slot, count, _writer(self.write, start, self.progress), stop)
            except NonFinite as exc:
                exc.rows = (start, count)
                raise
            spent["wait_device"] += waited
            executor.record(stages + downloaded)
            self.clipped += reported
            self.output_free[slot].release()
            spent["slices"] += count
            with self.turns:
                self.downloaded += 1
                self.turns.notify_all()
            if self.progress is not None and not _counted_by_writes(executor, self.write):
                self.progress.update(count)

    def compute(self):
        """The calling thread's part: each uploaded chunk's stages, once its upload is
        done and its slot's last slices are down."""
        executor, stop = self.executor, self.stop
        while True:
            item = _get(self.ready, stop)
            if item is None:
                _put(self.done, None, stop)
                return
            i, span, uploaded, stages = item
            slot = i % self.slots
            wait(uploaded, stop)
            executor.record(stages)
            if self.in_turn:
                self.await_download(i - 1)
            if not self.in_place:
                _acquire(self.output_free[slot], stop)  # the slot's last slices are downloaded
            computed, stages = executor.compute(slot, span, stop)
            self.input_free[slot].release()
            _put(self.done, (i, span.start, span.count, computed, stages), stop)

    def await_download(self, i):
        """Until chunk ``i`` is down (or the stream stops)."""
        with self.turns:
            while self.downloaded <= i:
                if self.stop.is_set():
                    raise Stopped
                self.turns.wait(POLL_SECONDS)

    def run(self, timings) -> int:
        threads = [threading.Thread(target=self.guarded(self.reader), name="pybp-reader",
                                    daemon=True),
                   threading.Thread(target=self.guarded(self.writer), name="pybp-writer",
                                    daemon=True)]
        for thread in threads:
            thread.start()
        finished = False
        try:
            self.compute()
            threads[1].join()
            finished = not self.errors
        except Stopped:
            pass
        finally:
            if not finished:  # failed, interrupted or stopped elsewhere: stop the others
                self.stop.set()
            for thread in threads:
                thread.join()
            self.executor.finish()  # what is in flight: at most a fraction of a second
            if self.progress is not None and not finished:
                self.progress.close()
        if timings is not None:
            timings.update(self.spent)
        if self.errors:
            raise self.errors[0]
        return self.clipped
