"""The float64 NumPy references of the cone-beam back-projection and of FDK
(docs/design.md, section 8): each voxel centre projected by its matrix, the projection
sampled bilinearly with zeros beyond its edge pixels, summed over projections; FDK
first weights and filters each projection (pybp/geometry/cone_weights.py) and weights each
sample by ``1 / w^2``."""

from __future__ import annotations

import numpy as np

from pybp.geometry import cone_weights as weights
from pybp.geometry.cone import ConeGeometry
from pybp.stages.filters import filter_numpy


def bilinear(image, r, c) -> np.ndarray:
    """``image`` ``(n_rows, n_cols)`` at rows ``r`` and columns ``c`` (float, from the
    first pixel's centre), as if surrounded by zeros: within one pixel of the edge the
    value falls linearly to zero, beyond it is zero."""
    n_rows, n_cols = image.shape
    padded = np.zeros((n_rows + 2, n_cols + 2))
    padded[1:-1, 1:-1] = image
    r0, c0 = np.floor(r), np.floor(c)
    inside = (r0 >= -1) & (r0 <= n_rows - 1) & (c0 >= -1) & (c0 <= n_cols - 1)
    fr, fc = np.where(inside, r - r0, 0.0), np.where(inside, c - c0, 0.0)
    a = np.where(inside, r0 + 1, 0).astype(np.intp)  # rows of the padded image
    b = np.where(inside, c0 + 1, 0).astype(np.intp)
    value = ((1 - fr) * ((1 - fc) * padded[a, b] + fc * padded[a, b + 1])
             + fr * ((1 - fc) * padded[a + 1, b] + fc * padded[a + 1, b + 1]))
    return np.where(inside, value, 0.0)


def project_voxels(geometry: ConeGeometry, p: int, planes=None):
    """Rows, columns and ``w`` where the voxel centres of z ``planes`` (a range; None:
    all) project in projection ``p``: arrays of the volume's (or planes') shape."""
    nz, ny, nx = geometry.volume_shape
    planes = range(nz) if planes is None else planes
    k, j, i = np.meshgrid(np.asarray(planes, np.float64), np.arange(ny, dtype=np.float64),
                          np.arange(nx, dtype=np.float64), indexing="ij")
    m = geometry.voxel_matrices()[p]
    cw, rw, w = (m[a, 0] * i + m[a, 1] * j + m[a, 2] * k + m[a, 3] for a in range(3))
    return rw / w, cw / w, w


def backproject(projections, geometry: ConeGeometry, planes=None, distance_weight=False) -> np.ndarray:
    """The sum over projections ``(n_angles, n_rows, n_cols)`` of each voxel's bilinear
    sample (times ``1 / w^2`` with ``distance_weight``), for z ``planes`` (a range; None:
    the whole volume), in float64."""
    nz, ny, nx = geometry.volume_shape
    planes = range(nz) if planes is None else planes
    out = np.zeros((len(planes), ny, nx))
    for p in range(geometry.n_angles):
        r, c, w = project_voxels(geometry, p, planes)
        sample = bilinear(np.asarray(projections[p], np.float64), r, c)
        out += sample / w ** 2 if distance_weight else sample
    return out


def forward_project(volume, geometry: ConeGeometry) -> np.ndarray:
    """Float64 forward projection, the transpose of :func:`backproject`'s bilinear
    sample (without weights): each voxel adds its value times each of its sample's four
    weights to the four pixels the sample reads, pixels beyond the detector dropped.
    ``volume`` ``(nz, ny, nx)`` to projections ``(n_angles, n_rows, n_cols)``."""
    values = np.asarray(volume, np.float64).ravel()
    n_rows, n_cols = geometry.detector_shape
    out = np.zeros((geometry.n_angles, n_rows + 2, n_cols + 2))  # a border of dropped pixels
    for p in range(geometry.n_angles):
        r, c, _ = (a.ravel() for a in project_voxels(geometry, p))
        r0, c0 = np.floor(r), np.floor(c)
        inside = (r0 >= -1) & (r0 <= n_rows - 1) & (c0 >= -1) & (c0 <= n_cols - 1)
        fr, fc, v = (r - r0)[inside], (c - c0)[inside], values[inside]
        a = (r0[inside] + 1).astype(np.intp)  # rows of the bordered image
        b = (c0[inside] + 1).astype(np.intp)
        size = (n_rows + 2) * (n_cols + 2)
        for da, db, weight in ((0, 0, (1 - fr) * (1 - fc)), (0, 1, (1 - fr) * fc),
                               (1, 0, fr * (1 - fc)), (1, 1, fr * fc)):
            out[p] += np.bincount((a + da) * (n_cols + 2) + b + db, weight * v,
                                  size).reshape(n_rows + 2, n_cols + 2)
    return out[:, 1:-1, 1:-1]


def filtered(projections, geometry: ConeGeometry, filter="ramp", padding="zero",
             short_scan=None) -> np.ndarray:
    """FDK's projections before the back-projection: times the cosine and each
    column's weight (angular, over the pitch, Parker's), then filtered along rows."""
    columns = weights.column_weights(geometry, short_scan)
    out = np.empty(np.shape(projections))
    for p in range(geometry.n_angles):
        weighted = np.asarray(projections[p], np.float64) * weights.cosine(geometry, p) * columns[p]
        out[p] = filter_numpy(weighted, filter, np.ones(len(weighted)), padding)
    return out


def fdk(projections, geometry: ConeGeometry, filter="ramp", padding="zero", short_scan=None,
        planes=None) -> np.ndarray:
    """FDK in float64: :func:`filtered`, then the back-projection weighted by ``1 / w^2``."""
    return backproject(filtered(projections, geometry, filter, padding, short_scan), geometry,
                       planes, distance_weight=True)
