"""Float64 references: the back-projection formula in NumPy, and the matched pair's
distance-driven forward projection and its transpose."""

from __future__ import annotations

import numpy as np

from pybp.stages.filters import filter_numpy
from pybp.geometry.parallel import ParallelGeometry


def relative_rms(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


# Modified Shepp-Logan (Toft): value, semi-axes a, b, centre x0, y0, rotation (deg),
# in units of the phantom radius, y pointing up.
def positions(geometry: ParallelGeometry, angle: int, rows=None) -> np.ndarray:
    """Float64 detector position ``h`` of each pixel (of ``rows``, default all) at one angle."""
    fx, fy = geometry.pixel_offsets()
    fy = fy if rows is None else fy[rows]
    theta = geometry.angles[angle]
    cos, sin = np.cos(theta) * geometry.pitch, np.sin(theta) * geometry.pitch
    return geometry.center[angle] + fx[None, :] * cos - fy[:, None] * sin


def backproject(sinograms, geometry: ParallelGeometry, interpolation="linear", rows=None):
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


def footprint_shares(geometry: ParallelGeometry, angle: int, width: float, amplitude: float):
    """The matched pair's weights at one angle, float64: ``(first, shares)``, each
    voxel's first bin ``(ny, nx)`` and its footprint's share of bins ``first + m``
    ``(span, ny, nx)``, times the amplitude; ``width`` and ``amplitude`` are the
    angle's (:meth:`ParallelGeometry.footprints`; the kernels' ``footprint``)."""
    h = positions(geometry, angle) + 0.5 - width / 2  # the box's lower end, plus half a bin
    first = np.floor(h)
    f = h - first
    m = np.arange(int(np.ceil(width)) + 1)[:, None, None]
    shares = np.maximum(0.0, np.minimum(f + width, m + 1) - np.maximum(f, m))
    return first.astype(np.int64), amplitude * shares


def forward_project(volume, geometry: ParallelGeometry):
    """Float64 forward projection of the matched pair: each voxel adds its footprint's
    share of each bin it covers, times the amplitude (:func:`footprint_shares`), bins
    beyond the detector dropped. ``volume`` ``(n_rows, ny, nx)`` (or one slice ``(ny,
    nx)``) to projections ``(n_angles, n_rows, n_bins)`` (``(n_angles, n_bins)``)."""
    stack = np.asarray(volume, np.float64)
    single = stack.ndim == 2
    stack = stack[None] if single else stack
    n_rows, n_bins = stack.shape[0], geometry.n_bins
    out = np.zeros((geometry.n_angles, n_rows, n_bins))
    values = stack.reshape(n_rows, -1)
    footprints = geometry.footprints()
    for a in range(geometry.n_angles):
        first, shares = footprint_shares(geometry, a, *(v[a] for v in footprints))
        for m, share in enumerate(shares):
            bins = first.ravel() + m
            inside = (bins >= 0) & (bins < n_bins)
            for r in range(n_rows):
                out[a, r] += np.bincount(bins[inside], (share.ravel() * values[r])[inside],
                                         n_bins)
    return out[:, 0] if single else out


def transpose_project(projections, geometry: ParallelGeometry):
    """Float64 transpose of :func:`forward_project`: each voxel gathers its footprint's
    share of each bin it covers, times the amplitude. ``projections`` ``(n_angles,
    n_rows, n_bins)`` (or ``(n_angles, n_bins)``) to a volume ``(n_rows, ny, nx)`` (``(ny,
    nx)``)."""
    stack = np.asarray(projections, np.float64)
    single = stack.ndim == 2
    stack = stack[:, None] if single else stack
    n_bins = geometry.n_bins
    out = np.zeros((stack.shape[1],) + tuple(geometry.slice_shape))
    footprints = geometry.footprints()
    for a in range(geometry.n_angles):
        first, shares = footprint_shares(geometry, a, *(v[a] for v in footprints))
        for m, share in enumerate(shares):
            bins = first + m
            inside = (bins >= 0) & (bins < n_bins)
            out += share * np.where(inside, stack[a][:, np.clip(bins, 0, n_bins - 1)], 0)
    return out[0] if single else out


def near_boundary(geometry: ParallelGeometry, margin: float, rows=None) -> np.ndarray:
    """Pixels (of ``rows``) whose float64 position at some angle lies within ``margin``
    bins of a bin boundary, where nearest interpolation may round either way."""
    near = None
    for a in range(geometry.n_angles):
        h = positions(geometry, a, rows)
        close = np.abs(h + 0.5 - np.round(h + 0.5)) < margin
        near = close if near is None else near | close
    return near


def fbp(sinograms, geometry: ParallelGeometry, filter="ramp", interpolation="linear", padding="zero",
        rows=None):
    """Float64 filtered back-projection (the library's filter, weights and formula)."""
    stack = np.asarray(sinograms, np.float64)
    filtered = filter_numpy(stack, filter, geometry.filter_weights(), padding)
    return backproject(filtered, geometry, interpolation, rows)
