"""Parallel-beam geometry: angles, rotation axis, slice grid; input validation.

Conventions (docs/design.md, section 1): a pixel at pixel-centre offsets ``(fx, fy)`` from the
slice centre (``fy`` grows with the row index) meets the detector at
``h = center + fx * cos(theta) - fy * sin(theta)`` (the paper's Eq. 1), in bins counted
from the first bin's centre.  This is the geometry of ``skimage.transform.radon``, so its
sinograms reconstruct upright.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, positive_int
from pybp.geometry.angles import gap_weights

FIXED_BITS = 32  # fraction bits of Geometry.fixed_constants


@dataclass(frozen=True, eq=False)
class Geometry:
    """What the back-projection of one sinogram needs to know.

    ``center`` is per angle (a scalar centre is repeated); ``slice_offset`` is the
    ``(row, column)`` offset in pixels of the slice centre from the rotation axis, which
    selects a region of interest.
    """

    n_bins: int
    angles: np.ndarray
    center: np.ndarray
    slice_shape: tuple[int, int]
    slice_offset: tuple[float, float] = (0.0, 0.0)
    weights: np.ndarray | None = None  # the caller's angle weights, if given

    @classmethod
    def create(cls, n_bins, angles, center=None, slice_shape=None, slice_offset=None,
               angle_weights=None):
        """Validate user input once, at the API boundary, and build the geometry."""
        n_bins = positive_int(n_bins, "n_bins")
        angles = float_array(angles, "angles", 1)  # radians (pybp.geometry.angles.in_radians)
        weights = None
        if angle_weights is not None:
            weights = float_array(angle_weights, "angle_weights", 1)
            if weights.size != angles.size:
                raise ValueError(f"angle_weights: expected one weight per angle ({angles.size}), "
                                 f"got {weights.size}")
            if weights.min() < 0:
                raise ValueError("angle_weights: expected weights >= 0 (radians of the scan "
                                 "each projection stands for)")
        if center is None:
            center = np.full(angles.size, (n_bins - 1) / 2.0)
        else:
            center_arr = np.asarray(center)
            if center_arr.ndim == 0:
                center = np.full(angles.size, float(float_array(center_arr[None], "center", 1)[0]))
            else:
                center = float_array(center_arr, "center", 1)
                if center.size != angles.size:
                    raise ValueError(
                        f"center: a per-angle centre needs one value per angle "
                        f"({angles.size}), got {center.size}"
                    )
        # An axis off the detector means no projection saw the slice centre: almost
        # always a unit mistake (millimetres, or a centre relative to the middle).
        if center.min() < -0.5 or center.max() > n_bins - 0.5:
            raise ValueError(
                f"center: the rotation axis must lie on the detector, within "
                f"[-0.5, {n_bins - 0.5}] bins; got values in [{center.min():g}, {center.max():g}]"
            )
        if slice_shape is None:
            slice_shape = (n_bins, n_bins)
        if np.ndim(slice_shape) == 0:
            slice_shape = (slice_shape, slice_shape)
        if len(slice_shape) != 2:
            raise ValueError(f"slice_shape: expected (ny, nx), got {slice_shape!r}")
        slice_shape = (positive_int(slice_shape[0], "slice_shape"),
                       positive_int(slice_shape[1], "slice_shape"))
        if slice_offset is None:
            slice_offset = (0.0, 0.0)
        offset = float_array(slice_offset, "slice_offset", 1)
        if offset.size != 2:
            raise ValueError(f"slice_offset: expected (row, column) offsets, got {slice_offset!r}")
        return cls(n_bins, angles, center, slice_shape, (float(offset[0]), float(offset[1])),
                   weights)

    @property
    def n_angles(self) -> int:
        return self.angles.size

    def updates(self, n_slices=1) -> int:
        """Pixel updates of a back-projection: the numerator of GU/s (docs/design.md, section 5)."""
        ny, nx = self.slice_shape
        return nx * ny * self.n_angles * n_slices

    def pixel_offsets(self):
        """``(fx, fy)`` of every pixel: its offset from the rotation axis, in pixels."""
        ny, nx = self.slice_shape
        fx = np.arange(nx) - (nx - 1) / 2.0 + self.slice_offset[1]
        fy = np.arange(ny) - (ny - 1) / 2.0 + self.slice_offset[0]
        return fx, fy

    def circle_radius(self) -> float:
        """Radius, in pixels about the axis, of the reconstruction circle: the pixels
        every projection saw. Bins span their centre +- 0.5, so a pixel at distance r
        lands on the detector at every angle when ``center +- r`` does."""
        return float(min(self.center.min(), self.n_bins - 1 - self.center.max())) + 0.5

    def circle_columns(self, radius=None) -> np.ndarray:
        """Per slice row, ``[first, stop)`` of the columns inside the reconstruction
        circle (``fx^2 + fy^2 <= radius^2``; ``radius`` by default
        :meth:`circle_radius`), int32 ``(ny, 2)``; an empty row is ``[0, 0)``."""
        fx, fy = self.pixel_offsets()
        radius = self.circle_radius() if radius is None else radius
        half = np.sqrt(np.maximum(radius ** 2 - fy ** 2, 0.0))
        first = np.searchsorted(fx, -half, side="left")
        stop = np.searchsorted(fx, half, side="right")
        empty = (fy ** 2 > radius ** 2) | (stop <= first)
        return np.where(empty[:, None], 0, np.stack([first, stop], axis=1)).astype(np.int32)

    def projection_constants(self, first_angle=0, n_angles=None, first_bin=0, floats=4):
        """The per-angle table of ``h = x*cos - y*sin + base``, as float32 rows.

        ``x, y`` are the integer pixel indices; ``base`` folds in the centre, the slice
        centre, the region of interest and ``first_bin`` (a detector piece starting at
        that bin, when the detector is wider than the device's images). Each value is a
        double-float: the float32 nearest it, and what that rounding lost. Rows of 4
        (texture kernels; one 128-bit load, Sect. 5.7): cos, sin, base, base's residual.
        Rows of 8 (ALU kernel) add the residuals of cos and sin, since a float32 cos
        times thousands of pixels is off by 1e-4 bin (docs/design.md, section 6).
        """
        cos, sin, base = self.detector_lines(first_angle, n_angles, first_bin)
        table = np.zeros((cos.size, floats), np.float32)
        for column, value in enumerate((cos, sin, base)):
            table[:, column] = value
        table[:, 3] = base - table[:, 2].astype(np.float64)
        if floats == 8:
            table[:, 4] = cos - table[:, 0].astype(np.float64)
            table[:, 5] = sin - table[:, 1].astype(np.float64)
        return table

    def detector_lines(self, first_angle=0, n_angles=None, first_bin=0):
        """cos, sin and base of ``h = x*cos - y*sin + base`` per angle, in float64: the
        bin where integer pixel ``(x, y)`` meets the detector (see
        :meth:`projection_constants`)."""
        if n_angles is None:
            n_angles = self.n_angles - first_angle
        sel = slice(first_angle, first_angle + n_angles)
        theta = self.angles[sel]
        cos, sin = np.cos(theta), np.sin(theta)
        fx0, fy0 = (v[0] for v in self.pixel_offsets())
        return cos, sin, self.center[sel] + fx0 * cos - fy0 * sin - first_bin

    def fixed_constants(self):
        """The per-angle table of ``h = x*cos - y*sin + base`` in 32.32 fixed point,
        int64 rows of 4: cos, -sin, base, 0. The matched pair's positions
        (templates/operators/parallel.cl.mako): integer sums are exact, so both of its
        kernels find the same weights however they group the terms."""
        cos, sin, base = self.detector_lines()
        if np.abs(base).max(initial=0) + sum(self.slice_shape) >= 2 ** 30:
            raise ValueError("geometry: positions beyond 2^30 bins do not fit 32.32 fixed point")
        table = np.zeros((cos.size, 4), np.int64)
        for column, value in enumerate((cos, -sin, base)):
            table[:, column] = np.rint(np.ldexp(value, FIXED_BITS))
        return table

    def angle_weights(self):
        """The angular interval each projection stands for in the FBP sum (radians).

        Projections at theta and theta + pi see the same lines, so directions live on
        a circle of period pi. Each projection weighs half the gaps to its neighbours on
        that circle: equal steps give pi/n for 180 and 360 degree scans alike, and uneven
        steps are weighted by their spacing. A gap wider than ``GAP_FACTOR`` typical
        steps (the median gap between distinct directions) is missing data, a missing
        wedge or a run of lost projections: it counts as ``GAP_FACTOR`` typical steps, so
        the projections beside it are never weighted to fill it. The weights then sum to
        less than pi. Weights the caller gave (``angle_weights=``) are used as given.
        """
        if self.weights is not None:
            return self.weights
        return gap_weights(self.angles, np.pi)


class ParallelGeometry(Geometry):
    """A parallel-beam geometry, as users write it (``pybp.ParallelGeometry``):
    ``angles`` in radians, ``n_bins`` detector bins, the rotation axis at ``center``
    bins from the first bin's centre (default the detector's middle), slices of
    ``slice_shape`` ``(ny, nx)`` pixels (default ``n_bins`` square), the slice centre
    ``slice_offset`` ``(row, column)`` pixels from the axis. Projections are
    ``(n_angles, rows, n_bins)`` and volumes ``(rows, ny, nx)``, tomopy's layouts; the
    pixel size is the bin's. It is the :class:`Geometry` every parallel-beam call takes."""

    def __init__(self, angles, n_bins, center=None, slice_shape=None, slice_offset=None):
        made = Geometry.create(n_bins, angles, center, slice_shape, slice_offset)
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, getattr(made, name))

    def __repr__(self):
        return (f"ParallelGeometry({self.n_angles} angles, n_bins={self.n_bins}, "
                f"slice_shape={self.slice_shape})")
