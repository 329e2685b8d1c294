"""FDK's weights, in float64 on the host (docs/design.md, section 8): each projection's
detector pose (for the cosine pre-weight), its pixel pitch at the isocentre (the
filter's scale), its angular weight (gap-aware, as in the parallel case) and, for
short scans, Parker's weights per column.

FDK (Feldkamp, Davis & Kress 1984; Kak & Slaney, Ch. 3, Eq. 173 for a flat detector)
sums over projections ``dbeta / 2 * (1 / w^2) * Q``, where ``Q`` is the projection
times ``cos`` (the angle between the ray and the detector's normal) filtered along
its rows by the ramp at the pitch the detector's columns have at the isocentre, and
``w`` the voxel's depth over the isocentre's (the matrices' third row). A full circle
sees each line twice, hence the 1/2; a short scan sees some lines twice and others
once, and Parker's weights (summing to 1 over each line's two rays) replace the 1/2.

Everything here is derived from the projection matrices alone, so the three ways to
make a :class:`~pybp.geometry.cone.ConeGeometry` weight alike. For trajectories that
are not circular the same weights are applied per projection, and FDK is an
approximation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from pybp.geometry.cone import ConeGeometry
from pybp.geometry.angles import GAP_FACTOR, circle_gaps, gap_weights

POSE_VALUES = 10  # per projection, for the device: first - source (3), u (3), v (3), depth


@dataclass(frozen=True)
class Poses:
    """Each projection's detector, as seen from its source, up to one scale per
    projection (which the weights do not depend on): ``first`` the first pixel's
    centre less the source, ``u`` and ``v`` the column and row steps, ``depth`` the
    source's distance to the detector's plane, ``pitch`` the columns' pitch at the
    isocentre, in the world's unit."""

    first: np.ndarray
    u: np.ndarray
    v: np.ndarray
    depth: np.ndarray
    pitch: np.ndarray

    def packed(self) -> np.ndarray:
        """``(n_angles, POSE_VALUES)`` for the pre-weighting kernel."""
        return np.concatenate([self.first, self.u, self.v, self.depth[:, None]], 1)


def poses(geometry: ConeGeometry) -> Poses:
    """The matrices ``M = B^-1 [I | -source] / s`` (``B`` = ``[u, v, first - source]``,
    ``s`` the isocentre's depth): ``inv(M[:, :3])`` = ``s B``, the detector moved along
    the rays by the factor ``s``, which changes no angle and no pitch at the
    isocentre."""
    basis = np.linalg.inv(geometry.matrices[:, :, :3])
    u, v, first = basis[:, :, 0], basis[:, :, 1], basis[:, :, 2]
    normal = np.cross(u, v)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    depth = np.abs(np.einsum("nc,nc->n", normal, first))
    isocentre = np.abs(np.einsum("nc,nc->n", normal, -geometry.sources))
    pitch = np.linalg.norm(u, axis=1) * isocentre / depth
    return Poses(first, u, v, depth, pitch)


def cosine(geometry: ConeGeometry, p: int, rows=None) -> np.ndarray:
    """The cosine pre-weight of projection ``p``: ``(rows, n_cols)``, ``rows`` a range
    (None: the whole detector)."""
    f = poses(geometry)
    n_rows, n_cols = geometry.detector_shape
    rows = np.arange(n_rows) if rows is None else np.asarray(rows)
    ray = (f.first[p][None, None, :] + np.arange(n_cols)[None, :, None] * f.u[p]
           + rows[:, None, None] * f.v[p])
    return f.depth[p] / np.linalg.norm(ray, axis=2)


def is_short_scan(geometry: ConeGeometry) -> bool:
    """Whether the sources leave a gap of more than ``GAP_FACTOR`` typical steps on the
    circle (a scan of less than 360 degrees)."""
    if geometry.n_angles < 2:
        return True
    _, gaps, typical = circle_gaps(geometry.angles, 2 * np.pi)
    return bool(gaps.max() > GAP_FACTOR * typical)


