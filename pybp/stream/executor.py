"""The executor (design section 3): one device's context, queues and memory, running a
plan's passes on chunks of slices.

A chunk goes up on the upload queue, through the device stages on the compute queue
(projections to sinograms, FFT filter, half scaling, packing and back-projection), and
down on the download queue; each of ``slots`` chunks in flight has its own device
buffers and page-locked staging buffers, so the transfers of one chunk run while the
kernels of another do (paper Sect. 4, Fig. 4). ``pybp.pipeline`` orders the steps of a
chunk from three threads, which wait on the events of the step before, and copies
between the caller's arrays and the staging buffers.

Thread safety: the uploads, the computes and the downloads may each be driven by one
thread (as the pipeline does); anything else (a second pipeline, ``Backprojector``
calls) needs an executor of its own per thread, or a lock.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import numpy as np
import pyopencl as cl

from pybp.cl import codegen, implementations, pacing
from pybp.stages import filters
from pybp.cl.device import CHANNEL_ORDERS, CHANNEL_TYPES
from pybp.parallel.params import PACK_ITEMS
from pybp.parallel.plan import MemoryPlan, Plan
from pybp.stages.halfscale import HALF_TARGET

# OpenCL types of the inputs the device converts itself; others become float32 on the host.
RAW_TYPES = {np.dtype(np.uint8): "uchar", np.dtype(np.int8): "char",
             np.dtype(np.uint16): "ushort", np.dtype(np.int16): "short",
             np.dtype(np.uint32): "uint", np.dtype(np.int32): "int",
             np.dtype(np.float32): "float"}
FLOOR_TRANSMISSION = 1e-6  # what a non-positive normalised value becomes before -log
SCRATCH_BYTES = 64 << 20  # most rows filtered by convolution at once


def raw_dtype(dtype) -> np.dtype:
    """The dtype projections of ``dtype`` travel to the device in."""
    dtype = np.dtype(dtype)
    return dtype if dtype in RAW_TYPES else np.dtype(np.float32)


class Slot:
    """One chunk in flight: device buffers, page-locked staging, and the last event of
    its last chunk's device work."""

    def __init__(self, executor, memory: MemoryPlan):
        e, g, chunk = executor, executor.plan.geometry, memory.chunk_slices
        rw = cl.mem_flags.READ_WRITE
        ny, nx = g.slice_shape
        self.sinograms = cl.Buffer(e.context, rw, chunk * g.n_angles * g.n_bins * 4)
        self.slices = cl.Buffer(e.context, rw, chunk * ny * nx * 4)
        self.raw = None
        if e.raw_dtype is not None:
            self.raw = cl.Buffer(e.context, rw, chunk * g.n_angles * g.n_bins * e.raw_dtype.itemsize)
            self.clipped = cl.Buffer(e.context, rw, 4)
            self.clipped_host = np.zeros(1, np.uint32)
            # The dark and flat means of the chunk's rows, uploaded with it.
            self.dark, self.flat = (cl.Buffer(e.context, rw, chunk * g.n_bins * e.real_dtype.itemsize)
                                    for _ in range(2))
        self.references = None  # the host means last uploaded (kept until their copy ends)
        self.peaks = cl.Buffer(e.context, rw, chunk * 4)
        # Zeros for the counters, copied rather than filled: Oclgrind 21.10's checker
        # does not count clEnqueueFillBuffer as a write (docs/portability.md).
        self.zeros = np.zeros(chunk, np.uint32)
        self.scales = cl.Buffer(e.context, rw, chunk * 4)
        in_dtype = e.raw_dtype or np.dtype(np.float32)
        self._maps = []
        self.staging_in = self._staging(e, chunk * g.n_angles * g.n_bins, in_dtype)
        self.staging_out = self._staging(e, chunk * ny * nx, np.dtype(np.float32))
        self.computed = None

    def _staging(self, e, count, dtype):
        """A flat page-locked host array (a buffer allocated by the runtime and kept
        mapped): DMA reaches it directly, at several times pageable memory's speed."""
        buffer = cl.Buffer(e.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                           max(1, count * dtype.itemsize))
        array, _ = cl.enqueue_map_buffer(e.upload_queue, buffer,
                                         cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                         (count,), dtype, is_blocking=True)
        self._maps.append((buffer, array))
        return array

    def release(self, queue):
        for _, array in self._maps:
            array.base.release(queue)
        queue.finish()
        self._maps = []


