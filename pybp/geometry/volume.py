"""What the geometries of a whole volume share (:class:`pybp.ConeGeometry`,
:class:`pybp.ParallelVectorGeometry`): a 3x4 matrix per projection from world points to
pixels, ``[c w, r w, w] = M [x, y, z, 1]`` (``w`` 1 throughout for parallel rays), the
detector's and the volume's sizes, and the volume's grid (ASTRA's 3-D conventions:
voxel ``(k, j, i)`` at ``x = (i - (nx-1)/2) sx``, ``y = (j - (ny-1)/2) sy``, ``z = (k -
(nz-1)/2) sz`` plus ``volume_offset`` ``(x, y, z)``). The matched pair
(pybp/cone/project.py) takes either, with each projection's rays
(:meth:`VolumeGeometry.voxel_rays`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, in_length_range, positive_int, positive_length

CORNERS = np.array([(a, b, c) for a in (-0.5, 0.5) for b in (-0.5, 0.5) for c in (-0.5, 0.5)])
LARGEST_SIZE = 2 ** 31 - 1  # the kernels take sizes as 32-bit ints (indices are 64-bit)


def voxel_size_of(value):
    """A cube's side, or the sides ``(x, y, z)`` of a box; three equal sides are a cube's."""
    if np.ndim(value) == 0:
        return positive_length(value, "voxel_size")
    sides = float_array(value, "voxel_size", 1)
    if sides.shape != (3,):
        raise ValueError(f"voxel_size: expected a number or three sides (x, y, z), got {value!r}")
    sides = tuple(positive_length(side, "voxel_size") for side in sides)
    return sides[0] if sides[0] == sides[1] == sides[2] else sides


def size_pair(value, name):
    """A positive size, or two: ``(first, second)`` (a pixel's ``(row, column)``)."""
    values = float_array(np.atleast_1d(value), name, 1)
    if len(values) == 1:
        values = np.repeat(values, 2)
    if len(values) != 2:
        raise ValueError(f"{name}: expected one or two numbers, got {value!r}")
    if not (values > 0).all():
        raise ValueError(f"{name}: expected positive sizes, got {value!r}")
    in_length_range(values, name)
    return float(values[0]), float(values[1])


def shape_of(value, name, n):
    """``n`` positive sizes the kernels can count, or an error naming ``name``."""
    try:
        values = tuple(value)
    except TypeError:
        raise TypeError(f"{name}: expected {n} integers, got {value!r}") from None
    if len(values) != n:
        raise ValueError(f"{name}: expected {n} integers, got {value!r}")
    sizes = tuple(positive_int(v, name) for v in values)
    if max(sizes) > LARGEST_SIZE:
        raise ValueError(f"{name}: {list(sizes)} has a size beyond {LARGEST_SIZE} (2^31 - 1), "
                         "the most the kernels count")
    return sizes


def detector_rows(vectors, detector_shape, kind):
    """ASTRA vector rows of ``kind`` (``cone_vec``: source, detector centre, column step,
    row step; ``parallel3d_vec``: the ray's direction first), checked: ``(first vectors,
    the first pixel's centre, u, v, (n_rows, n_cols))``, each ``(n_angles, 3)``."""
    vectors = in_length_range(float_array(vectors, "vectors", 2), "vectors")
    if vectors.shape[1] != 12:
        first = "ray" if kind == "parallel3d_vec" else "src"
        raise ValueError(f"vectors: expected (n_angles, 12) rows of ASTRA {kind} ({first}, d, "
                         f"u, v), got shape {vectors.shape}")
    n_rows, n_cols = shape_of(detector_shape, "detector_shape", 2)
    head, centre, u, v = (vectors[:, 3 * a:3 * a + 3] for a in range(4))
    first = centre - (n_cols - 1) / 2 * u - (n_rows - 1) / 2 * v  # the first pixel's centre
    return head, first, u, v, (n_rows, n_cols)


def inverted(basis, what) -> np.ndarray:
    """Each 3x3 ``basis`` ``(n, 3, 3)`` inverted, or an error saying ``what`` of the first
    projection where it is singular (to 1e-12 of its scale)."""
    det = np.linalg.det(basis)
    scale = np.abs(basis).max(axis=(1, 2)) ** 3
    flat = np.flatnonzero(~(np.abs(det) > 1e-12 * scale))
    if flat.size:
        raise ValueError(f"vectors: projection {flat[0]}: {what}")
    return np.linalg.inv(basis)


def volume_of(volume_shape, voxel_size, volume_offset) -> dict:
    """The volume's fields, checked: ``volume_shape``, ``voxel_size``, ``volume_offset``."""
    offset = in_length_range(float_array(volume_offset, "volume_offset", 1), "volume_offset")
    if offset.shape != (3,):
        raise ValueError(f"volume_offset: expected (x, y, z), got {volume_offset!r}")
    return dict(volume_shape=shape_of(volume_shape, "volume_shape", 3),
                voxel_size=voxel_size_of(voxel_size), volume_offset=tuple(offset))


@dataclass(frozen=True, eq=False, repr=False)
class VolumeGeometry:
    """A scan's projection matrices and the volume to reconstruct from it.

    ``matrices`` ``(n_angles, 3, 4)``: world point to pixels; ``detector_shape``
    ``(n_rows, n_cols)``; ``volume_shape`` ``(nz, ny, nx)``; ``voxel_size``, a cube's side
    or a box's sides ``(x, y, z)`` (:attr:`voxel_sizes` either way); ``volume_offset``
    ``(x, y, z)``, the volume centre's position."""

    matrices: np.ndarray
    detector_shape: tuple
    volume_shape: tuple
    voxel_size: object
    volume_offset: tuple

    @property
    def n_angles(self) -> int:
        return len(self.matrices)

    @property
    def voxel_sizes(self) -> np.ndarray:
        """The voxel's sides ``(x, y, z)``, for cubes too."""
        return np.broadcast_to(np.asarray(self.voxel_size, np.float64), (3,)).copy()

    def voxel_text(self) -> str:
        """The voxel's size as people write it: ``0.5``, or ``0.5 x 0.5 x 1 (x, y, z)``."""
        if np.ndim(self.voxel_size) == 0:
            return f"{self.voxel_size:g}"
        return " x ".join(f"{side:g}" for side in self.voxel_size) + " (x, y, z)"

    def volume_text(self) -> str:
        nz, ny, nx = self.volume_shape
        return (f"volume {nz} x {ny} x {nx} voxels of {self.voxel_text()} at "
                f"{tuple(float(v) for v in self.volume_offset)}")

    def index_to_world(self) -> np.ndarray:
        """The 4x4 map of voxel indices ``(i, j, k, 1)`` to ``(x, y, z, 1)``."""
        nz, ny, nx = self.volume_shape
        s = self.voxel_sizes
        t = np.diag([*s, 1.0])
        t[:3, 3] = -np.array([nx - 1, ny - 1, nz - 1]) / 2 * s + self.volume_offset
        return t

    def voxel_matrices(self) -> np.ndarray:
        """``(n_angles, 3, 4)``: voxel indices ``(i, j, k, 1)`` to ``(c w, r w, w)``."""
        return self.matrices @ self.index_to_world()

    def voxel_rays(self) -> np.ndarray:
        """``(n_angles, 4)``: each projection's rays in voxel indices, ``(p, 1)`` for rays
        from a source at ``p``, ``(-d, 0)`` for rays along ``d`` (parallel): the ray to
        voxel ``X`` runs along ``X * last - p`` either way."""
        raise NotImplementedError

    def column_shared(self) -> bool:
        """Whether a column of voxels along z shares its detector column and depth in
        every projection (a circular orbit about z with an untilted detector): the
        matrices' z terms of the column and of ``w`` vanish (to rounding)."""
        m = self.voxel_matrices()
        nz = self.volume_shape[0]
        return bool(np.all(np.abs(m[:, 0, 2]) * nz < 1e-9 * np.abs(m[:, 0, :]).max(axis=1))
                    and np.all(np.abs(m[:, 2, 2]) * nz < 1e-12 * np.abs(m[:, 2, :]).max(axis=1)))

    def updates(self) -> int:
        """Voxel updates of one projection of the volume: the numerator of GUPS."""
        nz, ny, nx = self.volume_shape
        return nx * ny * nz * self.n_angles
