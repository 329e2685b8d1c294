"""Cone beam's filtered projections kept in page-locked host memory between the slabs
of a kept :class:`pybp.ConeBackprojector` (docs/design.md, section 8).

Where a volume goes in several slabs, each slab's passes would read, pre-weight and
filter their windows of rows again, and most of the time would go in the host's
copies of those windows into staging (cone_slab_copies.py@82c47bc: 6.5 GB/s inside
the stream). Instead, :class:`StoreFill` runs FDK's stages before the back-projection
(pre-weighting, the filter) once over every projection's rows that the planes project
onto, and each chunk goes down by one DMA into a :class:`Store`; each slab's passes
then take their windows of rows from it by DMA (:meth:`Store.dma_upload`), with no host
copy and no filtering again. A filtered row does not depend on the chunk it was
filtered in, so the volume equals one piece bit for bit.

The store is pinned on the first call and kept, as the back-projector's buffers are:
pinning takes longer than filtering (it is why one-shot calls do not use it). It is
used where it pays and fits (:func:`stored`): several slabs, and a store within
:data:`pybp.checks.HOST_MEMORY_SHARE` of the host's memory. The fill and the slabs
take turns with the device memory: each phase's chunks may take all that the other's
stages do not keep, and are freed when it ends (:meth:`Executor.release_memory`).
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

from pybp import checks
from pybp.cl.staging import Staging
from pybp.cone import slabs
from pybp.cone.backproject import IMAGES, Preweight, SlabRecipe, Window
from pybp.stages.filters import Filter
from pybp.stream import pipeline, sources
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import Budget, MemoryPlan
from pybp.stream.recipe import Recipe

# Chunks in flight in the fill, each going up, filtered and coming down in place. Three
# made the chunks smaller within the same memory and the fill slower (H200, 512^3 at a
# quarter limit: chunks of 4 projections, 0.23 s, against 8 and 0.19 s:
# cone_slab_copies.py@82c47bc --slots).
FILL_SLOTS = 2


class Store:
    """``shape`` ``(n_angles, n_rows, n_cols)`` float32 in page-locked memory made on
    ``queue``'s context (detector rows from ``first_row``), copied to and from device
    buffers of images of even rows by one rectangular DMA."""

    def __init__(self, queue, shape, first_row):
        self._staging = Staging(queue)
        self.array = self._staging.array(int(np.prod(shape)), np.float32).reshape(shape)
        self.shape, self.first_row = tuple(shape), first_row

    def _box(self, row, first, count, n_rows) -> dict:
        """The copy of rows ``[row, row + n_rows)`` of the store (its own rows) of
        ``count`` projections from ``first``, against images of ``even(n_rows)`` rows."""
        line = self.shape[2] * 4
        return dict(buffer_origin=(0, 0, 0), host_origin=(0, row, first),
                    region=(line, n_rows, count), buffer_pitches=(line, slabs.even(n_rows) * line),
                    host_pitches=(line, self.shape[1] * line), is_blocking=False)

    def dma_upload(self, queue, buffer, first, count, rows: slice):
        """Rows ``rows`` (the store's) of ``count`` projections from ``first`` into
        ``buffer``; the event."""
        return cl.enqueue_copy(queue, buffer, self.array,
                               **self._box(rows.start, first, count, rows.stop - rows.start))

    def dma_download(self, queue, buffer, first, count, first_row, n_rows):
        """``count`` images of ``buffer`` (the detector's rows from ``first_row``)
        into the store at projection ``first``; the event."""
        return cl.enqueue_copy(queue, self.array, buffer,
                               **self._box(first_row - self.first_row, first, count, n_rows))

    def release(self):
        self._staging.release()
        self.array = None


class StoreFill(Recipe):
    """The stream's recipe (pybp/stream/recipe.py) of FDK's stages before the
    back-projection for ``geometry``'s ``planes`` (a range) on one device, in chunks of
    a pass's projections (each pass's window of the rows the planes project onto), into
    a :class:`Store`: what :meth:`run` fills. With
    ``filter`` None: the check of line integrals alone. Its chunks are sized by
    :meth:`plan`."""

    def __init__(self, geometry, params, device, context, filter, padding, short_scan, flats,
                 darks, planes):
        self.geometry, self.params, self.device, self.context = geometry, params, device, context
        self.filter, n, ppp = filter, geometry.n_angles, params.projections_per_pass
        n_cols = geometry.detector_shape[1]
        self.windows = slabs.windows(geometry, planes,
                                     tuple((a, min(ppp, n - a)) for a in range(0, n, ppp)))
        first = min(w[0] for w in self.windows)
        self.shape = (n, max(sum(w) for w in self.windows) - first, n_cols)
        self.first_row, self.store = first, None
        stride = slabs.even(max(w[1] for w in self.windows))
        self.image_bytes = stride * n_cols * 4
        stages = [Preweight(self, short_scan, flats, darks)]
        if filter is not None:
            stages.append(Filter(context, device, filter, n_cols, np.ones(stride), padding,
                                 buffer=IMAGES, rows=self.chunk_rows))
        self.stages = tuple(stages)
        self.kept_bytes = sum(stage.shared_bytes for stage in stages)  # for all chunks
        self._layout = Layout(IMAGES, np.dtype(np.float32), (stride, n_cols), 0, IMAGES,
                              (stride, n_cols))
        self.executor = Executor(device, context)
        self.n_angles, self.n_bins, self._memory = n, n_cols, None

    def plan(self, budget: Budget):
        """Chunks within a pass (the pre-weighting counts the pass's window), of the
        most projections dividing a pass whose two chunks fit ``budget`` beside what
        the stages keep (``ValueError`` where one projection
        does not)."""
        ppp = self.params.projections_per_pass
        count = next((k for k in range(ppp, 0, -1) if ppp % k == 0 and
                      self.kept_bytes + FILL_SLOTS * k * self.image_bytes <= budget.allowed), 1)
        self._memory = MemoryPlan.create(
            self.stages, self.device, self.geometry.n_angles, widths=(count,),
            chunk_slices=count, slots=FILL_SLOTS, own=(IMAGES,), preferred=count, budget=budget,
            subject="params: one projection", advice="allow more memory (memory_limit)")

    def layout(self, dtype=None) -> Layout:
        """A chunk's images of float32, going up and coming down in place."""
        return self._layout

    def memory(self, n_slices=None, stages=None, chunk_slices=None, layout=None,
               preferred=None) -> MemoryPlan:
        """The chunks' plan (:meth:`plan`)."""
        return self._memory

    def updates_per_slice(self) -> int:
        """Pixels of a projection's rows: what a chunk's projection stands for."""
        return self.shape[1] * self.shape[2]

    def stages_for(self, dtype=None, log=True) -> tuple:
        """Counts are normalised by the pre-weighting itself."""
        return self.stages

    @property
    def store_bytes(self) -> int:
        return 4 * int(np.prod(self.shape))

    def pass_of(self, chunk) -> tuple:
        """``(first, count, window)`` of ``chunk``: projections of one pass, and the
        pass's window."""
        index = chunk.first_row // self.params.projections_per_pass
        return chunk.first_row, chunk.count, self.windows[index]

    def counted_rows(self, index) -> tuple:
        """``(first, stop)``: the rows of pass ``index`` whose replaced values are
        counted, all of its window (what the slabs' windows of the pass hold together)."""
        first, n_rows = self.windows[index]
        return first, first + n_rows

    def chunk_rows(self, chunk) -> int:
        return chunk.count * slabs.even(self.pass_of(chunk)[2][1])

    def run(self, source, progress=None, stop=None) -> int:
        """Fill the store (pinned on the first call) from ``source``, projections
        ``(n_angles, n_rows, n_cols)``; returns the values the flat-field rule
        replaced (line integrals with NaN or Inf are refused here, before any slab).
        Each pass's window of rows is copied into its place in the store by the host's
        threads as fast as they go (:class:`pybp.stream.sources.Ahead`), and each chunk
        goes up from there by one DMA, is filtered and comes down into the same place,
        on its slot's queue (:func:`pybp.stream.pipeline.stream`, ``direct``): the copies
        wait for no device slot (H200, 512^3 at a quarter limit: 0.142-0.159 s through
        staging and the three threads' stream, 0.100-0.124 s so; docs/design.md, section
        8). The chunks' device memory is freed again at the end, for the slabs."""
        if self.store is None:
            self.store = Store(self.executor.upload_queue, self.shape, self.first_row)
        self.prepare(self.n_angles)
        store, ppp = self.store, self.params.projections_per_pass
        stop = stop if stop is not None else threading.Event()

        def rows(index) -> tuple:  # pass ``index``'s window: the detector's, the store's
            first_row, n_rows = self.windows[index]
            at = first_row - self.first_row
            return slice(first_row, first_row + n_rows), slice(at, at + n_rows)

        def copy(a, b):  # projections [a, b), of one pass, into their place, as float32
            detector, kept = rows(a // ppp)
            sources.read_into(store.array[a:b, kept], source, slice(a, b), detector)

        def read(span):
            ahead.wait(span.start, span.start + span.count, stop)
            return Window(store, span.start, span.count, rows(span.start // ppp)[1]), None

        try:
            with sources.Ahead(copy, self._copy_edges()) as ahead:
                return pipeline.stream(self.executor,
                                       pipeline.Rows(self.geometry.n_angles, align=ppp),
                                       read, self, progress, None, stop, direct=True)
        finally:
            self.executor.release_memory()

    def _copy_edges(self) -> list:
        """Where the copies into the store start (then the last projection's end):
        blocks of about :data:`pybp.stream.sources.PARALLEL_COPY_BYTES` within a pass."""
        n, ppp = self.geometry.n_angles, self.params.projections_per_pass
        image = self.shape[2] * 4 * max(w[1] for w in self.windows)
        step = max(1, min(ppp, sources.PARALLEL_COPY_BYTES // image))
        return sorted({*range(0, n, ppp), *range(0, n, step), n})

    def download(self, queue, buffer, start, count):
        """The filtered rows of the chunk of ``count`` projections from ``start`` into
        the store (the stream's ``write``: its chunks come down by DMA, never through
        staging)."""
        first_row, n_rows = self.windows[start // self.params.projections_per_pass]
        return self.store.dma_download(queue, buffer, start, count, first_row, n_rows)

    def close(self):
        super().close()
        if self.store is not None:
            self.store.release()
            self.store = None


def stored(recipe: SlabRecipe, padding, short_scan, flats, darks, queue=None):
    """For a kept back-projector whose ``recipe`` (not ``filtered``) goes in several
    slabs: ``(fill, slabs)``, a :class:`StoreFill` and a ``filtered`` recipe of slabs
    from its store, each phase's chunks within the memory budget beside what the
    other's stages keep; None where one slab does, where the store would take over
    the host's share, or where no chunk of a phase fits (``recipe`` is then kept:
    each slab filters its windows again)."""
    if len(recipe.plan.slabs) == 1:
        return None
    fill = StoreFill(recipe.geometry, recipe.params, recipe.device, recipe.context,
                     recipe.filter, padding, short_scan, flats, darks, recipe.planes)
    kept = None
    try:
        if checks.within_host_share(fill.store_bytes):
            target = dict(queue=queue) if queue is not None else dict(context=recipe.context)
            kept = SlabRecipe(recipe.geometry, recipe.params, **target, filter=recipe.filter,
                              budget=recipe.budget.less(fill.kept_bytes),
                              planes=(recipe.planes.start, recipe.planes.stop), filtered=True)
            fill.plan(recipe.budget.less(sum(stage.shared_bytes for stage in kept.stages)))
            return fill, kept
    except ValueError:
        pass
    fill.close()
    if kept is not None:
        kept.close()
    return None
