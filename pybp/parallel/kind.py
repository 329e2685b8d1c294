"""Parallel beam as the registry's kind (pybp/registry.py): a slice per detector row,
each slice its own problem, and parallel beam's matched pair of pybp/parallel/project.py."""

from __future__ import annotations

from dataclasses import dataclass

from pybp.geometry.parallel import Geometry
from pybp.parallel import project


@dataclass(frozen=True)
class ParallelKind:
    """:class:`pybp.registry.Kind` of a :class:`pybp.ParallelGeometry`."""

    geometry: type = Geometry
    name: str = "ParallelGeometry"
    what: str = "parallel beam"
    whole: bool = False
    dims: int = 2
    filtered: str | None = "FBP"
    advice: str = "take fewer rows per call, or a device with more memory"

    def shapes(self, geometry, slices=None) -> tuple:
        """``slices`` slices and ``(n_angles, slices, n_bins)``."""
        ny, nx = geometry.slice_shape
        return (slices, ny, nx), (geometry.n_angles, slices, geometry.n_bins)

    def scratch_bytes(self, geometry, slices=None) -> int:
        """The pair's stacked volumes and projections."""
        return project.scratch_bytes(geometry, slices)

    def pair(self, geometry, slices, context, queue, device):
        return project.ParallelPair(geometry, slices, context, queue, device)


KIND = ParallelKind()
