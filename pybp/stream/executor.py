"""The executor: one device's queues and memory, running an ordered list of stages
(pybp/stages/) on chunks of slices.

A chunk goes up on the upload queue, through the stages on the compute queue, and down
on the download queue; each of the memory plan's ``slots`` chunks in flight has its own
device buffers (every buffer the stages declare, allocated once) and page-locked
staging, so the transfers of one chunk run while the kernels of another do (paper
Sect. 4, Fig. 4). pybp/stream/pipeline.py orders the steps of a chunk from three
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
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from pybp.cl import implementations, pacing
from pybp.cl.staging import Staging
from pybp.stages.base import Chunk
from pybp.stream.memory import MemoryPlan, merged_needs


@dataclass(frozen=True)
class Layout:
    """How one chunk's data travel: the host fills the stages' buffer ``input`` with
    ``count`` rows of ``input_row`` values of ``input_dtype``, the rows along axis
    ``row_axis`` (1: projections ``(angle, row, bin)``; 0: sinograms), and gets back
    buffer ``output``: ``count`` planes of ``output_row`` float32 values."""

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


class Slot:
    """One chunk in flight: the stages' device buffers, page-locked staging, the
    counters it reports, and the last event of its last chunk's device work."""

    def __init__(self, context, queue, needs: dict, layout: Layout, memory: MemoryPlan,
                 reports=()):
        rw = cl.mem_flags.READ_WRITE
        self.buffers = {name: cl.Buffer(context, rw, need.bytes(memory.rows(name)))
                        for name, need in needs.items()}
        self.host = {name: need.host for name, need in needs.items() if need.host is not None}
        self.counts = {name: np.zeros(1, np.uint32) for name in reports}
        self._staging = Staging(queue)
        rows_in = memory.chunk_slices + 2 * memory.margin
        self.staging_in = self._staging.array(rows_in * int(np.prod(layout.input_row)),
                                              layout.input_dtype)
        self.staging_out = self._staging.array(memory.chunk_slices * int(np.prod(layout.output_row)),
                                               np.float32)
        self.uploaded = frozenset()  # names of the buffers uploaded beside the input
        self.kept = None  # their host arrays, kept until their copy ends
        self.computed = None

    def release(self):
        self._staging.release()


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
        self.stages, self.layout, self.memory, self.slots = (), None, None, []
        self._needs = None
        self.stage_seconds = defaultdict(float)  # device time per stage, since reset
        self.pacer = pacing.Pacer(device.type, device.timers)
        # Whether the pipeline may enqueue from several threads (pybp.cl.implementations).
        self.threads = implementations.named(device.implementation).threads
        self._wall_seconds = {}  # stage's last event -> its wall time, where timers lie
        self._lock = threading.Lock()

    def reserve(self, stages, layout: Layout, memory: MemoryPlan):
        """Run ``stages`` on chunks of ``layout`` in the slots of ``memory``: allocated
        here, and kept from the last call while they hold the same buffers and are as
        large."""
        needs = merged_needs(stages)
        self.stages = tuple(stages)
        if (self.memory is not None and self.memory.chunk_slices >= memory.chunk_slices
                and len(self.slots) >= memory.slots and self._needs == needs
                and self.layout == layout and self.memory.pass_width == memory.pass_width
                and (self.memory.margin, self.memory.extra) == (memory.margin, memory.extra)):
            return
        self._release_slots()
        self.memory, self.layout, self._needs = memory, layout, needs
        reports = [name for stage in stages for name in stage.reports]
        self.slots = [Slot(self.context, self.upload_queue, needs, layout, memory, reports)
                      for _ in range(memory.slots)]

    @property
    def margin(self) -> int:
        """Rows each chunk reads beyond its own on each side (the stages' margins)."""
        return self.memory.margin

    # ---- one chunk --------------------------------------------------------------------
    def staging_in(self, slot: int, count: int) -> np.ndarray:
        """Where the caller puts the input of a chunk of ``count`` rows for ``slot``
        (shaped by the layout; its margins included). Fill it only after
        :meth:`input_free` of the slot."""
        shape = self.layout.input_shape(count)
        return self.slots[slot].staging_in[:int(np.prod(shape))].reshape(shape)

    def staging_out(self, slot: int, count: int) -> np.ndarray:
        """The output of the chunk last run in ``slot``, once its download is done."""
        shape = self.layout.output_shape(count)
        return self.slots[slot].staging_out[:int(np.prod(shape))].reshape(shape)

    # Each step of a chunk enqueues on its own queue with no event of another queue in
    # its wait list: NVIDIA's OpenCL blocks the calling thread in such an enqueue until
    # the event completes, so a download enqueued behind its chunk's kernels held up
    # the thread for the whole chunk (measured: 1.6 s of 4.1 s). The pipeline's threads
    # order the steps instead, each waiting on the host for what its step needs.
    def input_free(self, slot: int, stop=None):
        """Wait until the slot's last chunk has been computed: its device input buffer
        and input staging may then take the next chunk."""
        if self.slots[slot].computed is not None:
            pacing.wait(self.slots[slot].computed, stop)

    def upload(self, slot: int, count: int, extras=None):
        """Enqueue the upload of the chunk staged in ``slot`` (after :meth:`input_free`)
        and of ``extras``, host arrays for the stages' uploaded buffers by name (the
        dark and flat means of the chunk's rows; None: none); returns the last event
        and the stages (for :meth:`record`)."""
        s, q = self.slots[slot], self.upload_queue
        event = cl.enqueue_copy(q, s.buffers[self.layout.input], self.staging_in(slot, count),
                                is_blocking=False)
        stages = [("upload", event)]
        extras = {k: v for k, v in (extras or {}).items() if k in s.host}
        s.kept = {k: np.ascontiguousarray(v, s.host[k]) for k, v in extras.items()}
        s.uploaded = frozenset(s.kept)
        stages += [("upload", cl.enqueue_copy(q, s.buffers[k], host, is_blocking=False))
                   for k, host in s.kept.items()]
        q.flush()
        return stages[-1][1], stages

    def compute(self, slot: int, span, stop=None):
        """Enqueue the stages on the chunk uploaded to ``slot`` (its upload done, the
        slot's last download done): ``span`` (a :class:`pybp.stream.pipeline.Span`)
        says how many of its rows are its own and how many are margins before and after
        them. Returns the last event and the stages. Waits while the device has enough
        queued (:class:`pybp.cl.pacing.Pacer`); a set ``stop`` ends the wait with
        :class:`pybp.cl.pacing.Stopped`."""
        s = self.slots[slot]
        before, after, beyond = span.before, span.after, self.margin
        stages = []
        for stage in self.stages:
            # Each stage leaves out the margin rows no later stage needs.
            beyond -= stage.margin
            crop = (before - min(before, beyond), after - min(after, beyond))
            chunk = Chunk(s.buffers, span.count + before + after, self.queue, self.pacer,
                          self.memory, stop, s.uploaded, crop, (before, after))
            stages += self._timed(stop, lambda: stage.enqueue(chunk))
            before, after = before - crop[0], after - crop[1]
        self.queue.flush()
        s.computed = stages[-1][1]
        return stages[-1][1], stages

    def _timed(self, stop, enqueue):
        """The stages ``enqueue()`` launches. Where the device's profiling timers cannot
        be trusted (:func:`pybp.cl.device.probe`), they run alone on the compute queue
        and their wall time stands for their device time."""
        if self.device.timers:
            return enqueue()
        pacing.finish(self.queue, stop)
        start = time.perf_counter()
        stages = enqueue()
        pacing.finish(self.queue, stop)
        with self._lock:
            self._wall_seconds[stages[-1][1]] = time.perf_counter() - start
        return stages

    def download(self, slot: int, count: int):
        """Enqueue the download of the slot's computed chunk into its output staging
        (drained by the caller) and of its counters; returns the last event and the
        stages."""
        s, q = self.slots[slot], self.download_queue
        event = cl.enqueue_copy(q, self.staging_out(slot, count), s.buffers[self.layout.output],
                                is_blocking=False)
        last = event
        for name, host in s.counts.items():
            last = cl.enqueue_copy(q, host, s.buffers[name], is_blocking=False)
        q.flush()
        return last, [("download", event)]

    def record(self, stages):
        """Add the device time of finished ``stages`` to ``stage_seconds`` (any thread);
        where the timers cannot be trusted, the wall time of the compute stages (transfers
        then count nothing)."""
        with self._lock:
            for name, event in stages:
                if self.device.timers:
                    self.stage_seconds[name] += (event.profile.end - event.profile.start) * 1e-9
                else:
                    self.stage_seconds[name] += self._wall_seconds.pop(event, 0.0)

    def reported(self, slot: int) -> int:
        """What the stages make of the counters of the slot's last downloaded chunk
        (:meth:`pybp.stages.base.Stage.reported`: values normalisation replaced); a
        stage may raise to refuse the chunk."""
        counts = {name: int(host[0]) for name, host in self.slots[slot].counts.items()}
        return sum(stage.reported(counts) for stage in self.stages if stage.reports)

    # ---- life -------------------------------------------------------------------------
    def _release_slots(self):
        for s in self.slots:
            s.release()
        self.slots, self.memory, self._needs = [], None, None

    def finish(self, stop=None):
        """Wait (interruptibly) for the work enqueued on every queue."""
        for queue in (self.queue, self.upload_queue, self.download_queue):
            pacing.finish(queue, stop)
        self.pacer.clear()

    def close(self):
        """Release device memory and staging now (also on leaving a ``with`` block)."""
        self.finish()
        self._release_slots()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
