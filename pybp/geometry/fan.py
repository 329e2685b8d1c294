"""Fan-beam geometry (2-D): ASTRA's ``fanflat`` and ``fanflat_vec``, so that the same
numbers give the same slice in both.

Conventions (ASTRA's 2-D ones):

- a sinogram ``(n_angles, n_det)``; a slice ``(ny, nx)``, pixel ``(j, i)`` at
  ``x = (i - (nx-1)/2) s`` and ``y = ((ny-1)/2 - j) s`` (y *down* the rows, row 0 at the
  window's top) plus ``slice_offset`` ``(x, y)``, ``s`` the ``voxel_size``;
- one row ``(src, d, u)`` of 6 numbers per projection: the source, the detector's
  centre and its step from one pixel to the next (``fanflat_vec``); ``fanflat``, for
  angle ``t``, has the source at ``(sin t, -cos t) * source_origin``, the detector's
  centre at ``(-sin t, cos t) * origin_detector`` and ``u = (cos t, sin t) *
  pixel_size``.

A fan-beam scan is a cone-beam scan of one plane of voxels under a detector of one row
(:meth:`FanGeometry.cone`): the rays lie in the plane, and a row as tall as a voxel sees
every voxel's shadow cover it, so cone beam's box model gives the fan's line integrals
and FDK's weights give the fan's FBP there. Lengths are in any one unit (mm, say).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, in_length_range, positive_int, positive_length
from pybp.geometry import astra
from pybp.geometry.angles import in_radians
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.volume import shape_of


@dataclass(frozen=True, eq=False, repr=False)
class FanGeometry:
    """A fan-beam scan of one slice and the slice to reconstruct from it. Make one with
    :meth:`circular` or :meth:`from_astra`.

    ``vectors`` ``(n_angles, 6)``: ASTRA ``fanflat_vec`` rows ``(src, d, u)``; ``n_det``
    detector pixels; ``slice_shape`` ``(ny, nx)`` of square pixels of ``voxel_size``
    about ``slice_offset`` ``(x, y)``."""

    vectors: np.ndarray
    n_det: int
    slice_shape: tuple
    voxel_size: float
    slice_offset: tuple = (0.0, 0.0)

    @classmethod
    def circular(cls, angles, n_det, pixel_size, source_origin, origin_detector, slice_shape,
                 voxel_size=1.0, detector_offset=0.0, slice_offset=(0.0, 0.0), angle_unit=None):
        """ASTRA's ``fanflat``: for angle ``t`` (radians; ``angle_unit="deg"``: degrees;
        radians spanning more than one turn refused unless ``angle_unit="rad"``, as
        everywhere in pybp) the source at ``(sin t, -cos t) * source_origin``, the
        detector's centre at ``(-sin t, cos t) * origin_detector``, moved by
        ``detector_offset`` pixels along its step ``u = (cos t, sin t) * pixel_size``."""
        angles = in_radians(angles, angle_unit)
        pixel = positive_length(pixel_size, "pixel_size")
        source_origin = positive_length(source_origin, "source_origin")
        origin_detector = positive_length(origin_detector, "origin_detector")
        offset = float(in_length_range(float_array(detector_offset, "detector_offset", 0),
                                       "detector_offset"))
        s, c = np.sin(angles), np.cos(angles)
        u = np.stack([c, s], 1) * pixel
        centre = np.stack([-s, c], 1) * origin_detector + offset * u
        return cls.from_astra(np.concatenate([np.stack([s, -c], 1) * source_origin, centre, u],
                                             1), n_det, slice_shape, voxel_size, slice_offset)

    @classmethod
    def from_astra(cls, vectors, n_det=None, slice_shape=None, voxel_size=1.0,
                   slice_offset=(0.0, 0.0), angle_unit=None):
        """ASTRA ``fanflat_vec`` rows ``(src, d, u)`` (6 numbers per projection) with
        ``n_det``, ``slice_shape`` and ``voxel_size``; or ASTRA's own dicts in one line,
        ``from_astra(proj_geom, vol_geom)``: a ``fanflat`` or ``fanflat_vec`` projection
        geometry and a 2-D volume geometry of square pixels (its window gives their side
        and the slice's offset). ASTRA's sinograms ``(n_angles, n_det)`` and slices are
        pybp's arrays as they are."""
        if isinstance(vectors, dict):
            return cls._from_astra_dicts(vectors, n_det, angle_unit)
        if angle_unit is not None:
            raise ValueError("angle_unit: fanflat_vec rows hold no angles (a 'fanflat' dict's "
                             "ProjectionAngles take it)")
        if n_det is None or slice_shape is None:
            raise TypeError("from_astra: give fanflat_vec rows with n_det and slice_shape, "
                            "or ASTRA's proj_geom and vol_geom dicts")
        rows = in_length_range(float_array(vectors, "vectors", 2), "vectors")
        if rows.shape[1:] != (6,) or len(rows) == 0:
            raise ValueError(f"vectors: expected fanflat_vec rows (n_angles, 6), got shape "
                             f"{rows.shape}")
        n_det = positive_int(n_det, "n_det")
        if np.ndim(slice_shape) == 0:
            slice_shape = (slice_shape, slice_shape)
        offset = in_length_range(float_array(slice_offset, "slice_offset", 1), "slice_offset")
        if offset.shape != (2,):
            raise ValueError(f"slice_offset: expected (x, y), got {slice_offset!r}")
        geometry = cls(vectors=rows, n_det=n_det, slice_shape=shape_of(slice_shape,
                                                                       "slice_shape", 2),
                       voxel_size=positive_length(voxel_size, "voxel_size"),
                       slice_offset=tuple(float(v) for v in offset))
        geometry.cone()  # the checks of a scan (a source in the detector's line, the
        return geometry  # slice behind a source) are cone beam's

    @classmethod
    def _from_astra_dicts(cls, proj_geom, vol_geom, angle_unit):
        """:meth:`from_astra` of ASTRA's dicts."""
        shape, sizes, centre = astra.volume_window(vol_geom, 2)
        if not np.isclose(sizes[0], sizes[1], rtol=1e-9, atol=0):
            raise ValueError(f"vol_geom: pixels of {sizes[0]:g} x {sizes[1]:g} (x, y); a "
                             "FanGeometry takes squares")
        kind = astra.kind(proj_geom)
        if kind not in ("fanflat", "fanflat_vec"):
            raise ValueError(f"proj_geom: type {kind!r}; a FanGeometry takes ASTRA's 'fanflat' "
                             "and 'fanflat_vec'")
        n_det = astra.count(proj_geom, "DetectorCount")
        if kind == "fanflat":
            return cls.circular(astra.angles(proj_geom, angle_unit), n_det,
                                astra.field(proj_geom, "DetectorWidth"),
                                astra.field(proj_geom, "DistanceOriginSource"),
                                astra.field(proj_geom, "DistanceOriginDetector"), shape,
                                float(sizes[0]), slice_offset=centre, angle_unit="rad")
        if angle_unit is not None:
            raise ValueError("angle_unit: a 'fanflat_vec' geometry holds no angles")
        return cls.from_astra(astra.field(proj_geom, "Vectors"), n_det, shape, float(sizes[0]),
                              centre)

    @property
    def n_angles(self) -> int:
        return len(self.vectors)

    @property
    def detector_shape(self) -> tuple:
        """``(1, n_det)``: a fan's detector is one row (as a scan file holds it)."""
        return (1, self.n_det)

    @property
    def angles(self) -> np.ndarray:
        """Each source's angle, ``fanflat``'s ``t`` (source at ``(sin t, -cos t) *
        distance``)."""
        return np.arctan2(self.vectors[:, 0], -self.vectors[:, 1])

    @functools.lru_cache(maxsize=1)
    def cone(self) -> ConeGeometry:
        """The same scan as cone beam: the slice one plane of voxels (``(1, ny, nx)``) under
        a detector of one row as tall as a voxel (``(1, n_det)``), in ASTRA's 3-D
        conventions, whose y runs up the rows where the 2-D slice's runs down them: y is
        mirrored, so the arrays are the same."""
        mirror = np.array([1.0, -1.0] * 3)
        flat = self.vectors * mirror
        zero = np.zeros(self.n_angles)
        rows = np.stack([flat[:, 0], flat[:, 1], zero, flat[:, 2], flat[:, 3], zero,
                         flat[:, 4], flat[:, 5], zero, zero, zero, zero + self.voxel_size], 1)
        x, y = self.slice_offset
        return ConeGeometry.from_astra(rows, (1, self.n_det), (1,) + tuple(self.slice_shape),
                                       self.voxel_size, (x, -y, 0.0))

    def __repr__(self):
        distances = np.linalg.norm(self.vectors[:, :2], axis=1)
        return (f"FanGeometry({self.n_angles} projections of {self.n_det} pixels, sources "
                f"{distances.min():.6g} to {distances.max():.6g} from the origin; slice "
                f"{self.slice_shape[0]} x {self.slice_shape[1]} of {self.voxel_size:g})")
