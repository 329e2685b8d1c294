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
from pybp.cone.kind import CIRCULAR_KEYS, CONE
from pybp.geometry.fan import FanGeometry
from pybp.io import geometry_file


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
    file_keys: tuple = ("fan", "fan_vectors")
    astra_types: tuple = ("fanflat", "fanflat_vec")
    flag: str | None = None
    # cone beam's runner, on the slice as one plane (:meth:`command_geometry`)
    commands: tuple = (("reconstruct", "pybp.cli.cone:reconstruct"),)

    def reader(self, key):
        return {"fan": _fan, "fan_vectors": _fan_vectors}[key]

    def command_geometry(self, geometry):
        """The scan as cone beam's runner takes it: one plane under one row."""
        return geometry.cone()

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


def _slice(detector_shape, volume) -> dict:
    """A geometry file's volume keys as a fan-beam slice's, for a scan of one row."""
    if detector_shape[0] != 1:
        raise ValueError(f"a fan-beam scan has one detector row; this scan's projections "
                         f"have {detector_shape[0]}")
    shape = volume["volume_shape"]
    offset = volume.get("volume_offset", (0.0, 0.0))
    for name, value in (("volume_shape", shape), ("volume_offset", offset)):
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ValueError(f"{name}: a fan-beam slice's is [{'ny, nx' if name == 'volume_shape' else 'x, y'}], "
                             f"got {value!r}")
    return dict(slice_shape=tuple(shape), voxel_size=volume["voxel_size"],
                slice_offset=tuple(offset))


def _fan(value, folder, angles, detector_shape, volume):
    """``{"fan": {source_origin, origin_detector, pixel_size, detector_offset}}``: ASTRA's
    ``fanflat``, the angles the scan file's, ``detector_offset`` in pixels."""
    value = geometry_file.keyed(value, "fan", CIRCULAR_KEYS, 3)
    return FanGeometry.circular(angles, detector_shape[1], **value,
                                **_slice(detector_shape, volume), angle_unit="rad")


def _fan_vectors(value, folder, angles, detector_shape, volume):
    """ASTRA ``fanflat_vec`` rows ``(src, d, u)`` in a file."""
    rows = geometry_file.rows_of(value, "fan_vectors", folder, angles)
    return FanGeometry.from_astra(rows, detector_shape[1], **_slice(detector_shape, volume))


KIND = FanKind()
