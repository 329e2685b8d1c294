"""Parallel-beam geometry: angles, rotation axis, slice grid, the detector's and the
voxels' sizes; input validation.

Conventions (docs/design.md, section 1): a pixel of the slice (a voxel) at offsets
``(fx, fy)`` voxels from the slice centre (``fy`` grows with the row index) meets the
detector at ``h = center + (fx * cos(theta) - fy * sin(theta)) * voxel_size / pixel_size``
(the paper's Eq. 1, with the voxels' and bins' sizes), in bins counted from the first
bin's centre. This is the geometry of ``skimage.transform.radon``, so its sinograms
reconstruct upright. Lengths (``pixel_size``, ``voxel_size``) are in any one unit: line
integrals are in that unit times the volume's, which is attenuation per unit (both 1:
per voxel, as before these sizes existed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.checks import float_array, positive_int, positive_length
from pybp.geometry import astra
from pybp.geometry.angles import gap_weights, in_radians

FIXED_BITS = 32  # fraction bits of ParallelGeometry.fixed_constants


@dataclass(frozen=True, eq=False, init=False)
class ParallelGeometry:
    """A parallel-beam geometry, as users write it (``pybp.ParallelGeometry``):
    ``angles`` in radians (``angle_unit="deg"``: degrees; radians spanning more than one
    turn are refused unless ``angle_unit="rad"`` says so, as everywhere in pybp),
    ``n_bins`` detector bins of ``pixel_size`` each, the rotation axis at ``center`` bins
    from the first bin's centre (default the detector's middle), slices of
    ``slice_shape`` ``(ny, nx)`` voxels of ``voxel_size`` (default: as many as span the
    detector's width), the slice centre ``slice_offset`` ``(row, column)`` voxels from the
    axis. Projections are ``(n_angles, rows, n_bins)`` and volumes ``(rows, ny, nx)``,
    tomopy's layouts, a slice per detector row. Lengths are in any one unit (ASTRA's
    ``DetectorSpacingX`` and the volume's voxel size): the projections are line integrals
    in that unit and volumes attenuation per unit, with both sizes 1 per voxel. It is what
    every parallel-beam call takes; :meth:`create` makes one from the fields as they are
    kept (``center`` per angle, in bins; ``slice_offset`` ``(row, column)`` in voxels),
    checked once, at the API's edge."""

    n_bins: int
    angles: np.ndarray
    center: np.ndarray
    slice_shape: tuple[int, int]
    slice_offset: tuple[float, float] = (0.0, 0.0)
    weights: np.ndarray | None = None  # the caller's angle weights, if given
    pixel_size: float = 1.0  # a detector bin's width
    voxel_size: float = 1.0  # a slice pixel's side (and the unit of attenuation's length)

    def __init__(self, angles, n_bins, center=None, slice_shape=None, slice_offset=None, *,
                 pixel_size=1.0, voxel_size=1.0, angle_unit=None):
        made = self.create(n_bins, in_radians(angles, angle_unit), center, slice_shape,
                           slice_offset, pixel_size=pixel_size, voxel_size=voxel_size)
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, getattr(made, name))

    @classmethod
    def create(cls, n_bins, angles, center=None, slice_shape=None, slice_offset=None,
               angle_weights=None, pixel_size=1.0, voxel_size=1.0):
        """Validate user input once, at the API boundary, and build the geometry."""
        n_bins = positive_int(n_bins, "n_bins")
        angles = float_array(angles, "angles", 1)  # radians (pybp.geometry.angles.in_radians)
        pixel_size = positive_length(pixel_size, "pixel_size")
        voxel_size = positive_length(voxel_size, "voxel_size")
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
        if slice_shape is None:  # the detector's width, in voxels
            side = max(1, int(np.ceil(n_bins * pixel_size / voxel_size - 1e-9)))
            slice_shape = (side, side)
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
        made = object.__new__(cls)
        for name, value in zip(cls.__dataclass_fields__, (
                n_bins, angles, center, slice_shape, (float(offset[0]), float(offset[1])),
                weights, pixel_size, voxel_size)):
            object.__setattr__(made, name, value)
        return made

    @property
    def n_angles(self) -> int:
        return self.angles.size

    @property
    def pitch(self) -> float:
        """Bins per voxel: ``voxel_size / pixel_size``."""
        return self.voxel_size / self.pixel_size

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
        """Radius, in voxels about the axis, of the reconstruction circle: the voxels
        every projection saw. Bins span their centre +- 0.5, so a voxel at distance r
        lands on the detector at every angle when ``center +- r`` (in bins) does."""
        bins = float(min(self.center.min(), self.n_bins - 1 - self.center.max())) + 0.5
        return bins / self.pitch

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
        cos, sin = np.cos(theta) * self.pitch, np.sin(theta) * self.pitch
        fx0, fy0 = (v[0] for v in self.pixel_offsets())
        return cos, sin, self.center[sel] + fx0 * cos - fy0 * sin - first_bin

    def filter_weights(self):
        """Each projection's weight in the filtered back-projection: its angle
        (:meth:`angle_weights`) over the bins' width, so that the volume is attenuation
        per unit of length (the ramp filter's kernel is 1 / length^2)."""
        return self.angle_weights() / self.pixel_size

    def footprints(self):
        """Each angle's voxel footprint in the matched pair (docs/design.md, section 9),
        ``(width, amplitude)`` as float32 values: a voxel's shadow on the detector is a
        box ``width`` bins wide about its position (its side along the slice axis the
        angle's rays cross more steeply, ``pitch * max(|cos|, |sin|)``: the boxes of a
        line of voxels along that axis tile the detector), and the rays through it are
        ``amplitude`` long (``voxel_size / max(|cos|, |sin|)``: the chord across the
        voxel's row or column). A bin's weight is the mean chord over the bin: a
        distance-driven projector, in the geometry's units of length."""
        steep = np.maximum(np.abs(np.cos(self.angles)), np.abs(np.sin(self.angles)))
        width = (self.pitch * steep).astype(np.float32).astype(np.float64)
        amplitude = (self.voxel_size / steep).astype(np.float32).astype(np.float64)
        return width, amplitude

    def fixed_constants(self):
        """The matched pair's per-angle table (templates/operators/parallel.cl.mako),
        int64 rows of 4: cos, -sin and the position of voxel (0, 0)'s footprint's lower
        end plus half a bin (so that its floor is the first bin it covers), of ``h = x
        cos - y sin + base``, in 32.32 fixed point; then the footprint's width (low 32
        bits) and amplitude (high 32 bits) as float32 bits (:meth:`footprints`).
        Integer sums are exact, so both kernels find the same weights however they group
        the terms."""
        cos, sin, base = self.detector_lines()
        width, amplitude = self.footprints()
        if np.abs(base).max(initial=0) + (sum(self.slice_shape) + 2) * self.pitch >= 2 ** 30:
            raise ValueError("geometry: positions beyond 2^30 bins do not fit 32.32 fixed point")
        table = np.zeros((cos.size, 4), np.int64)
        for column, value in enumerate((cos, -sin, base + 0.5 - width / 2)):
            table[:, column] = np.rint(np.ldexp(value, FIXED_BITS))
        bits = [v.astype(np.float32).view(np.uint32).astype(np.int64) for v in (width, amplitude)]
        table[:, 3] = bits[0] | (bits[1] << 32)
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


    @classmethod
    def from_astra(cls, proj_geom, vol_geom, angle_unit=None):
        """ASTRA's own geometry dicts in one line: a ``parallel`` or ``parallel_vec``
        projection geometry with a 2-D volume geometry, or a ``parallel3d`` or
        ``parallel3d_vec`` one with a 3-D volume geometry (``astra.create_proj_geom``,
        ``astra.create_vol_geom``; the window gives the voxel size and the slice
        offset). ASTRA's sinograms ``(n_angles, n_bins)`` are pybp's; its 3-D projections
        are ``(rows, angles, columns)``, pybp's ``(angles, rows, columns)``:
        ``data.transpose(1, 0, 2)``. Volumes are the same arrays in both.

        pybp's parallel beam is a slice per detector row, its rays across the rotation
        axis: vector rows are taken where each ray is horizontal, the detector's column
        step ``u`` horizontal, at right angles to the ray and of one length, and its row
        step ``v`` straight up, as long as a voxel, its rows the volume's slices. Others
        (laminography, a tilted detector) are refused by name. The detector's shift along
        ``u`` is each angle's ``center``. (Those others:
        :class:`pybp.ParallelVectorGeometry`, for the iterative methods.) ASTRA's 3-D volumes run y the other way about
        from its 2-D ones (pybp.geometry.astra): a ``parallel3d`` angle t is pybp's -t.
        ``ProjectionAngles`` are radians, as ASTRA's; spanning more than one turn they
        are refused as degrees unless ``angle_unit`` says (``"deg"``, or ``"rad"`` for
        several turns), as everywhere in pybp."""
        name = astra.kind(proj_geom)
        if name not in ("parallel", "parallel_vec", "parallel3d", "parallel3d_vec"):
            other = (" (cone beam: pybp.ConeGeometry.from_astra)"
                     if name in ("cone", "cone_vec") else "")
            raise ValueError(f"proj_geom: type {name!r}; a ParallelGeometry takes ASTRA's "
                             f"'parallel', 'parallel_vec', 'parallel3d' and 'parallel3d_vec'"
                             f"{other}")
        dims = 3 if name.startswith("parallel3d") else 2
        shape, sizes, centre = astra.volume_window(vol_geom, dims)
        if not np.isclose(sizes[0], sizes[1], rtol=1e-9, atol=0):
            raise ValueError(f"vol_geom: voxels of {sizes[0]:g} x {sizes[1]:g} (x, y); pybp's "
                             "slices take squares (voxels of any sides: a 3-D geometry's "
                             "pybp.ParallelVectorGeometry.from_astra, for the iterative "
                             "methods)")
        voxel = float(sizes[0])
        if angle_unit is not None and name.endswith("_vec"):
            raise ValueError(f"angle_unit: a {name!r} geometry holds no angles")
        rows, n_rows, n_bins = astra.parallel_vectors(proj_geom, angle_unit)
        ray, d, u, v = (rows[:, 3 * a:3 * a + 3] for a in range(4))
        _check_parallel_rows(ray, u, v)
        pixel = np.hypot(u[:, 0], u[:, 1])
        if np.ptp(pixel) > 1e-9 * pixel.max():
            raise ValueError(f"proj_geom: detector columns of {pixel.min():g} to "
                             f"{pixel.max():g}; pybp's parallel beam takes one width")
        if dims == 3:
            _check_slices(d, v, n_rows, shape[0], sizes[2], centre[2])
        # a point X meets column (n_bins - 1) / 2 + (X - d) . u / |u|^2
        center = (n_bins - 1) / 2 - np.einsum("ij,ij->i", d[:, :2], u[:, :2]) / pixel ** 2
        if np.ptp(center) <= 1e-9 * n_bins:
            center = float(center[0])
        # pybp's h grows with fx cos(a) - fy sin(a), fy down the slice's rows: ASTRA's
        # 2-D angle as it is (its y runs up the rows), its 3-D angle negated
        sign = 1.0 if dims == 2 else -1.0
        if name in ("parallel", "parallel3d"):
            angles = sign * astra.angles(proj_geom, angle_unit)
        else:
            angles = sign * np.unwrap(np.arctan2(u[:, 1], u[:, 0]))
        return cls(angles, n_bins, center, shape[-2:],
                   (-sign * centre[1] / voxel, centre[0] / voxel),
                   pixel_size=float(pixel.mean()), voxel_size=voxel, angle_unit="rad")

    def __repr__(self):
        sizes = ("" if self.pixel_size == self.voxel_size == 1 else
                 f", pixel_size={self.pixel_size:g}, voxel_size={self.voxel_size:g}")
        return (f"ParallelGeometry({self.n_angles} angles, n_bins={self.n_bins}, "
                f"slice_shape={self.slice_shape}{sizes})")


