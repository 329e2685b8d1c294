"""Cone beam's corrections into line integrals as a recipe of the stream
(pybp/stream/recipe.py): chunks of detector rows of the projections, on any device or
several, through the stages both geometries share (flat-field normalisation and
``-log``, phase retrieval, ring removal on each row's sinogram), coming down as
sinograms. pybp/cone/run.py puts them into the line integrals that FDK's passes then
weight, filter and back-project as they do a user's (pybp/cone/backproject.py), and
that cone beam's iterative methods start from.
"""

from __future__ import annotations

import numpy as np

from pybp.cl.device import describe, open_device
from pybp.geometry.cone import ConeGeometry
from pybp.stages import rings
from pybp.stages.phase import Paganin
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import CHUNK_SLICES, Budget, MemoryPlan
from pybp.stream.recipe import Recipe

# Rows per chunk, at least: a row's corrections are cheap beside its transfers, so
# chunks of many rows (parallel beam's 4 are sized for its back-projection's slices)
# keep the per-chunk costs small.
CHUNK_ROWS = 32


class Corrections(Recipe):
    """The corrections of ``geometry``'s projections on one device (``device``,
    ``context`` or ``queue``): ``rings`` and ``ring_options`` (ring removal on each
    detector row's sinogram, as :func:`pybp.reconstruct`), ``phase`` (Paganin's
    retrieval on the projections), ``memory_limit`` (the one budget:
    pybp/stream/memory.py); normalisation as the stream's job asks."""

    def __init__(self, geometry: ConeGeometry, rings_method=None, ring_options=None,
                 phase=None, memory_limit=None, device=None, context=None, queue=None):
        self.geometry = geometry
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = describe(self.cl_device)
        self.n_angles, self.n_bins = geometry.n_angles, geometry.detector_shape[1]
        self.phase = Paganin.create(phase)
        self.budget = Budget.of(self.device, memory_limit)
        options = rings.options(rings_method, ring_options, self.n_angles, self.n_bins)
        self.stages = () if rings_method is None else (rings.RingRemoval(
            self.context, self.device, self.n_angles, self.n_bins, rings_method, options),)
        self.executor = Executor(self.device, self.context, queue)

    def layout(self, dtype=None) -> Layout:
        if dtype is None:
            raise ValueError("projections: cone beam takes projections, not sinograms")
        row = (self.n_angles, self.n_bins)
        return Layout("raw", np.dtype(dtype), row, 1, "sinograms", row)

    def memory(self, n_slices, stages=None, chunk_slices=None, layout=None,
               preferred=CHUNK_SLICES) -> MemoryPlan:
        return MemoryPlan.create(
            stages or self.stages, self.device, n_slices,
            chunk_slices=chunk_slices, own=("raw", "sinograms"),
            preferred=max(preferred or 0, CHUNK_ROWS),
            budget=self.budget,
            subject=f"projections: a detector row of {self.n_angles} x {self.n_bins}",
            advice="allow more memory (memory_limit)")

    def updates_per_slice(self) -> int:
        """Detector pixels of a row: what the progress line counts."""
        return self.n_angles * self.n_bins

    progress_labels = dict(what="rows corrected", rate="G pixels/s")
