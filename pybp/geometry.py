"""Parallel-beam geometry: angles, rotation axis, slice grid; input validation.

Conventions (design section 1): a pixel at pixel-centre offsets ``(fx, fy)`` from the
slice centre (``fy`` grows with the row index) meets the detector at
``h = center + fx * cos(theta) - fy * sin(theta)`` (the paper's Eq. 1), in bins counted
from the first bin's centre.  This is the geometry of ``skimage.transform.radon``, so its
sinograms reconstruct upright.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _as_float_array(value, name, ndim):
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name}: expected a numeric array, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: is empty")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def _positive_int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value}")
    return int(value)


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

    @classmethod
    def create(cls, n_bins, angles, center=None, slice_shape=None, slice_offset=None):
        """Validate user input once, at the API boundary, and build the geometry."""
        n_bins = _positive_int(n_bins, "n_bins")
        angles = _as_float_array(angles, "angles", 1)
        if center is None:
            center = np.full(angles.size, (n_bins - 1) / 2.0)
        else:
            center_arr = np.asarray(center)
            if center_arr.ndim == 0:
                center = np.full(angles.size, float(_as_float_array(center_arr[None], "center", 1)[0]))
            else:
                center = _as_float_array(center_arr, "center", 1)
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
        slice_shape = (_positive_int(slice_shape[0], "slice_shape"),
                       _positive_int(slice_shape[1], "slice_shape"))
        if slice_offset is None:
            slice_offset = (0.0, 0.0)
        offset = _as_float_array(slice_offset, "slice_offset", 1)
        if offset.size != 2:
            raise ValueError(f"slice_offset: expected (row, column) offsets, got {slice_offset!r}")
        return cls(n_bins, angles, center, slice_shape, (float(offset[0]), float(offset[1])))

    @property
    def n_angles(self) -> int:
        return self.angles.size

    def updates(self, n_slices=1) -> int:
        """Pixel updates of a back-projection: the numerator of GU/s (design section 5)."""
        ny, nx = self.slice_shape
        return nx * ny * self.n_angles * n_slices

    def pixel_offsets(self):
        """``(fx, fy)`` of every pixel: its offset from the rotation axis, in pixels."""
        ny, nx = self.slice_shape
        fx = np.arange(nx) - (nx - 1) / 2.0 + self.slice_offset[1]
        fy = np.arange(ny) - (ny - 1) / 2.0 + self.slice_offset[0]
        return fx, fy

    def projection_constants(self, first_angle=0, n_angles=None, first_bin=0):
        """Per-angle ``(cos, sin, base, base_residual)`` as float32, for
        ``h = x*cos - y*sin + base``.

        ``x, y`` are the integer pixel indices; ``base`` folds in the centre, the slice
        centre, the region of interest and ``first_bin`` (a detector piece starting at
        that bin, when the detector is wider than the device's images). Four floats per
        angle because 128-bit constant loads are faster (Sect. 5.7); the fourth is what
        rounding ``base`` to float32 lost, for kernels that interpolate exactly.
        """
        if n_angles is None:
            n_angles = self.n_angles - first_angle
        sel = slice(first_angle, first_angle + n_angles)
        theta = self.angles[sel]
        cos, sin = np.cos(theta), np.sin(theta)
        fx0, fy0 = (v[0] for v in self.pixel_offsets())
        base = self.center[sel] + fx0 * cos - fy0 * sin - first_bin
        table = np.zeros((theta.size, 4), np.float32)
        table[:, 0], table[:, 1], table[:, 2] = cos, sin, base
        table[:, 3] = base - table[:, 2].astype(np.float64)
        return table

    def angle_weights(self):
        """Angular step of each projection, for the FBP sum (radians, sums to pi).

        Projections at theta and theta + pi see the same lines, so each angle gets half
        the gap to its neighbours on the circle of period pi: equal steps give pi/n for
        180 and 360 degree scans alike, and uneven steps are weighted by their spacing.
        """
        folded = np.mod(self.angles, np.pi)
        order = np.argsort(folded, kind="stable")
        ordered = folded[order]
        gaps = np.diff(np.concatenate([ordered, [ordered[0] + np.pi]]))
        weights_sorted = 0.5 * (gaps + np.roll(gaps, 1))
        weights = np.empty_like(weights_sorted)
        weights[order] = weights_sorted
        return weights


def as_sinogram_stack(sinograms, geometry, name="sinograms"):
    """Check user data against the geometry; return a C-contiguous float32 3-D view.

    Returns ``(stack, was_single)``: a 2-D sinogram becomes a stack of one.
    """
    if not hasattr(sinograms, "shape") or not hasattr(sinograms, "dtype"):
        raise TypeError(f"{name}: expected a numpy array, got {type(sinograms).__name__}")
    dtype = np.dtype(sinograms.dtype)
    if dtype.kind not in "iuf" or dtype.kind == "f" and dtype.itemsize > 8:
        raise TypeError(f"{name}: expected real numbers (float32 preferred), got dtype {dtype}")
    if sinograms.ndim not in (2, 3):
        raise ValueError(
            f"{name}: expected (n_angles, n_bins) or (n_slices, n_angles, n_bins), "
            f"got shape {sinograms.shape}"
        )
    single = sinograms.ndim == 2
    stack = sinograms[None] if single else sinograms
    if stack.shape[0] == 0 or stack.size == 0:
        raise ValueError(f"{name}: is empty (shape {sinograms.shape})")
    if stack.shape[1] != geometry.n_angles:
        raise ValueError(
            f"{name}: has {stack.shape[1]} projections (axis -2) but {geometry.n_angles} angles were given"
        )
    if stack.shape[2] != geometry.n_bins:
        raise ValueError(
            f"{name}: has {stack.shape[2]} bins (last axis) but the back-projector was made for {geometry.n_bins}"
        )
    stack = np.ascontiguousarray(stack, dtype=np.float32)
    if not np.isfinite(stack).all():
        raise ValueError(f"{name}: contains NaN or Inf")
    return stack, single


def check_output(out, shape, name="out"):
    """Check an array the caller gives for the result (numpy, memmap, h5py dataset)."""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise TypeError(f"{name}: expected an array with shape {shape}, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    if np.dtype(out.dtype).kind != "f":
        raise TypeError(f"{name}: expected a floating-point array, got dtype {out.dtype}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    return out