def _check_parallel_rows(ray, u, v):
    """ASTRA vector rows pybp's parallel beam can take, or an error naming the first
    projection that it cannot (:meth:`ParallelGeometry.from_astra`)."""
    ray_length = np.linalg.norm(ray, axis=1)
    u_length = np.linalg.norm(u, axis=1)
    tests = (
        (ray_length > 0, "the ray direction is zero"),
        (u_length > 0, "the detector's column step u is zero"),
        (np.abs(ray[:, 2]) <= 1e-9 * ray_length,
         "the rays leave the horizontal plane (laminography)"),
        (np.abs(u[:, 2]) <= 1e-9 * u_length,
         "the detector's columns are tilted out of the horizontal plane"),
        (np.abs(np.einsum("ij,ij->i", ray, u)) <= 1e-9 * ray_length * u_length,
         "the detector's columns are not at right angles to the rays"),
        (np.abs(v[:, :2]).max(axis=1) <= 1e-9 * np.abs(v[:, 2]),
         "the detector's row step v is not straight up the rotation axis"),
    )
    for ok, what in tests:
        bad = np.flatnonzero(~ok)
        if bad.size:
            raise ValueError(f"proj_geom: projection {bad[0]}: {what}; pybp's "
                             "ParallelGeometry is a slice per detector row (any rays and "
                             "detector: pybp.ParallelVectorGeometry.from_astra, for the "
                             "iterative methods)")


def _check_slices(d, v, n_rows, n_slices, height, centre_z):
    """A 3-D geometry's detector rows are the volume's slices: as many, as tall, at the
    same heights; or an error saying which differs."""
    step = v[:, 2]
    if n_rows != n_slices:
        raise ValueError(f"vol_geom: {n_slices} slices for {n_rows} detector rows; pybp's "
                         "parallel beam makes a slice per row (give GridSliceCount = "
                         "DetectorRowCount)")
    if not np.allclose(step, height, rtol=1e-9, atol=0):
        raise ValueError(f"proj_geom: detector rows {step.min():g} high, voxels {height:g}; "
                         "pybp's parallel beam makes a slice per row, as high as a voxel")
    if np.abs(d[:, 2] - centre_z).max() > 1e-6 * height:
        raise ValueError("proj_geom: the detector's rows are not at the volume's slices' "
                         "heights (its centre's z against the window's)")
