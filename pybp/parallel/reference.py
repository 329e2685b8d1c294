"""Float64 references: the back-projection formula in NumPy, and the analytic
Radon transform of the Shepp-Logan ellipse phantom."""

from __future__ import annotations

import numpy as np

from pybp.stages.filters import filter_numpy
from pybp.geometry.parallel import Geometry


def relative_rms(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


# Modified Shepp-Logan (Toft): value, semi-axes a, b, centre x0, y0, rotation (deg),
# in units of the phantom radius, y pointing up.
def positions(geometry: Geometry, angle: int, rows=None) -> np.ndarray:
    """Float64 detector position ``h`` of each pixel (of ``rows``, default all) at one angle."""
    fx, fy = geometry.pixel_offsets()
    fy = fy if rows is None else fy[rows]
    theta = geometry.angles[angle]
    return geometry.center[angle] + fx[None, :] * np.cos(theta) - fy[:, None] * np.sin(theta)


def backproject(sinograms, geometry: Geometry, interpolation="linear", rows=None):
    """Float64 back-projection with the library's formula; zero outside the detector.

    Nearest picks ``floor(h + 0.5)``; linear blends ``floor(h)`` and the next bin.
    ``rows`` computes only those rows of the slice (large cases).
    """
    stack = np.asarray(sinograms, np.float64)
    single = stack.ndim == 2
    stack = stack[None] if single else stack
    n_bins = geometry.n_bins
    padded = np.concatenate([np.zeros(stack.shape[:2] + (1,)), stack,
                             np.zeros(stack.shape[:2] + (1,))], axis=2)
    out = None
    for a in range(geometry.n_angles):
        h = positions(geometry, a, rows)
        if out is None:
            out = np.zeros((stack.shape[0],) + h.shape)
        if interpolation == "nearest":
            index = np.floor(h + 0.5).astype(np.int64)
            index = np.where((index >= 0) & (index < n_bins), index + 1, 0)
            out += padded[:, a, index]
        else:
            left = np.floor(h)
            weight = h - left
            # Index into `padded`: bins -1 and n_bins (and beyond, clipped) read zero.
            i = np.clip(left.astype(np.int64), -1, n_bins) + 1
            j = np.clip(left.astype(np.int64) + 1, -1, n_bins) + 1
            out += (1 - weight) * padded[:, a, i] + weight * padded[:, a, j]
    return out[0] if single else out


def forward_project(volume, geometry: Geometry):
    """Float64 forward projection, the transpose of :func:`backproject`'s linear
    interpolation: each pixel adds ``(1 - w)`` of itself to bin ``floor(h)`` and ``w`` to
    the next, bins beyond the detector dropped. ``volume`` ``(n_rows, ny, nx)`` (or one
    slice ``(ny, nx)``) to projections ``(n_angles, n_rows, n_bins)`` (``(n_angles,
    n_bins)``)."""
    stack = np.asarray(volume, np.float64)
    single = stack.ndim == 2
    stack = stack[None] if single else stack
    n_rows, n_bins = stack.shape[0], geometry.n_bins
    out = np.zeros((geometry.n_angles, n_rows, n_bins + 2))  # bins -1 and n_bins: dropped
    values = stack.reshape(n_rows, -1)
    for a in range(geometry.n_angles):
        h = positions(geometry, a).ravel()
        left = np.floor(h)
        weight = h - left
        i = np.clip(left.astype(np.int64), -1, n_bins) + 1
        j = np.clip(left.astype(np.int64) + 1, -1, n_bins) + 1
        for r in range(n_rows):
            out[a, r] += np.bincount(i, (1 - weight) * values[r], n_bins + 2)
            out[a, r] += np.bincount(j, weight * values[r], n_bins + 2)
    out = out[:, :, 1:-1]
    return out[:, 0] if single else out


def near_boundary(geometry: Geometry, margin: float, rows=None) -> np.ndarray:
    """Pixels (of ``rows``) whose float64 position at some angle lies within ``margin``
    bins of a bin boundary, where nearest interpolation may round either way."""
    near = None
    for a in range(geometry.n_angles):
        h = positions(geometry, a, rows)
        close = np.abs(h + 0.5 - np.round(h + 0.5)) < margin
        near = close if near is None else near | close
    return near


def fbp(sinograms, geometry: Geometry, filter="ramp", interpolation="linear", padding="zero",
        rows=None):
    """Float64 filtered back-projection (the library's filter, weights and formula)."""
    stack = np.asarray(sinograms, np.float64)
    filtered = filter_numpy(stack, filter, geometry.angle_weights(), padding)
    return backproject(filtered, geometry, interpolation, rows)
