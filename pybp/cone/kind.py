"""The whole-volume geometries as the registry's kinds (pybp/registry.py): cone beam,
and parallel rays along any direction (laminography), both one volume that cone beam's
matched pair of pybp/cone/project.py projects (w = 1 for parallel rays)."""

from __future__ import annotations

from dataclasses import dataclass

from pybp.cone import project
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry


@dataclass(frozen=True)
class WholeKind:
    """:class:`pybp.registry.Kind` of a geometry of one whole volume."""

    geometry: type
    name: str
    what: str
    filtered: str | None
    whole: bool = True
    dims: int = 3
    advice: str = "make the volume or the scan smaller, or take a device with more memory"

    def shapes(self, geometry, slices=None) -> tuple:
        """The geometry's volume and ``(n_angles, n_rows, n_cols)``."""
        return (tuple(geometry.volume_shape),
                (geometry.n_angles,) + tuple(geometry.detector_shape))

    def scratch_bytes(self, geometry, slices=None) -> int:
        """The pair's transposed volume, where A gathers."""
        return project.scratch_bytes(geometry)

    def pair(self, geometry, slices, context, queue, device):
        return project.ConePair(geometry, context, queue, device)


CONE = WholeKind(ConeGeometry, "ConeGeometry", "cone beam", "FDK")
PARALLEL_VECTORS = WholeKind(ParallelVectorGeometry, "ParallelVectorGeometry",
                             "parallel rays along any direction", None)
