"""Cone-beam geometry: one 3x4 projection matrix per projection, in double, and the
source it implies (docs/design.md, section 8).

Conventions (ASTRA's ``cone`` and ``cone_vec``, so that the same numbers give the same
volume in both):

- projections ``(n_angles, n_rows, n_cols)``; volume ``(nz, ny, nx)``, voxel ``(k, j, i)``
  at ``x = (i - (nx-1)/2) sx``, ``y = (j - (ny-1)/2) sy``, ``z = (k - (nz-1)/2) sz``
  plus ``volume_offset`` ``(x, y, z)``, ``voxel_size`` ``s`` (cubes) or ``(sx, sy, sz)``
  (ASTRA's volume windows of other sides, TIGRE's ``dVoxel``);
- detector pixel ``(r, c)`` at ``d + (c - (n_cols-1)/2) u + (r - (n_rows-1)/2) v`` (``d``
  the detector centre, ``u`` the column step, ``v`` the row step);
- a matrix maps a point to pixels: ``[c w, r w, w] = M [x, y, z, 1]``, ``(c, r)`` (column,
  row) counted from the first pixel's centre, as in RabbitCT. pybp scales each matrix so
  that ``w`` is the point's depth along the detector normal over the world origin's
  (the isocentre's): 1 at the origin, 0 on the source's plane. FDK's distance weight is
  ``1 / w^2``.

Lengths are in any one unit (mm, say).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, in_length_range, positive_length
from pybp.geometry import astra
from pybp.geometry.angles import in_radians
from pybp.geometry.volume import (CORNERS, VolumeGeometry, detector_rows, inverted, shape_of,
                                  size_pair, volume_of)

@dataclass(frozen=True, eq=False, repr=False)
class ConeGeometry(VolumeGeometry):
    """A cone-beam scan and the volume to reconstruct from it. Make one with
    :meth:`circular`, :meth:`from_astra` or :meth:`from_matrices`.

    ``matrices`` ``(n_angles, 3, 4)``: world point to pixels, scaled as the module says;
    ``sources`` ``(n_angles, 3)``; the detector and the volume as
    :class:`pybp.geometry.volume.VolumeGeometry` says."""

    sources: np.ndarray

    # ---- constructors ------------------------------------------------------------------
    @classmethod
    def circular(cls, angles, detector_shape, pixel_size, source_origin, origin_detector,
                 volume_shape, voxel_size, detector_offset=(0, 0), volume_offset=(0, 0, 0),
                 angle_unit=None):
        """ASTRA's ``cone`` geometry: for angle ``t`` (radians; ``angle_unit="deg"``:
        degrees; radians spanning more than one turn are refused unless
        ``angle_unit="rad"`` says so, as everywhere in pybp) the source at
        ``(sin t, -cos t, 0) * source_origin``, the detector centre at
        ``(-sin t, cos t, 0) * origin_detector``, moved by ``detector_offset`` ``(row,
        column)`` pixels along its row and column steps ``v = (0, 0, 1) * pixel_size[0]``
        and ``u = (cos t, sin t, 0) * pixel_size[1]``; ``pixel_size`` a number or
        ``(row, column)``; ``voxel_size`` a number or ``(x, y, z)``."""
        angles = in_radians(angles, angle_unit)
        rows, columns = size_pair(pixel_size, "pixel_size")
        source_origin = positive_length(source_origin, "source_origin")
        origin_detector = positive_length(origin_detector, "origin_detector")
        offset = in_length_range(float_array(detector_offset, "detector_offset", 1),
                                 "detector_offset")
        if offset.shape != (2,):
            raise ValueError(f"detector_offset: expected (row, column) in pixels, got "
                             f"{detector_offset!r}")
        s, c, zero = np.sin(angles), np.cos(angles), np.zeros_like(angles)
        source = np.stack([s, -c, zero], 1) * source_origin
        u = np.stack([c, s, zero], 1) * columns
        v = np.stack([zero, zero, np.ones_like(angles)], 1) * rows
        centre = np.stack([-s, c, zero], 1) * origin_detector + offset[0] * v + offset[1] * u
        return cls.from_astra(np.concatenate([source, centre, u, v], 1), detector_shape,
                              volume_shape, voxel_size, volume_offset)

    @classmethod
    def from_astra(cls, vectors, detector_shape=None, volume_shape=None, voxel_size=None,
                   volume_offset=(0, 0, 0), angle_unit=None):
        """ASTRA ``cone_vec``: one row ``(src, d, u, v)`` of 12 numbers per projection
        (source, detector centre, column step, row step): any trajectory. Or ASTRA's
        own geometry dicts, ``from_astra(proj_geom, vol_geom)``: a ``cone`` or
        ``cone_vec`` projection geometry (``astra.create_proj_geom``) and a 3-D volume
        geometry (``astra.create_vol_geom``; a window of other sides along x, y and z makes
        voxels of those sides), in one line. ASTRA's
        projections are ``(rows, angles, columns)``; pybp's ``(angles, rows, columns)``:
        ``data.transpose(1, 0, 2)``. Its volumes are pybp's ``(nz, ny, nx)``. A ``cone``
        dict's ``ProjectionAngles`` are radians, as ASTRA's; spanning more than one turn
        they are refused as degrees unless ``angle_unit`` says (``"deg"``, or ``"rad"``
        for several turns), as everywhere in pybp."""
        if isinstance(vectors, dict):
            return cls._from_astra_dicts(vectors, detector_shape, angle_unit)
        if angle_unit is not None:
            raise ValueError("angle_unit: cone_vec rows hold no angles (a 'cone' dict's "
                             "ProjectionAngles take it)")
        if detector_shape is None or volume_shape is None or voxel_size is None:
            raise TypeError("from_astra: give cone_vec rows with detector_shape, volume_shape "
                            "and voxel_size, or ASTRA's proj_geom and vol_geom dicts")
        source, first, u, v, detector = detector_rows(vectors, detector_shape, "cone_vec")
        # X - src = a u + b v + w (first - src): the ray through X meets the detector at
        # first + (a / w) u + (b / w) v, so (c w, r w, w) = B^-1 (X - src).
        inverse = inverted(np.stack([u, v, first - source], 2), "the source lies in the "
                           "detector's plane, or the detector's steps u and v are parallel")
        matrices = np.concatenate([inverse, -inverse @ source[:, :, None]], 2)
        return cls._made(matrices, source, detector, volume_shape, voxel_size, volume_offset,
                         "vectors")

    @classmethod
    def _from_astra_dicts(cls, proj_geom, vol_geom, angle_unit):
        """:meth:`from_astra` of ASTRA's dicts."""
        shape, sizes, centre = astra.volume_window(vol_geom, 3)
        size = astra.voxel_size(sizes)
        kind = astra.kind(proj_geom)
        if kind not in ("cone", "cone_vec"):
            other = (" (parallel beam: pybp.ParallelGeometry.from_astra)"
                     if kind and kind.startswith("parallel") else "")
            raise ValueError(f"proj_geom: type {kind!r}; a ConeGeometry takes ASTRA's 'cone' "
                             f"and 'cone_vec'{other}")
        detector = (astra.count(proj_geom, "DetectorRowCount"),
                    astra.count(proj_geom, "DetectorColCount"))
        if kind == "cone":
            return cls.circular(
                astra.angles(proj_geom, angle_unit), detector,
                (astra.field(proj_geom, "DetectorSpacingY"),
                 astra.field(proj_geom, "DetectorSpacingX")),
                astra.field(proj_geom, "DistanceOriginSource"),
                astra.field(proj_geom, "DistanceOriginDetector"),
                shape, size, volume_offset=centre, angle_unit="rad")
        if angle_unit is not None:
            raise ValueError("angle_unit: a 'cone_vec' geometry holds no angles")
        return cls.from_astra(astra.field(proj_geom, "Vectors"), detector, shape, size, centre)

    @classmethod
    def from_matrices(cls, matrices, detector_shape, volume_shape, voxel_size,
                      volume_offset=(0, 0, 0)):
        """Projection matrices ``(n_angles, 3, 4)``: ``[u w, v w, w] = M [x, y, z, 1]``,
        ``(u, v)`` = (column, row) in pixels from the first pixel's centre, as in
        RabbitCT; any scale and sign. The source is each matrix's null vector."""
        matrices = in_length_range(float_array(matrices, "matrices", 3), "matrices")
        if matrices.shape[1:] != (3, 4):
            raise ValueError(f"matrices: expected (n_angles, 3, 4), got shape {matrices.shape}")
        _, singular, vt = np.linalg.svd(matrices)
        low = np.flatnonzero(~(singular[:, 2] > 1e-12 * singular[:, 0]))
        if low.size:
            raise ValueError(f"matrices: projection {low[0]}: not of rank 3 (no projection)")
        null = vt[:, 3]
        far = np.flatnonzero(~(np.abs(null[:, 3]) > 1e-12 * np.abs(null[:, :3]).max(axis=1)))
        if far.size:
            raise ValueError(f"matrices: projection {far[0]}: no finite source (an affine, "
                             "parallel-beam matrix)")
        source = null[:, :3] / null[:, 3:]
        return cls._made(matrices, source, shape_of(detector_shape, "detector_shape", 2),
                         volume_shape, voxel_size, volume_offset, "matrices")

    @classmethod
    def _made(cls, matrices, sources, detector_shape, volume_shape, voxel_size, volume_offset,
              name):
        """The geometry, each matrix scaled so that ``w`` is 1 at the world origin, and
        the volume checked to lie before every source."""
        depth = matrices[:, 2, 3]  # w at the origin
        behind = np.flatnonzero(~(np.abs(depth) > 1e-12 * np.abs(matrices[:, 2, :3]).max(axis=1)))
        if behind.size:
            raise ValueError(f"{name}: projection {behind[0]}: the world origin (the isocentre) "
                             "lies in the source's plane")
        matrices = matrices / depth[:, None, None]
        geometry = cls(matrices=matrices, sources=sources, detector_shape=detector_shape,
                       **volume_of(volume_shape, voxel_size, volume_offset))
        geometry._check_volume(name)
        return geometry

    def _check_volume(self, name):
        nz, ny, nx = self.volume_shape
        corners = CORNERS * np.array([nx, ny, nz]) * self.voxel_sizes + self.volume_offset
        w = np.einsum("pc,nc->pn", self.matrices[:, 2, :3], corners) + self.matrices[:, 2, 3:]
        bad = np.flatnonzero(~(w > 0).all(axis=1))
        if bad.size:
            raise ValueError(
                f"volume_offset: the volume reaches the source's side of the source plane of "
                f"projection {bad[0]} ({name}); move it (volume_offset) or make it smaller "
                f"(volume_shape, voxel_size)")

    def __repr__(self):
        """One line: what the scan and the volume are, not every matrix."""
        distances = np.linalg.norm(self.sources, axis=1)
        orbit = (f"sources {distances.min():.6g} from the origin" if np.ptp(distances) <=
                 1e-9 * distances.max() else
                 f"sources {distances.min():.6g} to {distances.max():.6g} from the origin")
        return (f"ConeGeometry({self.n_angles} projections of {self.detector_shape[0]} x "
                f"{self.detector_shape[1]} pixels, {orbit}, spanning "
                f"{np.degrees(np.ptp(np.unwrap(self.angles))):.4g} degrees; "
                f"{self.volume_text()})")

    # ---- what the kernels and weights need ----------------------------------------------
    @property
    def angles(self) -> np.ndarray:
        """Each source's angle about the z axis, ASTRA's ``t`` of a circular scan
        (source at ``(sin t, -cos t) * distance``)."""
        return np.arctan2(self.sources[:, 0], -self.sources[:, 1])

    def voxel_sources(self) -> np.ndarray:
        """``(n_angles, 3)``: each source in voxel indices ``(i, j, k)``."""
        world = np.concatenate([self.sources, np.ones((self.n_angles, 1))], 1)
        return (np.linalg.inv(self.index_to_world()) @ world.T).T[:, :3]

    def voxel_rays(self) -> np.ndarray:
        """``(n_angles, 4)``: each source in voxel indices, then 1 (rays from a point)."""
        return np.concatenate([self.voxel_sources(), np.ones((self.n_angles, 1))], 1)
