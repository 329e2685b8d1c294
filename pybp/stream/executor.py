"""The executor: one device's queues and memory, running an ordered list of stages
(pybp/stages/) on chunks of slices.

A chunk goes up on the upload queue, through the stages on the compute queue, and down
on the download queue; each of the memory plan's ``slots`` chunks in flight has its own
device buffers (every buffer the stages declare, allocated once), so the transfers of
one chunk run while the kernels of another do (paper Sect. 4, Fig. 4). Transfers go
through page-locked staging of a few pieces (:class:`Pieces`), whatever the chunk's
size. pybp/stream/pipeline.py orders the steps of a chunk from three
threads, which wait on the events of the step before, and copies between the caller's
arrays and the staging. The executor knows no geometry: what a chunk is comes from its
:class:`Layout`, what is done to it from its stages. A chunk's input holds the rows
the stages' margins need beside its own (:attr:`pybp.stages.base.Stage.margin`), and
each stage with a margin leaves out its share of them (:meth:`Executor.compute`).

Thread safety: the uploads, the computes and the downloads may each be driven by one
thread (as the pipeline does); anything else needs an executor of its own per thread,
or a lock.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from pybp.cl import implementations, pacing
from pybp.cl.staging import Staging
from pybp.stages.base import Chunk
from pybp.stream.memory import MemoryPlan, merged_needs

PIECE_BYTES = 64 << 20  # page-locked bytes of one piece of a chunk's transfer
# Downloaded pieces handed to ``write`` at once, each on a thread of its own, while the
# next pieces come down, for outputs that are files (Executor.reserve's ``writes``).
# Written one at a time, 512 TIFF slices of 2048^2 (4 per piece) took 2.6 s of a 3.6 s
# stream on the H100 machine: one slice's write is mostly the file system's page
# allocation, which runs in parallel. Into arrays in memory one at a time, as before,
# is kept: with three, 2048^3 from memory was no faster (5.85-6.04 s against 5.62-5.75 s
# for the code before them, the same call; that build also had the global FFT filter,
# since put back, which cost about as much: pybp/stages/filters.py).
WRITES = 3


@dataclass(frozen=True)
class Layout:
    """How one chunk's data travel: the host fills the stages' buffer ``input`` with
    ``count`` rows of ``input_row`` values of ``input_dtype``, the rows along axis
    ``row_axis`` (1: projections ``(angle, row, bin)``; 0: sinograms, or cone beam's
    projections ``(projection, row, column)``), and gets back buffer ``output``:
    ``count`` planes of ``output_row`` float32 values; or, with ``output`` None,
    nothing: the stages add the chunks into a buffer of their own, which
    :meth:`Executor.read_work` reads once the last chunk is done."""

    input: str
    input_dtype: np.dtype
    input_row: tuple
    row_axis: int
    output: str
    output_row: tuple

    def input_shape(self, count: int) -> tuple:
        shape = list(self.input_row)
        shape.insert(self.row_axis, count)
        return tuple(shape)

    def output_shape(self, count: int) -> tuple:
        return (count,) + tuple(self.output_row)


def device_buffers(context, needs: dict, memory: MemoryPlan) -> dict:
    """Name -> a device buffer of each of ``needs`` the executor makes (not those a
    stage allocates itself), as many rows as ``memory`` says."""
    rw = cl.mem_flags.READ_WRITE
    return {name: cl.Buffer(context, rw, need.bytes(memory.rows(name)))
            for name, need in needs.items() if need.allocated}


class Slot:
    """One chunk in flight: the stages' device buffers (its own, and the ``work``
    buffers all slots share: :attr:`pybp.stream.memory.MemoryPlan.work`), the counters
    it reports, and the last event of its last chunk's device work."""

    def __init__(self, context, needs: dict, memory: MemoryPlan, reports=(), work=None):
        work = work or {}
        self.buffers = dict(work, **device_buffers(
            context, {name: need for name, need in needs.items() if name not in work}, memory))
        self.host = {name: need.host for name, need in needs.items() if need.host is not None}
        self.counts = {name: np.zeros(1, np.uint32) for name in reports}
        self.uploaded = frozenset()  # names of the buffers uploaded beside the input
        self.kept = None  # their host arrays, kept until their copy ends
        self.computed = None
        self.input_read = None  # the event after which its input buffer is free again


