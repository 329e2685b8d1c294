"""The whole-volume geometries as the registry's kinds (pybp/registry.py): cone beam,
and parallel rays along any direction (laminography), both one volume that cone beam's
matched pair of pybp/cone/project.py projects (w = 1 for parallel rays), reconstructed by
FDK or an iterative method (pybp/cone/volumes.py) on one device or a team of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp import checks, distributed
from pybp.cone import project, volumes
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry
from pybp.iterative import team


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

    def describe(self, geometry, slices=None) -> str:
        rows, cols = geometry.detector_shape
        return (f"{geometry.volume_shape[0]}^3 from {geometry.n_angles} projections of "
                f"{rows} x {cols}")

    def takes_in_place(self, geometry) -> bool:
        return False

    def cut(self, geometry, slices) -> None:
        """The geometry's volume, never slices of it."""
        if slices is not None:
            raise ValueError(f"slices: a {self.name}'s volume is the geometry's "
                             "(nz, ny, nx); give no slices")
        return None

    def method_data(self, geometry, projections, circle) -> tuple:
        """``(n_angles, n_rows, n_cols)``; no reconstruction circle."""
        expected = (geometry.n_angles,) + tuple(geometry.detector_shape)
        if tuple(projections.shape) != expected:
            raise ValueError(f"projections: expected (n_angles, n_rows, n_cols) = "
                             f"{expected} (the geometry's), got {tuple(projections.shape)}")
        if checks.circle_option(circle) is not False:
            raise ValueError("circle: the reconstruction circle is parallel beam's; give "
                             "a mask instead")
        data = np.empty(projections.shape, np.float32)
        checks.cast_into(data, projections)
        return data, False

    def method_devices(self, method, geometry, slices, device, devices, check):
        """A team of ``device`` or ``devices``, one device a team of one
        (pybp/iterative/team.py: the same bits on one device and on several)."""
        chosen = [device] if devices is None else distributed.device_list(devices)
        return team.open_team(
            chosen, lambda context, queue, description: self.pair(
                geometry, None, context, queue, description),
            check=lambda description: check(description, None))

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """FDK, or ``solve``'s method of the line integrals (pybp/cone/volumes.py)."""
        return volumes.reconstruct(self, projections, geometry, flats, darks, center, rows,
                                   out, solve=solve, **options)


CONE = WholeKind(ConeGeometry, "ConeGeometry", "cone beam", "FDK")
PARALLEL_VECTORS = WholeKind(ParallelVectorGeometry, "ParallelVectorGeometry",
                             "parallel rays along any direction", None)
