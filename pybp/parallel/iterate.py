"""Parallel beam's iterative methods as a stage of the stream: each chunk's sinograms
reconstructed by SIRT, SART, CGLS or TV (pybp/iterative/methods.py) with the matched
pair, in place of the filter and the back-projection. Each slice is its own problem,
with the same bits however many share a chunk, so that chunks cut anywhere, several
devices, Dask workers and ``--resume`` give the volume one call gives."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp.cl import pacing
from pybp.geometry.parallel import ParallelGeometry
from pybp.iterative import methods, table
from pybp.iterative.options import check_options
from pybp.iterative.tv import Variation
from pybp.iterative.vectors import Vectors
from pybp.parallel import project
from pybp.stages.base import Need, Stage

# Sets of projections a chunk holds beside its method's working set
# (pybp/iterative/table.py), the chunk's sinograms and slices and the pair's own copies
# (project.scratch_bytes): the data in the pair's layout (SART's, in its subsets).
DATA_SETS = 1
# A chunk is one call of its method: nothing of it is written or shown before its last
# iteration. Its rows are bounded so that one takes about CHUNK_SECONDS at a rate guessed
# from the device, UNIT_RATES updates a second per compute unit, below what the pair ran
# at (the H200: 2000 G/s over 132 units; PoCL on 2 cores: 0.7 G/s, and 1e8 covers other
# CPUs' slower cores): 64 slices of 256^2 on a 2-core CPU were one chunk of 30 s, which
# Ctrl-C lost whole and a second device never shared (issue 51). Never fewer than the
# pair's rows a work-item, which share its loads. On the H200, 64 slices of 2048^2 in
# chunks of 8 (2 s and 5e9 a unit) took 6.22 s against 5.99 s in chunks of 64: each
# chunk makes its pair and SIRT's weights; these values give it chunks of 24.
CHUNK_SECONDS = 4.0
UNIT_RATES = {"gpu": 1e10, "accelerator": 1e10, "cpu": 1e8}


class Iterate(Stage):
    """``iterations`` of ``method`` on each chunk's sinograms into its slices, from
    zero, with ``options`` (:func:`pybp.iterative.options.check_options`)."""

    name = "iterate"
    # Slices per chunk where memory allows: the pair's kernels take 8 slices a
    # work-item, and fewer slices give launches too small to fill a GPU (the stream's
    # 4.25 s for 256 slices of 1024^2, 10 SIRT iterations on the H100, was in chunks of
    # 64; docs/benchmarks.md's history).
    chunk_rows = 64

    def __init__(self, context, device, geometry: ParallelGeometry, method, iterations, options):
        self.context, self.device, self.geometry = context, device, geometry
        self.method, self.iterations = method, iterations
        self.options = check_options(method, iterations, options)
        self.most_rows = most_rows(device, geometry, method, iterations)
        ny, nx = geometry.slice_shape
        volume, projections = ny * nx * 4, geometry.n_angles * geometry.n_bins * 4
        volumes, sets = table.TABLE[method].working_set(2)
        sets += DATA_SETS
        # the working set: counted by the memory plan, allocated here per chunk; the pair's
        # copies hold up to a whole group of rows more than the chunk's
        copies = project.scratch_bytes(geometry, 1)
        self.needs = (Need("sinograms", projections), Need("slices", volume),
                      Need("iterate", volumes * volume + sets * projections + copies,
                           fixed=(project.ROWS_PER_ITEM - 1) * copies, allocated=False))
        self._vectors = None

    def enqueue(self, chunk):
        q, n, g = chunk.queue, chunk.count, self.geometry
        first = cl.enqueue_marker(q)  # the method's launches are timed from here
        if self._vectors is None or self._vectors.queue is not q:
            self._vectors = Vectors(self.context, q, self.device)
        vectors = self._vectors
        work = methods.allocator(q)
        shape = (n,) + g.slice_shape
        pair = project.ParallelPair(g, n, self.context, q, self.device, allocate=work)

        def data():
            b = work(pair.projection_shape)
            pair.from_sinograms(chunk.buffers["sinograms"], b.data)
            return b

        x = cla.Array(q, shape, np.float32, data=chunk.buffers["slices"])
        vectors.fill(x, 0.0)  # x0 = 0, as ASTRA's

        def report(iteration, volume):
            if chunk.stop is not None and chunk.stop.is_set():
                raise pacing.Stopped()

        problem = methods.Problem(
            pair, vectors, g.n_angles, data,
            subset=lambda angles, whole: self._subset(q, whole(), angles, work, n),
            variation=lambda: Variation(self.context, q, self.device, shape, 2))
        table.TABLE[self.method].solve(problem, x, iterations=self.iterations, report=report,
                                       allocate=work, **self.options)
        # from the first marker to the last: the last alone gave 7.6e-7 s for a 0.36 s call
        return [(self.name, cl.enqueue_marker(q), first)]

    def _subset(self, queue, b, angles, work, n_rows):
        """The projections of ``angles`` from ``b`` ``(n_angles, n_rows, n_bins)``,
        copied on the device into an array of the working set."""
        row = n_rows * self.geometry.n_bins * 4
        out = work((len(angles), n_rows, self.geometry.n_bins))
        for j, angle in enumerate(angles):
            cl.enqueue_copy(queue, out.data, b.data, byte_count=row, src_offset=int(angle) * row,
                            dst_offset=j * row)
        return out


def most_rows(device, geometry: ParallelGeometry, method, iterations) -> int:
    """The most slices a chunk of ``iterations`` of ``method`` takes on ``device`` (a
    :class:`pybp.cl.device.DeviceDescription`): about :data:`CHUNK_SECONDS` of its
    work, a multiple of the pair's rows a work-item, at least one such group, at most
    :attr:`Iterate.chunk_rows`."""
    ny, nx = geometry.slice_shape
    applications = 2 * (iterations + table.TABLE[method].steps_before)
    per_row = applications * ny * nx * geometry.n_angles
    rate = UNIT_RATES.get(device.type, UNIT_RATES["cpu"]) * max(1, device.compute_units)
    group = project.ROWS_PER_ITEM
    rows = int(CHUNK_SECONDS * rate // per_row) // group * group
    return int(np.clip(rows, group, Iterate.chunk_rows))