class Pieces:
    """Page-locked staging for one direction of transfers: ``count`` arrays of at most
    :data:`PIECE_BYTES`, filled and sent in turn, so that the host copies one piece
    while the DMA moves another. A chunk goes in pieces along the first axis of its
    shape: contiguous on the device in either layout. Pinning takes time in proportion
    to its size (H100: 9.3 s of 18.5 s for chunks of 128 slices with 77 rows of margins
    each side, pinned whole per slot), so it does not grow with the chunks.

    A piece may be handed on after its transfer (:meth:`handed`: a downloaded piece
    being written on a thread); it is taken again only once that is done."""

    def __init__(self, staging: Staging, largest: tuple, dtype, count=2):
        """Pieces for transfers of at most ``largest`` (a shape), each at least one
        item of its first axis, pinned when first taken (transfers straight from or
        into page-locked memory need none)."""
        item = int(np.prod(largest[1:]))
        self.size = min(int(np.prod(largest)), max(item, PIECE_BYTES // np.dtype(dtype).itemsize))
        self._staging, self.dtype = staging, np.dtype(dtype)
        self.arrays = []
        self.events = [None] * count  # the transfer of each, in flight
        self.uses = [None] * count    # a future: what is done with it after the transfer
        self.turn = 0

    def spans(self, shape):
        """``(a, b)`` along the first axis of ``shape``, each fitting one piece."""
        per = max(1, int(np.prod(shape[1:])))
        step = max(1, self.size // per)
        return [(a, min(shape[0], a + step)) for a in range(0, shape[0], step)]

    def take(self, shape, stop=None) -> tuple:
        """``(index, piece)``: the next piece as an array of ``shape``, once its last
        transfer, and what it was handed to, are done (an error there is raised here)."""
        if not self.arrays:
            self.arrays = [self._staging.array(self.size, self.dtype) for _ in self.events]
        i = self.turn
        if self.events[i] is not None:
            pacing.wait(self.events[i], stop)
            self.events[i] = None
        if self.uses[i] is not None:
            use, self.uses[i] = self.uses[i], None
            _result(use, stop)
        self.turn = (i + 1) % len(self.arrays)
        return i, self.arrays[i][:int(np.prod(shape))].reshape(shape)

    def sent(self, index: int, event):
        """Piece ``index`` is in flight until ``event``."""
        self.events[index] = event

    def handed(self, index: int, use):
        """Piece ``index`` is in use until the future ``use`` is done."""
        self.uses[index] = use

    def settle(self, stop=None, errors=True):
        """Wait for every handed piece; raise the first error (``errors=False``: none,
        when another error is already on its way)."""
        first = None
        for i, use in enumerate(self.uses):
            if use is not None:
                self.uses[i] = None
                try:
                    _result(use, stop)
                except pacing.Stopped:
                    raise
                except BaseException as exc:
                    first = first or exc
        if first is not None and errors:
            raise first


class Staged:
    """A chunk's ``rows`` on their way into page-locked pieces: those copied ahead
    (:meth:`copy_all`), or each copied when its turn comes (:meth:`pieces`)."""

    def __init__(self, pieces: Pieces, rows, spans):
        self._pieces, self.rows, self.spans = pieces, rows, spans
        self.shape, self._copied = rows.shape, None

    def copy_all(self, copy, stop):
        self._copied = [self._copy(a, b, copy, stop) for a, b in self.spans]

    def _copy(self, a, b, copy, stop):
        index, piece = self._pieces.take((b - a,) + tuple(self.shape[1:]), stop)
        copy(piece, self.rows[a:b])
        return a, b, index, piece

    def pieces(self, copy, stop):
        """``(a, b, index, piece)`` for each span, copied."""
        if self._copied is not None:
            yield from self._copied
            return
        for a, b in self.spans:
            yield self._copy(a, b, copy, stop)


def _result(future, stop=None):
    """``future.result()``, waited for in short steps so that a set ``stop`` raises
    :class:`pybp.cl.pacing.Stopped` (the future still runs to its end)."""
    while not future.done():
        if stop is not None and stop.is_set():
            raise pacing.Stopped
        wait_futures([future], timeout=pacing.MAX_SLEEP * 20)
    return future.result()


class Executor:
    """Runs stages on chunks on the device of ``context`` (or of ``queue``, then the
    compute queue). :meth:`reserve` sets the stages, the chunks' layout and the memory
    plan; the pipeline then moves chunks through :meth:`upload`, :meth:`compute` and
    :meth:`download`."""

    def __init__(self, device, context=None, queue=None):
        self.device = device
        self.context = queue.context if queue is not None else context
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        self.queue = queue or cl.CommandQueue(self.context, properties=profiling)
        self.upload_queue = cl.CommandQueue(self.context, properties=profiling)
        self.download_queue = cl.CommandQueue(self.context, properties=profiling)
        self.slot_queues = []  # one a slot, where a chunk goes up, through and down on one
        self.stages, self.layout, self.memory, self.slots = (), None, None, []
        self._needs, self._staging, self._pieces = None, None, None
        self.pieces_in = self.pieces_out = self.pieces_work = None
        self.stage_seconds = defaultdict(float)  # device time per stage, since reset
        # Device time from the events where the timers tell the truth and the compute
        # queue profiles (a caller's queue may not)
        self.timers = device.timers and bool(self.queue.properties & profiling)
        self.pacer = pacing.Pacer(device.type, self.timers)
        # Whether the pipeline may enqueue from several threads (pybp.cl.implementations).
        self.threads = implementations.named(device.implementation).threads
        self._wall_seconds = {}  # stage's last event -> its wall time, where timers lie
        self._lock = threading.Lock()
        self._writes = None  # threads writing downloaded pieces (reserve)
        self.writes = 1  # pieces written at once

    def reserve(self, stages, layout: Layout, memory: MemoryPlan, writes=1):
        """Run ``stages`` on chunks of ``layout`` in the slots of ``memory``, with
        ``writes`` downloaded pieces written at once (:data:`WRITES` for files):
        allocated here, and kept from the last call while they hold the same buffers
        and are as large."""
        needs = merged_needs(stages)
        self.stages = tuple(stages)
        if (self.memory is not None and self.memory.chunk_slices >= memory.chunk_slices
                and len(self.slots) >= memory.slots and self._needs == needs
                and self.layout == layout and self.memory.pass_width == memory.pass_width
                and self.memory.work == memory.work and self.writes == writes
                and (self.memory.margin, self.memory.extra) == (memory.margin, memory.extra)):
            return
        rows_in = memory.chunk_slices + 2 * memory.margin
        pieces = (layout.input_shape(rows_in), layout.input_dtype, layout.output,
                  layout.output_shape(memory.chunk_slices), writes)
        keep = self._staging is not None and pieces == self._pieces  # (after release_memory)
        self._release_slots(keep)
        self.memory, self.layout, self._needs, self.writes = memory, layout, needs, writes
        if self._writes is not None:
            self._writes.shutdown()
        self._writes = ThreadPoolExecutor(writes, thread_name_prefix="pybp-write")
        reports = [name for stage in stages for name in stage.reports]
        work = device_buffers(self.context, {name: needs[name] for name in memory.work}, memory)
        self.slots = [Slot(self.context, needs, memory, reports, work)
                      for _ in range(memory.slots)]
        if keep:
            return
        self._staging, self._pieces = Staging(self.upload_queue), pieces
        self.pieces_in = Pieces(self._staging, layout.input_shape(rows_in), layout.input_dtype)
        if layout.output is not None:
            self.pieces_out = Pieces(self._staging, layout.output_shape(memory.chunk_slices),
                                     np.float32, count=writes + 1)

    @property
    def margin(self) -> int:
        """Rows each chunk reads beyond its own on each side (the stages' margins)."""
        return self.memory.margin

    # ---- one chunk --------------------------------------------------------------------
    # Each step of a chunk enqueues on its own queue with no event of another queue in
    # its wait list: NVIDIA's OpenCL blocks the calling thread in such an enqueue until
    # the event completes, so a download enqueued behind its chunk's kernels held up
    # the thread for the whole chunk (measured: 1.6 s of 4.1 s). The pipeline's threads
    # order the steps instead, each waiting on the host for what its step needs.
    def input_free(self, slot: int, stop=None):
        """Wait until the slot's last chunk has been computed, or its stages have read
        its input for the last time (:attr:`pybp.stages.base.Chunk.input_read`): its
        device input buffer and input staging may then take the next chunk."""
        if self.slots[slot].input_read is not None:
            pacing.wait(self.slots[slot].input_read, stop)

    def slot_queue(self, slot: int):
        """The in-order queue of ``slot``'s own (made on first use, profiling where the
        compute queue does), for chunks that go up, through their stages and down on
        one queue (:func:`pybp.stream.pipeline.stream`'s in-place DMA schedule)."""
        profiling = self.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
        while len(self.slot_queues) <= slot:  # (in order: a chunk's steps follow each other)
            self.slot_queues.append(cl.CommandQueue(self.context, properties=profiling))
        return self.slot_queues[slot]

    def upload(self, slot: int, rows, extras=None, copy=np.copyto, stop=None, queue=None,
               wait_for=None):
        """Enqueue the upload of a chunk into ``slot`` (after :meth:`input_free`):
        ``rows``, an array of the layout's input shape (its margins included), goes up in
        pieces through page-locked staging, each copied there by ``copy(destination,
        source)``; where ``rows`` has ``upload(queue, buffer)`` (rows in page-locked memory,
        such as cone beam's store of filtered projections), that enqueues one DMA instead;
        ``rows`` may also be what :meth:`stage` made of them; ``extras``, host arrays for
        the stages' uploaded buffers by name (the dark and flat means of the chunk's rows;
        None: none), beside it; on ``queue`` (None: the upload queue); ``wait_for``: events
        the device waits for first (the slot's last reader of its input, where the host
        did not wait for it: :meth:`input_free`). Returns the last event and the stages
        (for :meth:`record`)."""
        s, q = self.slots[slot], queue or self.upload_queue
        if wait_for:
            cl.enqueue_barrier(q, wait_for=wait_for)
        target, stages = s.buffers[self.layout.input], []
        direct = getattr(rows, "upload", None)  # rows in page-locked memory: one DMA
        if direct is not None:
            stages.append(("upload", direct(q, target)))
            q.flush()
        else:
            staged = rows if isinstance(rows, Staged) else \
                Staged(self.pieces_in, rows, self.pieces_in.spans(rows.shape))
            per = int(np.prod(staged.shape[1:])) * self.layout.input_dtype.itemsize
            for a, b, index, piece in staged.pieces(copy, stop):
                event = cl.enqueue_copy(q, target, piece, dst_offset=a * per, is_blocking=False)
                q.flush()
                self.pieces_in.sent(index, event)
                stages.append(("upload", event))
        extras = {k: v for k, v in (extras or {}).items() if k in s.host}
        s.kept = {k: np.ascontiguousarray(v, s.host[k]) for k, v in extras.items()}
        s.uploaded = frozenset(s.kept)
        stages += [("upload", cl.enqueue_copy(q, s.buffers[k], host, is_blocking=False))
                   for k, host in s.kept.items()]
        q.flush()
        return stages[-1][1], stages

    def stage(self, rows, copy=np.copyto, stop=None):
        """``rows`` (a chunk's input, as :meth:`upload` takes it) as a :class:`Staged`
        for :meth:`upload`: where the whole chunk fits the staging's pieces, copied into
        them now, before its slot is free (the reader copies the next chunk while the
        device still works on the slot's last one); else each piece is copied as it
        goes up. Rows that go up by one DMA (``upload``) are kept as they are."""
        if getattr(rows, "upload", None) is not None:
            return rows
        spans = self.pieces_in.spans(rows.shape)
        staged = Staged(self.pieces_in, rows, spans)
        if len(spans) <= len(self.pieces_in.events):
            staged.copy_all(copy, stop)
        return staged

    def compute(self, slot: int, span, stop=None, queue=None, wait_for=None):
        """Enqueue the stages on the chunk uploaded to ``slot`` (its upload done, or in
        ``wait_for``; the slot's last download done): ``span`` (a
        :class:`pybp.stream.pipeline.Span`) says how many of its rows are its own and how
        many are margins before and after them; on ``queue`` (None: the compute queue);
        ``wait_for``: events the device waits
        for first (the chunk's upload, where the host did not wait for it). Returns the
        last event and the stages. Waits while the device has enough queued
        (:class:`pybp.cl.pacing.Pacer`); a set ``stop`` ends the wait with
        :class:`pybp.cl.pacing.Stopped`."""
        s, q = self.slots[slot], queue or self.queue
        if wait_for:
            cl.enqueue_barrier(q, wait_for=wait_for)
        before, after, beyond = span.before, span.after, self.margin
        stages, read = [], None
        for stage in self.stages:
            # The rows beyond the chunk's own go through every stage up to the last one
            # that reaches across rows, which leaves them out. (Each stage's own share,
            # once: with a grid of chunks, they are the rest of the grid chunk too.)
            beyond -= stage.margin
            crop = (0, 0) if beyond else (before, after)
            chunk = Chunk(s.buffers, span.count + before + after, q, self.pacer,
                          self.memory, stop=stop, uploaded=s.uploaded, crop=crop,
                          margins=(before + span.skip[0], after + span.skip[1]),
                          grid=span.grid, first_row=span.origin + span.start - before)
            stages += self._timed(stop, lambda: stage.enqueue(chunk), q)
            before, after = before - crop[0], after - crop[1]
            read = chunk.input_read if chunk.input_read is not None else read
        q.flush()
        s.computed = stages[-1][1]
        s.input_read = read if read is not None else s.computed
        return stages[-1][1], stages

    def _timed(self, stop, enqueue, queue):
        """The stages ``enqueue()`` launches on ``queue``. Where the device's profiling
        timers cannot be trusted (:func:`pybp.cl.device.probe`), they run alone on it
        and their wall time stands for their device time."""
        if self.timers:
            return enqueue()
        pacing.finish(queue, stop)
        start = time.perf_counter()
        stages = enqueue()
        pacing.finish(queue, stop)
        with self._lock:
            self._wall_seconds[stages[-1][1]] = time.perf_counter() - start
        return stages

    def download(self, slot: int, count: int, write, stop=None):
        """The slot's computed chunk of ``count`` slices: its counters first (the
        stages may refuse the chunk: :meth:`reported`), then its slices in pieces through
        page-locked staging, each handed to ``write(first, stop, slices)`` on a thread of
        its own once it is down (``writes`` at once: :meth:`reserve`), while the next come
        down; where ``write`` has ``download(queue, buffer, count)`` (an output in
        page-locked memory), that enqueues one DMA instead. Returns when every piece is down
        (the slot's device buffers are then free) with the stages (for :meth:`record`), the
        seconds spent waiting for the device, and what the stages reported; :meth:`written`
        waits for the writes."""
        s, q = self.slots[slot], self.download_queue
        tick = time.perf_counter()
        for name, host in s.counts.items():
            last = cl.enqueue_copy(q, host, s.buffers[name], is_blocking=False)
            q.flush()
            pacing.wait(last, stop)
        waited = time.perf_counter() - tick
        reported = self.reported(slot)
        if self.layout.output is None:  # the stages keep what they make (read_work)
            return [], waited, reported
        shape, source = self.layout.output_shape(count), s.buffers[self.layout.output]
        direct = getattr(write, "download", None)
        if direct is not None:  # into page-locked memory: one DMA, no staging
            event = direct(q, source, count)
            q.flush()
            tick = time.perf_counter()
            pacing.wait(event, stop)
            return [("download", event)], waited + time.perf_counter() - tick, reported
        per = int(np.prod(shape[1:])) * 4
        stages, pending = [], None
        for a, b in self.pieces_out.spans(shape):
            index, piece = self.pieces_out.take((b - a,) + shape[1:], stop)
            event = cl.enqueue_copy(q, piece, source, src_offset=a * per, is_blocking=False)
            q.flush()
            self.pieces_out.sent(index, event)
            stages.append(("download", event))
            if pending is not None:  # the piece before, while this one comes down
                waited += self._hand(pending, write, stop)
            pending = (a, b, event, piece, index)
        waited += self._hand(pending, write, stop)
        return stages, waited, reported

    def download_after(self, slot: int, count: int, write, queue):
        """Enqueue on ``queue``, behind the slot's stages there, its counters into host
        arrays of their own and its ``count`` slices by one DMA
        (``write.download(queue, buffer, count)``, an output in page-locked memory);
        no wait. Returns the counters (for :meth:`counted`, once the last event is
        done) and the stages."""
        s = self.slots[slot]
        counts = {name: np.zeros(1, np.uint32) for name in s.counts}
        stages = [("download", cl.enqueue_copy(queue, host, s.buffers[name], is_blocking=False))
                  for name, host in counts.items()]
        stages.append(("download", write.download(queue, s.buffers[self.layout.output], count)))
        queue.flush()
        return counts, stages

    def counted(self, counts: dict) -> int:
        """What the stages make of a chunk's downloaded ``counts`` (as :meth:`reported`)."""
        counts = {name: int(host[0]) for name, host in counts.items()}
        return sum(stage.reported(counts) for stage in self.stages if stage.reports)

    def _hand(self, pending, write, stop) -> float:
        """Wait for a downloaded piece ``(a, b, event, slices, index)`` and hand it to
        ``write`` on the writing threads; returns the seconds waited."""
        a, b, event, slices, index = pending
        tick = time.perf_counter()
        pacing.wait(event, stop)
        waited = time.perf_counter() - tick
        self.pieces_out.handed(index, self._writes.submit(write, a, b, slices))
        return waited

    def read_work(self, name: str, shape: tuple, put, stop=None, behind=False):
        """Read the stages' buffer ``name`` (one for all slots: ``MemoryPlan.work``),
        float32 of ``shape``, once the compute queue's work is done (interruptibly), in
        pieces through page-locked staging: ``put(a, b, piece)`` takes items ``[a,
        b)`` of the first axis while the next piece comes down. ``behind``: each put runs
        on the writing threads, and this returns once the last piece is down (the
        buffer is then free for the stages; :meth:`work_written` waits for the puts, and
        a piece is taken again only once its put is done). (Straight into pageable
        memory, NVIDIA's DMA of a 512^3 slab ran at about 9 GB/s.) The pieces are the
        uploads', idle once the stages are done, where they are float32 and whole
        (:data:`PIECE_BYTES`, or the buffer): pinning pieces of their own for each
        one-call FDK of 512^3 made it slower than reading into pageable memory (0.40 s
        against 0.38 s), and smaller ones made the read-backs of a kept back-projector's
        slabs slower (0.064 s against 0.040 s for 11 slabs)."""
        pacing.finish(self.queue, stop)
        q, source = self.download_queue, self.slots[0].buffers[name]
        per = int(np.prod(shape[1:])) * 4
        pieces = self.pieces_in
        whole = min(PIECE_BYTES // 4, int(np.prod(shape)))
        if pieces is None or pieces.dtype != np.float32 or pieces.size < max(whole, per // 4):
            if self.pieces_work is None or per > self.pieces_work.size * 4:
                self.pieces_work = Pieces(self._staging, shape, np.float32)
            pieces = self.pieces_work
        pending = None
        for a, b in pieces.spans(shape):
            index, piece = pieces.take((b - a,) + tuple(shape[1:]), stop)
            event = cl.enqueue_copy(q, piece, source, src_offset=a * per, is_blocking=False)
            q.flush()
            pieces.sent(index, event)
            if pending is not None:  # the piece before, while this one comes down
                self._put(pieces, pending, put, stop, behind)
            pending = (a, b, event, piece, index)
        self._put(pieces, pending, put, stop, behind)

    def _put(self, pieces, pending, put, stop, behind):
        a, b, event, piece, index = pending
        pacing.wait(event, stop)
        if behind:
            pieces.handed(index, self._writes.submit(put, a, b, piece))
        else:
            put(a, b, piece)

    def work_written(self, stop=None, errors=True):
        """Wait for the puts :meth:`read_work` left behind; raise the first error
        (``errors=False``: none, when another is already on its way; each put then
        runs to its end, a copy of at most a piece)."""
        for pieces in (self.pieces_in, self.pieces_work):  # (read_work takes either)
            if pieces is not None:  # (without errors: each put, a copy, to its end)
                pieces.settle(stop if errors else None, errors)

    def written(self, stop=None):
        """Wait until every downloaded piece is written; the first error of a write
        is raised here (or by the next :meth:`download`)."""
        if self.pieces_out is not None:
            self.pieces_out.settle(stop)

    def record(self, stages):
        """Add the device time of finished ``stages`` to ``stage_seconds`` (any thread):
        ``(name, event)``, or ``(name, last, first)`` for a stage of many launches, timed
        from its first's start to its last's end; where the timers cannot be trusted, the
        wall time of the compute stages (transfers then count nothing)."""
        with self._lock:
            for name, event, *first in stages:
                if self.timers:
                    began = (first[0] if first else event).profile.start
                    self.stage_seconds[name] += (event.profile.end - began) * 1e-9
                else:
                    self.stage_seconds[name] += self._wall_seconds.pop(event, 0.0)

    def reported(self, slot: int) -> int:
        """What the stages make of the counters of the slot's last downloaded chunk
        (:meth:`pybp.stages.base.Stage.reported`: values normalisation replaced); a
        stage may raise to refuse the chunk."""
        return self.counted(self.slots[slot].counts)

    # ---- life -------------------------------------------------------------------------
    def _release_slots(self, keep_staging=False):
        if self.pieces_out is not None:
            self.pieces_out.settle(errors=False)  # no write may still read the staging
        self.slots, self.memory, self._needs = [], None, None
        if keep_staging:
            return
        if self._staging is not None:
            self._staging.release()
        self._staging = self._pieces = None
        self.pieces_in = self.pieces_out = self.pieces_work = None

    def release_memory(self):
        """Free the slots' device buffers now, once the work in flight is done (the
        stages' own buffers and the page-locked staging stay): another executor on the
        device may use the memory until the next :meth:`reserve` makes them again, as
        the phases of cone beam's kept store take turns (pybp/cone/store.py)."""
        self.finish()
        self._release_slots(keep_staging=True)

    def finish(self, stop=None):
        """Wait (interruptibly) for the work enqueued on every queue, then for the
        writes of downloaded pieces (to their end: their errors are left to
        :meth:`written`)."""
        for queue in (self.queue, self.upload_queue, self.download_queue, *self.slot_queues):
            pacing.finish(queue, stop)
        self.pacer.clear()
        if self.pieces_out is not None:
            self.pieces_out.settle(errors=False)

    def close(self):
        """Release device memory and staging now (also on leaving a ``with`` block)."""
        self.finish()
        self._release_slots()
        if self._writes is not None:
            self._writes.shutdown()
            self._writes = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
