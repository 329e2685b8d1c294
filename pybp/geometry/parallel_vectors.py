"""Parallel beam with any ray direction and any detector (ASTRA's ``parallel3d_vec``):
laminography, tomosynthesis, a tilted or oblique detector. A projection is one row
``(ray, d, u, v)``: the rays' direction, the detector's centre, its column step and its
row step. Its matrix maps a world point to pixels, ``[c, r, 1] = M [x, y, z, 1]`` (``w``
is 1 throughout: the rays never meet), the volume as
:class:`pybp.geometry.volume.VolumeGeometry` puts it (ASTRA's 3-D conventions).

The matched pair (pybp/cone/project.py) projects it as it projects cone beam: each
voxel's shadow a box, each ray through it as long as its chord (the iterative methods:
SIRT, SART, CGLS, TV). There is no filtered back-projection of it: its rays need not
cross one axis at right angles. Lengths are in any one unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, in_length_range
from pybp.geometry import astra
from pybp.geometry.angles import in_radians
from pybp.geometry.volume import (VolumeGeometry, detector_rows, inverted, size_pair,
                                  volume_of)


def laminography_vectors(angles, tilt, pixel_size, detector_offset=(0.0, 0.0)) -> np.ndarray:
    """ASTRA ``parallel3d_vec`` rows ``(ray, d, u, v)`` of a laminography scan (radians;
    ``pixel_size`` ``(row, column)``): :meth:`ParallelVectorGeometry.laminography`'s, to
    give ASTRA the same scan."""
    angles = np.asarray(angles, np.float64)
    s, c, zero = np.sin(angles), np.cos(angles), np.zeros_like(angles)
    ct, st = np.cos(tilt), np.sin(tilt)
    ray = np.stack([s * ct, -c * ct, zero + st], 1)
    u = np.stack([c, s, zero], 1) * pixel_size[1]
    v = np.stack([-s * st, c * st, zero + ct], 1) * pixel_size[0]
    centre = detector_offset[0] * v + detector_offset[1] * u
    return np.concatenate([ray, centre, u, v], 1)


@dataclass(frozen=True, eq=False, repr=False)
class ParallelVectorGeometry(VolumeGeometry):
    """A parallel-beam scan whose rays and detector may point anywhere, and the volume to
    reconstruct from it. Make one with :meth:`from_astra` (ASTRA's ``parallel3d_vec`` rows
    or dicts, ``parallel3d`` too) or :meth:`laminography`.

    ``matrices`` ``(n_angles, 3, 4)``: world point to pixels (their third row ``(0, 0, 0,
    1)``); ``rays`` ``(n_angles, 3)``: each projection's ray direction, of unit length; the
    detector and the volume as :class:`pybp.geometry.volume.VolumeGeometry` says."""

    rays: np.ndarray

    @classmethod
    def from_astra(cls, vectors, detector_shape=None, volume_shape=None, voxel_size=None,
                   volume_offset=(0, 0, 0), angle_unit=None):
        """ASTRA ``parallel3d_vec``: one row ``(ray, d, u, v)`` of 12 numbers per
        projection (the rays' direction, the detector's centre, its column step and its
        row step). Or ASTRA's own dicts, ``from_astra(proj_geom, vol_geom)``: a
        ``parallel3d_vec`` or ``parallel3d`` projection geometry and a 3-D volume
        geometry (its window gives the voxel's sides and the volume's offset). ASTRA's
        projections are ``(rows, angles, columns)``; pybp's ``(angles, rows, columns)``:
        ``data.transpose(1, 0, 2)``. Volumes are the same arrays in both. A
        ``parallel3d`` dict's ``ProjectionAngles`` are radians, as ASTRA's; spanning more
        than one turn they are refused as degrees unless ``angle_unit`` says (``"deg"``,
        or ``"rad"`` for several turns)."""
        if isinstance(vectors, dict):
            return cls._from_astra_dicts(vectors, detector_shape, angle_unit)
        if angle_unit is not None:
            raise ValueError("angle_unit: parallel3d_vec rows hold no angles (a "
                             "'parallel3d' dict's ProjectionAngles take it)")
        if detector_shape is None or volume_shape is None or voxel_size is None:
            raise TypeError("from_astra: give parallel3d_vec rows with detector_shape, "
                            "volume_shape and voxel_size, or ASTRA's proj_geom and vol_geom "
                            "dicts")
        ray, first, u, v, detector = detector_rows(vectors, detector_shape, "parallel3d_vec")
        # X = first + c u + r v - t ray: (c, r, t) = B^-1 (X - first)
        inverse = inverted(np.stack([u, v, -ray], 2), "the rays run along the detector's "
                           "plane, or its steps u and v are parallel (or zero)")[:, :2]
        # a column's pixel that does not change along z to rounding does not change: the
        # pair then finds a voxel column's once (pybp/cone/project.py's shared_column)
        inverse[:, 0, 2] = np.where(np.abs(inverse[:, 0, 2]) > 1e-13 * np.abs(inverse[:, 0]).max(
            axis=1), inverse[:, 0, 2], 0.0)
        matrices = np.zeros((len(vectors), 3, 4))
        matrices[:, :2, :3] = inverse
        matrices[:, :2, 3] = -np.einsum("nab,nb->na", inverse, first)
        matrices[:, 2, 3] = 1.0
        rays = ray / np.linalg.norm(ray, axis=1, keepdims=True)
        return cls(matrices=matrices, rays=rays, detector_shape=detector,
                   **volume_of(volume_shape, voxel_size, volume_offset))

    @classmethod
    def _from_astra_dicts(cls, proj_geom, vol_geom, angle_unit):
        """:meth:`from_astra` of ASTRA's dicts."""
        kind = astra.kind(proj_geom)
        if kind not in ("parallel3d", "parallel3d_vec"):
            other = (" (cone beam: pybp.ConeGeometry.from_astra)" if kind in ("cone", "cone_vec")
                     else " (2-D: pybp.ParallelGeometry.from_astra)" if kind else "")
            raise ValueError(f"proj_geom: type {kind!r}; a ParallelVectorGeometry takes ASTRA's "
                             f"'parallel3d' and 'parallel3d_vec'{other}")
        shape, sides, centre = astra.volume_window(vol_geom, 3)
        size = astra.voxel_size(sides)
        if angle_unit is not None and kind == "parallel3d_vec":
            raise ValueError("angle_unit: a 'parallel3d_vec' geometry holds no angles")
        rows, n_rows, n_cols = astra.parallel_vectors(proj_geom, angle_unit)
        return cls.from_astra(rows, (n_rows, n_cols), shape, size, centre)

    @classmethod
    def laminography(cls, angles, tilt, detector_shape, pixel_size, volume_shape, voxel_size,
                     detector_offset=(0, 0), volume_offset=(0, 0, 0), angle_unit=None):
        """A laminography scan: the sample turns about its z axis, and the rays meet that
        axis at ``tilt`` radians from a right angle (``angle_unit`` for both, as
        everywhere in pybp; a tilt of 0 is ASTRA's ``parallel3d``). At angle ``t`` the
        rays run along ``(sin t cos tilt, -cos t cos tilt, sin tilt)`` (up through the
        volume for a positive tilt); the detector faces them, its columns step along
        ``(cos t, sin t, 0) * pixel_size[1]`` and its rows along ``(-sin t sin tilt, cos t
        sin tilt, cos tilt) * pixel_size[0]``, its centre ``detector_offset`` ``(row,
        column)`` pixels from the ray through the origin. ``pixel_size`` is a number or
        ``(row, column)``."""
        angles = in_radians(angles, angle_unit)
        if np.ndim(tilt) != 0:
            raise TypeError(f"tilt: expected one angle, got {tilt!r}")
        tilt = float(in_radians([tilt], angle_unit or "rad", "tilt")[0])
        if not abs(tilt) < np.pi / 2:
            raise ValueError(f"tilt: expected an angle under a right angle, got {tilt:g} rad")
        rows, columns = size_pair(pixel_size, "pixel_size")
        offset = in_length_range(float_array(detector_offset, "detector_offset", 1),
                                 "detector_offset")
        if offset.shape != (2,):
            raise ValueError(f"detector_offset: expected (row, column) in pixels, got "
                             f"{detector_offset!r}")
        return cls.from_astra(laminography_vectors(angles, tilt, (rows, columns), offset),
                              detector_shape, volume_shape, voxel_size, volume_offset)

    def __repr__(self):
        """One line: what the scan and the volume are, not every row."""
        lift = np.degrees(np.arcsin(np.clip(np.abs(self.rays[:, 2]), 0, 1)))
        tilt = (f"rays {lift.min():.4g} degrees from the horizontal" if np.ptp(lift) <= 1e-9
                else f"rays {lift.min():.4g} to {lift.max():.4g} degrees from the horizontal")
        return (f"ParallelVectorGeometry({self.n_angles} projections of "
                f"{self.detector_shape[0]} x {self.detector_shape[1]} pixels, {tilt}; "
                f"{self.volume_text()})")

    def voxel_rays(self) -> np.ndarray:
        """``(n_angles, 4)``: each projection's ray direction in voxel indices, negated,
        then 0 (rays along a direction: pybp/geometry/volume.py)."""
        return np.concatenate([-self.rays / self.voxel_sizes, np.zeros((self.n_angles, 1))], 1)