class Executor:
    """Runs ``plan`` on the device of ``context`` (or of ``queue``, then the compute
    queue), chunk by chunk.

    ``filter``/``padding``/``weights``: the FBP filter (None: back-project as given).
    ``circle``: zero the pixels outside the reconstruction circle
    (:meth:`pybp.geometry.Geometry.circle_columns`). Chunks are sinograms until
    :meth:`take_projections` says otherwise.
    """

    def __init__(self, plan: Plan, device, context=None, queue=None, filter=None,
                 padding="zero", weights=None, filter_method="auto", circle=False):
        self.plan, self.device = plan, device
        self.context = queue.context if queue is not None else context
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        self.queue = queue or cl.CommandQueue(self.context, properties=profiling)
        self.upload_queue = cl.CommandQueue(self.context, properties=profiling)
        self.download_queue = cl.CommandQueue(self.context, properties=profiling)
        self.raw_dtype, self.log = None, True
        # Normalisation in double where the device has it (templates/normalize.cl.mako).
        self.real = "double" if "cl_khr_fp64" in device.extensions else "float"
        self.real_dtype = np.dtype(np.float64 if self.real == "double" else np.float32)
        g = plan.geometry
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._tables = {width: [cl.Buffer(self.context, flags, hostbuf=table) for table in p.tables]
                        for width, p in plan.passes.items()}
        self._filter = None
        if filter is not None:
            self._filter = filters.device_filter(self.context, device, filter, g.n_bins,
                                                 weights, padding, filter_method)
        self._programs, self._pass_kernels = {}, {}
        self._images = {}
        self._texels = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, plan.texel_bytes)
        self._circle = None
        self._scratch = None  # rows filtered by direct convolution, before they go back
        if circle:
            radius = None if circle is True else float(circle)
            self._circle = cl.Buffer(self.context, flags, hostbuf=g.circle_columns(radius))
        self.memory = None
        self.slots = []
        for width in plan.passes:  # a build error comes before any work
            self._kernels(width)
        self.stage_seconds = defaultdict(float)  # device time per stage, since reset
        self.pacer = pacing.Pacer(device.type, device.timers)
        # Whether the pipeline may enqueue from several threads (pybp.implementations).
        self.threads = implementations.named(device.implementation).threads
        self._wall_seconds = {}  # stage's last event -> its wall time, where timers lie
        self._lock = threading.Lock()

    # ---- set-up ---------------------------------------------------------------------
    def _kernel(self, source, name):
        """Kernel ``name`` of ``source``: each program built once, each kernel made once."""
        if (source, name) not in self._programs:
            if source not in self._programs:
                self._programs[source] = codegen.build(self.context, source, self.device)
            self._programs[source, name] = codegen.kernel(self._programs[source], name,
                                                          self.device)
        return self._programs[source, name]

    def _kernels(self, width):
        """The packing program's kernels and ``backproject`` of a pass width."""
        if width not in self._pass_kernels:
            params = self.plan.passes[width].params
            packing = codegen.render_pack(params)
            self._pass_kernels[width] = (
                {name: self._kernel(packing, name)
                 for name in ("pack", "slice_peaks", "half_scales", "unscale", "outside_circle")},
                self._kernel(codegen.render(params), "backproject"))
        return self._pass_kernels[width]

    def take_projections(self, dtype, log=True):
        """From now on chunks are projections ``(angle, row, bin)`` of ``dtype`` (see
        :func:`raw_dtype`), normalised on the device with the dark and flat means given
        to :meth:`upload` and, with ``log``, taken ``-log`` of; None: sinograms."""
        dtype = None if dtype is None else np.dtype(dtype)
        if dtype != self.raw_dtype:
            self._release_slots()
        self.raw_dtype, self.log = dtype, log
        if dtype is not None:
            self._normalize = self._kernel(codegen.render_normalize(RAW_TYPES[dtype], self.real),
                                           "sinograms_from_projections")

    def reserve(self, memory: MemoryPlan):
        """Allocate the slots of ``memory`` (kept while they are large enough)."""
        if (self.memory is not None and self.memory.chunk_slices >= memory.chunk_slices
                and len(self.slots) >= memory.slots
                and self.memory.pass_width == memory.pass_width):
            return
        self._release_slots()
        self.memory = memory
        self.slots = [Slot(self, memory) for _ in range(memory.slots)]

    # ---- one chunk --------------------------------------------------------------------
    def staging_in(self, slot: int, count: int) -> np.ndarray:
        """Where the caller puts chunk data for ``slot``: projections ``(n_angles, count,
        n_bins)`` of ``raw_dtype``, or sinograms ``(count, n_angles, n_bins)`` float32.
        Fill it only after :meth:`input_free` of the slot."""
        g = self.plan.geometry
        shape = ((g.n_angles, count, g.n_bins) if self.raw_dtype is not None
                 else (count, g.n_angles, g.n_bins))
        return self.slots[slot].staging_in[:int(np.prod(shape))].reshape(shape)

    def staging_out(self, slot: int, count: int) -> np.ndarray:
        """The slices of the chunk last run in ``slot``, once its download is done."""
        ny, nx = self.plan.geometry.slice_shape
        return self.slots[slot].staging_out[:count * ny * nx].reshape(count, ny, nx)

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

    def upload(self, slot: int, count: int, references=None):
        """Enqueue the upload of the chunk staged in ``slot`` (after :meth:`input_free`)
        and of ``references``, the dark and flat means of its rows (``(count, n_bins)``
        each; None for data already normalised); returns the last event and the stages
        (for :meth:`record`)."""
        s, q = self.slots[slot], self.upload_queue
        target = s.raw if self.raw_dtype is not None else s.sinograms
        event = cl.enqueue_copy(q, target, self.staging_in(slot, count), is_blocking=False)
        stages = [("upload", event)]
        s.references = None
        if references is not None and self.raw_dtype is not None:
            s.references = [np.ascontiguousarray(a, self.real_dtype) for a in references]
            stages += [("upload", cl.enqueue_copy(q, buffer, host, is_blocking=False))
                       for buffer, host in zip((s.dark, s.flat), s.references)]
        q.flush()
        return stages[-1][1], stages

    def compute(self, slot: int, count: int, stop=None):
        """Enqueue the device stages of the chunk uploaded to ``slot`` (its upload done,
        the slot's last download done). Returns the last event and the stages. Waits while the
        device has enough queued (:class:`pybp.pacing.Pacer`); a set ``stop`` ends
        the wait with :class:`pybp.pacing.Stopped`."""
        s, g, q = self.slots[slot], self.plan.geometry, self.queue
        stages = []
        if self.raw_dtype is not None:
            stages += self._timed(stop, lambda: [
                ("normalise", cl.enqueue_copy(q, s.clipped, s.zeros[:1], is_blocking=False)),
                ("normalise", self._normalize(
                    q, (-(-g.n_bins // 64) * 64, g.n_angles, count), (64, 1, 1),
                    s.raw, s.dark, s.flat,
                    np.int32(g.n_angles), np.int32(count), np.int32(g.n_bins),
                    np.int32(s.references is not None), np.int32(self.log),
                    np.float32(FLOOR_TRANSMISSION), s.clipped, s.sinograms))])
        if self._filter is not None:
            stages += self._timed(stop, lambda: self._filter_rows(s, count, stop))
        stages += self._timed(stop, lambda: self._backproject(s, count, stop))
        q.flush()
        s.computed = stages[-1][1]
        return stages[-1][1], stages

    def _timed(self, stop, enqueue):
        """The stages ``enqueue()`` launches. Where the device's profiling timers cannot
        be trusted (:func:`pybp.device.probe`), they run alone on the compute queue and
        their wall time stands for their device time."""
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
        (drained by the caller); returns the last event and the stages."""
        s = self.slots[slot]
        event = cl.enqueue_copy(self.download_queue, self.staging_out(slot, count), s.slices,
                                is_blocking=False)
        last = event
        if self.raw_dtype is not None:
            last = cl.enqueue_copy(self.download_queue, s.clipped_host, s.clipped,
                                   is_blocking=False)
        self.download_queue.flush()
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

    def clipped(self, slot: int) -> int:
        """How many values the normalisation of the slot's last downloaded chunk replaced
        (see FLOOR_TRANSMISSION); with ``log=False`` any (NaN or Inf) is an error."""
        count = int(self.slots[slot].clipped_host[0]) if self.raw_dtype is not None else 0
        if count and not self.log:
            raise ValueError(f"projections: {count} values of a chunk are NaN or Inf; with "
                             "log=False the values are back-projected as they are: replace "
                             "them first (numpy.nan_to_num), or pass flats and darks")
        return count

    def _filter_rows(self, s, count, stop):
        """The FBP filter over the chunk's sinogram rows, in blocks paced by
        ``self.pacer``. The FFT filters in place; direct convolution reads whole rows
        that other work-groups write, so it writes a block into scratch memory, copied
        back after."""
        f, q, n_bins = self._filter, self.queue, self.plan.geometry.n_bins
        stages = []
        most = None
        if not f.in_place:  # blocks of at most the scratch's rows, sized for any chunk
            most = min(max(1, SCRATCH_BYTES // (4 * n_bins)), self.memory.chunk_slices * f.n_angles)
            if self._scratch is None:
                self._scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, most * n_bins * 4)
        for first, rows in self.pacer.blocks("filter", count * f.n_angles, f.row_cost, f.row_step,
                                             most):
            self.pacer.admit("filter", rows * f.row_cost, stop)
            target = s.sinograms if f.in_place else self._scratch
            event = f(q, s.sinograms, target, count, first_row=first, rows=rows)
            q.flush()
            self.pacer.launched(event, "filter", rows * f.row_cost)
            stages.append(("filter", event))
            if not f.in_place:
                stages.append(("filter", cl.enqueue_copy(
                    q, s.sinograms, self._scratch, byte_count=rows * n_bins * 4,
                    dst_offset=first * n_bins * 4)))
        return stages

    def _backproject(self, s, count, stop):
        """Passes of the plan over ``count`` slices of ``s``: half scales, packing,
        back-projection of each piece in tiles paced by ``self.pacer``, unscaling."""
        g, plan = self.plan.geometry, self.plan
        ny, nx = g.slice_shape
        q, stages = self.queue, []
        width = self.memory.pass_width  # narrower than the plan's where memory is short
        half = plan.params.storage == "half"
        if half:  # the scale of each slice's texels, from their largest value
            kernels, _ = self._kernels(plan.width_for(min(count, width)))
            plane = g.n_angles * g.n_bins
            stages.append(("half", cl.enqueue_copy(q, s.peaks, s.zeros[:count], is_blocking=False)))
            groups = min(64, -(-plane // codegen.PEAK_ITEMS))
            stages.append(("half", kernels["slice_peaks"](
                q, (groups * codegen.PEAK_ITEMS, count), (codegen.PEAK_ITEMS, 1), s.sinograms,
                np.int32(plane),
                s.peaks)))
            stages.append(("half", kernels["half_scales"](
                q, (count,), None, s.peaks, np.float32(1.0), np.float32(HALF_TARGET),
                np.int32(count), s.scales)))
        for start in range(0, count, width):
            n = min(width, count - start)
            pass_width = plan.width_for(n)
            pass_plan = plan.passes[pass_width]
            params = pass_plan.params
            kernels, backproject = self._kernels(pass_width)
            for index, (piece, table) in enumerate(zip(pass_plan.pieces, self._tables[pass_width])):
                stages.append(("pack", kernels["pack"](
                    q, (-(-piece.n_bins // PACK_ITEMS) * PACK_ITEMS, piece.n_angles),
                    (PACK_ITEMS, 1),
                    s.sinograms, np.int32(start), np.int32(n), np.int32(g.n_angles),
                    np.int32(g.n_bins), np.int32(piece.first_angle), np.int32(piece.first_bin),
                    np.int32(piece.n_angles), np.int32(piece.n_bins), s.scales, self._texels)))
                texels = self._texels
                if params.source == "image":
                    texels, copy = self._load_image(params, piece)
                    stages.append(("pack", copy))
                for x, y, columns, rows in self.pacer.tiles(g.slice_shape, params.group_side,
                                                            piece.n_angles * n):
                    updates = columns * rows * piece.n_angles * n
                    self.pacer.admit("backproject", updates, stop)
                    event = backproject(
                        q, params.global_size((rows, columns)), params.local_size,
                        texels,                   # interleaved sinogram texels: image or buffer
                        table,                    # per angle: cos, sin, base (+ residuals)
                        np.int32(piece.n_angles),
                        np.int32(piece.n_bins),
                        np.int32(nx), np.int32(ny),
                        np.int32(index > 0),      # later pieces accumulate
                        np.int32(start),          # the pass's first slice in the chunk
                        np.int32(x), np.int32(y),  # the tile's first pixel
                        s.slices)
                    q.flush()  # the pacer waits on it
                    self.pacer.launched(event, "backproject", updates)
                    stages.append(("backproject", event))
        if half:
            stages.append(("backproject", kernels["unscale"](
                q, (-(-nx * ny // 256) * 256, count), (256, 1), s.slices, np.int32(nx * ny),
                s.scales)))
        if self._circle is not None:
            stages.append(("backproject", kernels["outside_circle"](
                q, (-(-nx // 64) * 64, ny, count), (64, 1, 1), s.slices, np.int32(nx),
                np.int32(ny), self._circle)))
        return stages

    def _load_image(self, params, piece):
        """Copy the packed texels of a piece into its image, made once per shape.

        Images are exactly the piece's size: their clamp-to-zero border is the edge."""
        shape = (piece.n_bins, piece.n_angles * params.texel_rows)
        key = (params.texel_channels, params.storage, shape)
        if key not in self._images:
            fmt = cl.ImageFormat(CHANNEL_ORDERS[params.texel_channels], CHANNEL_TYPES[params.storage])
            self._images[key] = cl.create_image(self.context, cl.mem_flags.READ_ONLY, fmt, shape=shape)
        copy = cl.enqueue_copy(self.queue, self._images[key], self._texels, offset=0,
                               origin=(0, 0), region=shape)
        return self._images[key], copy

    # ---- life -------------------------------------------------------------------------
    def _release_slots(self):
        for s in self.slots:
            s.release(self.upload_queue)
        self.slots = []
        self.memory = None
        self._scratch = None  # sized for the chunks of the memory plan

    def finish(self, stop=None):
        """Wait (interruptibly) for the work enqueued on every queue."""
        for queue in (self.queue, self.upload_queue, self.download_queue):
            pacing.finish(queue, stop)
        self.pacer.clear()

    def close(self):
        """Release device memory and staging now (also on leaving a ``with`` block)."""
        self.finish()
        self._release_slots()
        self._images.clear()
        self._texels = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
