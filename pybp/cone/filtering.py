"""Cone beam's first phase as a recipe of the stream (pybp/stream/recipe.py): chunks of
detector rows of the projections, on any device or several, through the stages both
geometries share (flat-field normalisation, phase retrieval, ring removal on each
row's sinogram) and FDK's own weights (pybp/cone/stages.py), then the row filter, into
filtered line integrals that come down as sinograms. pybp/cone/run.py puts them into
the store of filtered projections that the slabs are back-projected from.

The filter pairs the same angle of neighbouring rows in one transform
(``pair_stride``), as the passes' filter pairs neighbouring rows of a projection, and
chunks start on even rows: a row filters to the same bits either way.
"""

from __future__ import annotations

import numpy as np

from pybp.cl.device import describe, open_device
from pybp.cone.stages import Weight
from pybp.geometry.cone import ConeGeometry
from pybp.stages import filters, rings
from pybp.stages.phase import Paganin
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import CHUNK_SLICES, Budget, MemoryPlan
from pybp.stream.recipe import Recipe

ROW_ALIGN = 2  # chunks start on even detector rows: the filter's pairs of rows


class Filtering(Recipe):
    """FDK's filtering of ``geometry``'s projections on one device (``device``,
    ``context`` or ``queue``): ``filter``, ``padding``, ``short_scan`` as for
    :func:`pybp.fdk` (``filter=None``: no weights and no filter, the line integrals); ``rings`` and ``ring_options`` (ring removal on each detector
    row's sinogram, as :func:`pybp.reconstruct`), ``phase`` (Paganin's retrieval on the
    projections), ``memory_limit`` (the one budget: pybp/stream/memory.py)."""

    def __init__(self, geometry: ConeGeometry, filter="ramp", padding="zero", short_scan=None,
                 rings_method=None, ring_options=None, phase=None, memory_limit=None,
                 filter_method="auto", device=None, context=None, queue=None):
        self.geometry = geometry
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = describe(self.cl_device)
        self.n_angles, self.n_bins = geometry.n_angles, geometry.detector_shape[1]
        self.phase = Paganin.create(phase)
        self.budget = Budget.of(self.device, memory_limit)
        options = rings.options(rings_method, ring_options, self.n_angles, self.n_bins)
        stages = []
        if rings_method is not None:
            stages.append(rings.RingRemoval(self.context, self.device, self.n_angles,
                                            self.n_bins, rings_method, options))
        if filter is not None:  # None: the line integrals alone (the iterative methods')
            stages.append(Weight(self.context, self.device, geometry, short_scan))
            stages.append(filters.Filter(self.context, self.device, filter, self.n_bins,
                                         np.ones(self.n_angles), padding, filter_method,
                                         pair_stride=self.n_angles))
        self.stages = tuple(stages)
        self.executor = Executor(self.device, self.context, queue)

    def layout(self, dtype=None) -> Layout:
        if dtype is None:
            raise ValueError("projections: cone beam takes projections, not sinograms")
        row = (self.n_angles, self.n_bins)
        return Layout("raw", np.dtype(dtype), row, 1, "sinograms", row)

    def memory(self, n_slices, stages=None, chunk_slices=None, layout=None,
               preferred=CHUNK_SLICES) -> MemoryPlan:
        return MemoryPlan.create(
            stages or self.stages, self.device, n_slices, widths=(ROW_ALIGN,),
            chunk_slices=chunk_slices, own=("raw", "sinograms"), preferred=preferred,
            budget=self.budget,
            subject=f"projections: a detector row of {self.n_angles} x {self.n_bins}",
            advice="allow more memory (memory_limit)")

    def updates_per_slice(self) -> int:
        """Detector pixels of a row: what the progress line counts."""
        return self.n_angles * self.n_bins

    progress_labels = dict(what="rows filtered", rate="G pixels/s")
