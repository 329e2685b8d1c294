"""The whole-volume geometries as the registry's kinds (pybp/registry.py): cone beam,
and parallel rays along any direction (laminography), both one volume that cone beam's
matched pair of pybp/cone/project.py projects (w = 1 for parallel rays), reconstructed by
FDK or an iterative method (pybp/cone/volumes.py) on one device or a team of them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pybp import checks
from pybp.cl.device import device_list
from pybp.cone import project, volumes
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry
from pybp.io import geometry_file
from pybp.iterative import team

CIRCULAR_KEYS = ("source_origin", "origin_detector", "pixel_size", "detector_offset")


@dataclass(frozen=True)
class WholeKind:
    """:class:`pybp.registry.Kind` of a geometry of one whole volume."""

    geometry: type
    name: str
    what: str
    filtered: str | None
    readers: tuple = field(default=(), compare=False)  # (geometry file key, its reader)
    astra_types: tuple = ()
    flag: str | None = None
    commands: tuple = (("reconstruct", "pybp.cli.cone:reconstruct"),)
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
        """The volume and the scan in words, with a voxel's side in pixels at the
        volume's centre (along the detector's columns, the median over the projections:
        what the box model's cost and accuracy follow; 2.67 in ASTRA's cone case)."""
        rows, cols = geometry.detector_shape
        nz, ny, nx = geometry.volume_shape
        m = geometry.voxel_matrices()
        centre = np.array([(nx - 1) / 2, (ny - 1) / 2, (nz - 1) / 2, 1.0])

        def image(point):
            h = m @ point
            return h[:, :2] / h[:, 2:]
        along_x, along_y = (image(centre + step)[:, 0] - image(centre)[:, 0]
                            for step in ((1, 0, 0, 0), (0, 1, 0, 0)))
        pitch = float(np.median(np.hypot(along_x, along_y)))
        return (f"{self.name}, {nz} x {ny} x {nx} from {geometry.n_angles} projections of "
                f"{rows} x {cols} (a voxel's side {pitch:.3g} pixels at the centre)")

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
        chosen = [device] if devices is None else device_list(devices)
        return team.open_team(
            chosen, lambda context, queue, description: self.pair(
                geometry, None, context, queue, description),
            check=lambda description: check(description, None))

    @property
    def file_keys(self) -> tuple:
        return tuple(key for key, _ in self.readers)

    def reader(self, key):
        return dict(self.readers)[key]

    def command_geometry(self, geometry):
        return geometry

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """FDK, or ``solve``'s method of the line integrals (pybp/cone/volumes.py)."""
        return volumes.reconstruct(self, projections, geometry, flats, darks, center, rows,
                                   out, solve=solve, **options)


def _circular(value, folder, angles, detector_shape, volume):
    """``{"circular": {source_origin, origin_detector, pixel_size, detector_offset}}``:
    ASTRA's ``cone``, the angles the scan file's."""
    value = geometry_file.keyed(value, "circular", CIRCULAR_KEYS, 3)
    return ConeGeometry.circular(angles, detector_shape, **value, **volume, angle_unit="rad")


def _vectors(value, folder, angles, detector_shape, volume):
    """ASTRA ``cone_vec`` rows ``(src, d, u, v)`` in a file."""
    rows = geometry_file.rows_of(value, "vectors", folder, angles)
    return ConeGeometry.from_astra(rows, detector_shape, **volume)


def _matrices(value, folder, angles, detector_shape, volume):
    """Projection matrices ``(n, 3, 4)``, or rows of their 12 numbers in a text file."""
    rows = geometry_file.rows_of(value, "matrices", folder, angles)
    if rows.ndim == 2 and rows.shape[1] == 12:
        rows = rows.reshape(-1, 3, 4)
    return ConeGeometry.from_matrices(rows, detector_shape, **volume)


def _parallel_vectors(value, folder, angles, detector_shape, volume):
    """ASTRA ``parallel3d_vec`` rows ``(ray, d, u, v)`` in a file."""
    rows = geometry_file.rows_of(value, "parallel_vectors", folder, angles)
    return ParallelVectorGeometry.from_astra(rows, detector_shape, **volume)


def write_circular(path, source_origin, origin_detector, pixel_size, volume_shape, voxel_size,
                   detector_offset=(0, 0), volume_offset=(0, 0, 0)):
    """A geometry file of a circular cone-beam scan (not replacing a file: the caller
    checks)."""
    geometry_file.write(path, {
        "circular": {"source_origin": source_origin, "origin_detector": origin_detector,
                     "pixel_size": pixel_size, "detector_offset": list(detector_offset)},
        "volume_shape": list(volume_shape), "voxel_size": voxel_size,
        "volume_offset": list(volume_offset)})


CONE = WholeKind(ConeGeometry, "ConeGeometry", "cone beam", "FDK",
                 readers=(("circular", _circular), ("vectors", _vectors),
                          ("matrices", _matrices)),
                 astra_types=("cone", "cone_vec"), flag="cone",
                 commands=(("reconstruct", "pybp.cli.cone:reconstruct"),
                           ("demo", "pybp.cli.cone:demo"), ("render", "pybp.cli.cone:render"),
                           ("bench", "pybp.cli.cone_tools:bench"),
                           ("tune", "pybp.cli.cone_tools:tune")))
PARALLEL_VECTORS = WholeKind(ParallelVectorGeometry, "ParallelVectorGeometry",
                             "parallel rays along any direction", None,
                             readers=(("parallel_vectors", _parallel_vectors),),
                             astra_types=("parallel3d", "parallel3d_vec"), flag="laminography",
                             commands=(("reconstruct", "pybp.cli.cone:reconstruct"),
                                       ("bench", "pybp.cli.cone_tools:bench_laminography")))
