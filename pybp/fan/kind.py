"""Fan beam (2-D) as the registry's kind (pybp/registry.py): a slice from a sinogram
``(n_angles, n_det)``, projected by cone beam's matched pair and reconstructed by FDK's
path (its weights are the fan's FBP in the orbit's plane) or an iterative method, on the
slice as cone beam's one plane of voxels under a detector of one row
(:meth:`pybp.geometry.fan.FanGeometry.cone`). Arrays go in and come out in the fan's
shapes; the cone geometry's are the same memory with an axis of one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp import checks
from pybp.cone import volumes
from pybp.cone.kind import CONE
from pybp.geometry.fan import FanGeometry


def _as_plane(values, name):
    """``values`` (a sinogram ``(n, n_det)``, frames ``(n_frames, n_det)`` or one frame
    ``(n_det,)``) with the axis of detector rows that cone beam's arrays have."""
    if values is None:
        return None
    checks.array_like(values, name, (1, 2))
    array = np.asarray(values)
    return array[None, None] if array.ndim == 1 else array[:, None]


@dataclass(frozen=True)
class FanKind:
    """:class:`pybp.registry.Kind` of a :class:`pybp.FanGeometry`."""

    geometry: type = FanGeometry
    name: str = "FanGeometry"
    what: str = "fan beam"
    filtered: str | None = "FBP"
    whole: bool = True  # one slice: the geometry's, never cut
    dims: int = 3  # TV's gradient as cone beam's team takes it: none across one plane
    advice: str = "make the slice or the scan smaller, or take a device with more memory"
    file_keys: tuple = ()
    astra_types: tuple = ()
    flag: str | None = None
    commands: tuple = ()

    def reader(self, key):
        raise KeyError(key)

    def shapes(self, geometry, slices=None) -> tuple:
        """The slice ``(ny, nx)`` and the sinogram ``(n_angles, n_det)``."""
        return tuple(geometry.slice_shape), (geometry.n_angles, geometry.n_det)

    def scratch_bytes(self, geometry, slices=None) -> int:
        return CONE.scratch_bytes(geometry.cone())

    def pair(self, geometry, slices, context, queue, device):
        """Cone beam's pair of the one plane: the same buffers as the fan's arrays."""
        return CONE.pair(geometry.cone(), None, context, queue, device)

    def describe(self, geometry, slices=None) -> str:
        ny, nx = geometry.slice_shape
        return (f"{ny} x {nx} from {geometry.n_angles} fan-beam projections of "
                f"{geometry.n_det} pixels")

    def takes_in_place(self, geometry) -> bool:
        return False

    def cut(self, geometry, slices) -> None:
        if slices is not None:
            raise ValueError("slices: a FanGeometry's slice is the geometry's (ny, nx); give "
                             "no slices")
        return None

    def method_data(self, geometry, projections, circle) -> tuple:
        """The sinogram ``(n_angles, n_det)`` as cone beam's projections of one row; the
        volume one plane (``single``)."""
        expected = (geometry.n_angles, geometry.n_det)
        if tuple(projections.shape) != expected:
            raise ValueError(f"projections: expected (n_angles, n_det) = {expected} (the "
                             f"geometry's), got {tuple(projections.shape)}")
        data, _ = CONE.method_data(geometry.cone(), np.asarray(projections)[:, None], circle)
        return data, True

    def method_devices(self, method, geometry, slices, device, devices, check):
        """Cone beam's team (one device a team of one) of the one plane."""
        return CONE.method_devices(method, geometry.cone(), slices, device, devices, check)

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """FBP (FDK's path on the one plane), or ``solve``'s method of the line
        integrals: cone beam's :func:`pybp.cone.volumes.reconstruct` on the same memory."""
        checks.array_like(projections, "projections", (2,))
        ny, nx = geometry.slice_shape
        plane = None
        if out is not None:
            checks.check_output(out, (ny, nx), inputs=dict(projections=projections))
            if not isinstance(out, np.ndarray):
                raise TypeError("out: a NumPy array of the slice (a fan-beam slice is "
                                "written whole)")
            plane = out.reshape(1, ny, nx)
        volume = volumes.reconstruct(self, _as_plane(projections, "projections"),
                                     geometry.cone(), _as_plane(flats, "flats"),
                                     _as_plane(darks, "darks"), center, rows, plane,
                                     solve=solve, **options)
        return out if out is not None else volume.reshape(ny, nx)  # ``plane`` is out's


KIND = FanKind()