def fan_angles(geometry: ConeGeometry) -> np.ndarray:
    """``(n_angles, n_cols)``: each column's angle in the plane of the orbit from the
    ray through the isocentre, counter-clockwise about +z (radians)."""
    f = poses(geometry)
    n_rows, n_cols = geometry.detector_shape
    central = -geometry.sources[:, :2]
    ray = (f.first[:, None, :2] + np.arange(n_cols)[None, :, None] * f.u[:, None, :2]
           + (n_rows - 1) / 2 * f.v[:, None, :2])
    cross = central[:, None, 0] * ray[..., 1] - central[:, None, 1] * ray[..., 0]
    dot = np.einsum("nc,nkc->nk", central, ray)
    return np.arctan2(cross, dot)


def parker(beta, gamma, delta) -> np.ndarray:
    """Parker's weights for sources at ``beta`` (from the first, in the direction of
    rotation, up to ``pi + 2 delta``) and rays at fan angles ``gamma`` (the same
    sense): the ray ``(beta, gamma)`` and its conjugate ``(beta + pi + 2 gamma,
    -gamma)`` weigh 1 together."""
    beta, gamma = np.broadcast_arrays(np.asarray(beta, float), np.asarray(gamma, float))
    gamma = np.clip(gamma, -delta + 1e-12, delta - 1e-12)
    weight = np.ones(beta.shape)
    start = beta < 2 * (delta - gamma)
    weight[start] = np.sin(np.pi / 4 * beta[start] / (delta - gamma[start])) ** 2
    end = beta > np.pi - 2 * gamma
    weight[end] = np.sin(np.pi / 4 * (np.pi + 2 * delta - beta[end]) / (delta + gamma[end])) ** 2
    return np.clip(weight, 0.0, 1.0)


def column_weights(geometry: ConeGeometry, short_scan=None) -> np.ndarray:
    """``(n_angles, n_cols)``: each projection's angular weight over its pitch at the
    isocentre (the filter's scale), times Parker's weight of each column for a short
    scan. ``short_scan``: None decides from the angles (:func:`is_short_scan`)."""
    if short_scan is None:
        short_scan = is_short_scan(geometry)
    elif not isinstance(short_scan, (bool, np.bool_)):
        raise TypeError(f"short_scan: expected True, False or None, got {short_scan!r}")
    n_cols = geometry.detector_shape[1]
    pitch = poses(geometry).pitch
    if not short_scan:
        weights = 0.5 * gap_weights(geometry.angles, 2 * np.pi)  # each line seen twice
        return np.repeat((weights / pitch)[:, None], n_cols, 1)
    turns = np.unwrap(geometry.angles)
    sense = 1.0 if turns[-1] >= turns[0] else -1.0
    beta = sense * (turns - turns[0])
    if beta.min() < -1e-9:
        raise ValueError("short_scan: the sources do not move one way around the axis; "
                         "Parker's weights need a short scan in one direction")
    span = beta.max()
    if span < np.pi * (1 - 1e-6):
        raise ValueError(f"short_scan: the scan covers {np.degrees(span):.1f} degrees, less "
                         "than the 180 FDK needs")
    gamma = sense * fan_angles(geometry)
    delta = (span - np.pi) / 2
    fan = np.abs(gamma).max()
    if delta < fan * (1 - 1e-6):
        warnings.warn(f"short_scan: the scan covers {np.degrees(span):.1f} degrees, less "
                      f"than 180 plus the fan angle ({np.degrees(2 * fan):.1f}): the outer "
                      "columns are reconstructed from incomplete data", stacklevel=3)
    order = np.argsort(beta, kind="stable")
    steps = np.diff(beta[order])
    ends = np.concatenate([[steps[0]], steps, [steps[-1]]]) if steps.size else np.array([np.pi] * 2)
    dbeta = np.empty_like(beta)
    dbeta[order] = 0.5 * (ends[:-1] + ends[1:])
    return (dbeta / pitch)[:, None] * parker(beta[:, None], gamma, max(delta, 1e-9))
