"""The float64 NumPy references of the cone-beam back-projection and of FDK
(docs/design.md, section 8): each voxel centre projected by its matrix, the projection
sampled bilinearly with zeros beyond its edge pixels, summed over projections; FDK
first weights and filters each projection (pybp/geometry/cone_weights.py) and weights each
sample by ``1 / w^2``. And of the matched pair's A and A^T (section 9): distance-driven,
each voxel's shadow a box on the detector."""

from __future__ import annotations

import numpy as np

from pybp.geometry import cone_weights as weights
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.volume import VolumeGeometry
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


def footprints(geometry: VolumeGeometry, p: int):
    """The matched pair's model (docs/design.md, section 9) in projection ``p``, float64,
    each an array of the volume's shape: ``(u0, u1, v0, v1, amplitude)``. A voxel's
    shadow is the box from ``u0`` to ``u1`` (columns) and ``v0`` to ``v1`` (rows), in
    pixels from the first pixel's edge (a pixel ``c`` spans ``c`` to ``c + 1``): along
    the columns, where the voxel's two faces across its horizontal axis more nearly at
    right angles to the ray from the source (x where the ray runs more along y, else y)
    project through its centre; along the rows, where its top and bottom faces do. Each
    ray through the box is as long as the voxel's chord along the other horizontal axis:
    the voxel's side along it over the cosine of the angle between the axis and the ray
    from the source to the voxel's centre (for voxels of other sides, x's faces where
    the ray runs more along y in voxels: their shadows are the wider). (A detector turned so that those faces' images run
    more along the other image axis: the other way about.)"""
    nz, ny, nx = geometry.volume_shape
    k, j, i = np.meshgrid(np.arange(nz, dtype=np.float64), np.arange(ny, dtype=np.float64),
                          np.arange(nx, dtype=np.float64), indexing="ij")
    m = geometry.voxel_matrices()[p]
    sx, sy, sz, point = geometry.voxel_rays()[p]  # (the rays from a point, or along -s)
    dx, dy, dz = i * point - sx, j * point - sy, k * point - sz
    lx, ly, lz = (d * side for d, side in zip((dx, dy, dz), geometry.voxel_sizes))
    # the ray runs more along y in voxels: the shadows of x's faces are wider, and they
    # make the box (a side s_x seen along (l_x, l_y) spans s_x |l_y|, l = d s)
    along_y = np.abs(dy) > np.abs(dx)

    def at(a, di, dj, dk):
        return (m[a, 0] * (i + di) + m[a, 1] * (j + dj) + m[a, 2] * (k + dk) + m[a, 3]) / (
            m[2, 0] * (i + di) + m[2, 1] * (j + dj) + m[2, 2] * (k + dk) + m[2, 3])

    half_x, half_y = np.where(along_y, 0.5, 0.0), np.where(along_y, 0.0, 0.5)
    ua, ub = at(0, -half_x, -half_y, 0), at(0, half_x, half_y, 0)
    va, vb = at(1, 0, 0, -0.5), at(1, 0, 0, 0.5)
    # a detector turned so that those faces' images run more along the other axis: the
    # other way about
    ta, tb = at(1, -half_x, -half_y, 0), at(1, half_x, half_y, 0)
    sa, sb = at(0, 0, 0, -0.5), at(0, 0, 0, 0.5)
    turned = np.abs(tb - ta) + np.abs(sb - sa) > np.abs(ub - ua) + np.abs(vb - va)
    ua, ub, va, vb = (np.where(turned, b, a) for a, b in ((ua, sa), (ub, sb), (va, ta), (vb, tb)))
    amplitude = np.sqrt(lx ** 2 + ly ** 2 + lz ** 2) / np.maximum(np.abs(dx), np.abs(dy))
    return (np.minimum(ua, ub) + 0.5, np.maximum(ua, ub) + 0.5, np.minimum(va, vb) + 0.5,
            np.maximum(va, vb) + 0.5, amplitude)


def _weights(low, high):
    """A box from ``low`` to ``high`` over pixels: ``(first, shares)``, its first pixel
    and its overlap with pixels ``first + m`` ``(span, ...)``."""
    first = np.floor(low)
    span = int(np.ceil(np.max(high - first))) + 1 if low.size else 1
    m = np.arange(span).reshape((span,) + (1,) * low.ndim)
    shares = np.maximum(0.0, np.minimum(high, first + m + 1) - np.maximum(low, first + m))
    return first.astype(np.int64), shares


def _pixels(geometry, p):
    """Each voxel's pixels in projection ``p`` with their weights: ``(flat, weights,
    inside)`` over the voxels, ``(span_v, span_u, voxels)`` each."""
    n_rows, n_cols = geometry.detector_shape
    u0, u1, v0, v1, amplitude = (a.ravel() for a in footprints(geometry, p))
    # (clipped to the detector: the pixels beyond it are dropped, those within keep
    # their shares)
    c0, cu = _weights(*np.clip([u0, u1], 0, n_cols))
    r0, cv = _weights(*np.clip([v0, v1], 0, n_rows))
    rows = r0 + np.arange(len(cv))[:, None, None]
    cols = c0 + np.arange(len(cu))[None, :, None]
    inside = (rows >= 0) & (rows < n_rows) & (cols >= 0) & (cols < n_cols)
    flat = np.where(inside, rows * n_cols + cols, 0)
    return flat, cv[:, None] * cu[None, :] * amplitude, inside


def forward_project(volume, geometry: VolumeGeometry) -> np.ndarray:
    """The matched pair's forward projection A in float64 (:func:`footprints`): each
    voxel adds its value times the ray length through it, times its box's share of each
    pixel, pixels beyond the detector dropped: line integrals in the geometry's length,
    each pixel the mean over its area. ``volume`` ``(nz, ny, nx)`` to projections
    ``(n_angles, n_rows, n_cols)``."""
    values = np.asarray(volume, np.float64).ravel()
    n_rows, n_cols = geometry.detector_shape
    out = np.zeros((geometry.n_angles, n_rows * n_cols))
    for p in range(geometry.n_angles):
        flat, weights, inside = _pixels(geometry, p)
        out[p] = np.bincount(flat[inside], (weights * values)[inside], n_rows * n_cols)
    return out.reshape(geometry.n_angles, n_rows, n_cols)


def transpose_project(projections, geometry: VolumeGeometry) -> np.ndarray:
    """A^T in float64, the exact transpose of :func:`forward_project`: projections
    ``(n_angles, n_rows, n_cols)`` to a volume ``(nz, ny, nx)``."""
    out = np.zeros(int(np.prod(geometry.volume_shape)))
    for p in range(geometry.n_angles):
        flat, weights, inside = _pixels(geometry, p)
        image = np.asarray(projections[p], np.float64).ravel()
        out += np.sum(np.where(inside, weights * image[flat], 0.0), axis=(0, 1))
    return out.reshape(geometry.volume_shape)


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
