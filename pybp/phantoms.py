"""Analytic phantoms: the Shepp-Logan phantom (2-D and stacked in 3-D) with its exact
Radon transform, a disc and a Gaussian with theirs, the 3-D phantom with its exact
cone-beam line integrals, and detector counts with noise, flats and darks made of line
integrals (the demo, the tests, the benchmarks, and checks of a geometry's units)."""

from __future__ import annotations

import numpy as np

from pybp.geometry.cone_weights import poses
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel import ParallelGeometry

SHEPP_LOGAN = (
    (1.00, 0.6900, 0.920, 0.00, 0.0000, 0),
    (-0.80, 0.6624, 0.874, 0.00, -0.0184, 0),
    (-0.20, 0.1100, 0.310, 0.22, 0.0000, -18),
    (-0.20, 0.1600, 0.410, -0.22, 0.0000, 18),
    (0.10, 0.2100, 0.250, 0.00, 0.3500, 0),
    (0.10, 0.0460, 0.046, 0.00, 0.1000, 0),
    (0.10, 0.0460, 0.046, 0.00, -0.1000, 0),
    (0.10, 0.0460, 0.023, -0.08, -0.6050, 0),
    (0.10, 0.0230, 0.023, 0.00, -0.6060, 0),
    (0.10, 0.0230, 0.046, 0.06, -0.6050, 0),
)


def _scaled_ellipses(radius, ellipses=None):
    for value, a, b, x0, y0, phi in SHEPP_LOGAN if ellipses is None else ellipses:
        yield value, a * radius, b * radius, x0 * radius, y0 * radius, np.deg2rad(phi)


def default_radius(geometry: ParallelGeometry) -> float:
    """The phantom's radius in the geometry's unit of length: 90% of half the detector."""
    return geometry.n_bins / 2.0 * 0.9 * geometry.pixel_size


def shepp_logan_radon(geometry: ParallelGeometry, radius=None, ellipses=None) -> np.ndarray:
    """Exact line integrals of the phantom (or of other ``ellipses``, rows as
    :data:`SHEPP_LOGAN`), sampled at each bin centre, any angles/centre, in the
    geometry's unit of length (``radius`` too: default :func:`default_radius`).

    A voxel offset ``(fx, fy)`` is the point ``(fx, -fy)`` voxels with y up, so the ray
    at bin ``h`` is ``s = x cos + y sin = (h - center) pixel_size``.
    """
    radius = default_radius(geometry) if radius is None else radius
    s = (np.arange(geometry.n_bins)[None, :] - geometry.center[:, None]) * geometry.pixel_size
    theta = geometry.angles[:, None]
    sinogram = np.zeros((geometry.n_angles, geometry.n_bins))
    ox = geometry.slice_offset[1] * geometry.voxel_size
    oy = -geometry.slice_offset[0] * geometry.voxel_size
    for value, a, b, x0, y0, phi in _scaled_ellipses(radius, ellipses):
        # The slice centre sits at (ox, oy) from the axis; the phantom is centred on it.
        t = s - ((x0 + ox) * np.cos(theta) + (y0 + oy) * np.sin(theta))
        width2 = (a * np.cos(theta - phi)) ** 2 + (b * np.sin(theta - phi)) ** 2
        inside = t ** 2 < width2
        chord = np.where(inside, np.sqrt(np.maximum(width2 - t ** 2, 0)), 0)
        sinogram += value * 2 * a * b * chord / width2
    return sinogram


def _supersampled(geometry: ParallelGeometry, supersample):
    """The x and y of ``supersample``^2 points in each voxel of a slice, about the axis."""
    fx, fy = geometry.pixel_offsets()
    o = (np.arange(supersample) + 0.5) / supersample - 0.5
    x = (fx[None, :, None, None] + o[None, None, None, :]) * geometry.voxel_size
    y = (fy[:, None, None, None] + o[None, None, :, None]) * geometry.voxel_size
    return x, y


def _bin_offsets(geometry: ParallelGeometry):
    return (np.arange(geometry.n_bins)[None, :] - geometry.center[:, None]) * geometry.pixel_size


def disc(geometry: ParallelGeometry, radius, value=1.0, supersample=8) -> np.ndarray:
    """A disc of ``value`` (per unit of length) and ``radius`` (in the geometry's length)
    about the axis, each voxel its covered share of ``supersample``^2 points."""
    x, y = _supersampled(geometry, supersample)
    return value * (x ** 2 + y ** 2 <= radius ** 2).mean(axis=(2, 3))


def disc_chords(geometry: ParallelGeometry, radius, value=1.0) -> np.ndarray:
    """The disc's exact line integrals at every bin centre, ``(n_angles, n_bins)``."""
    t = _bin_offsets(geometry)
    return value * 2 * np.sqrt(np.maximum(radius ** 2 - t ** 2, 0))


def gaussian(geometry: ParallelGeometry, sigma, supersample=4) -> np.ndarray:
    """exp(-r^2 / 2 sigma^2) about the axis, each voxel's mean of ``supersample``^2 points."""
    x, y = _supersampled(geometry, supersample)
    return np.exp(-(x ** 2 + y ** 2) / (2 * sigma ** 2)).mean(axis=(2, 3))


def gaussian_integrals(geometry: ParallelGeometry, sigma) -> np.ndarray:
    """The Gaussian's exact line integrals at every bin centre, ``(n_angles, n_bins)``."""
    t = _bin_offsets(geometry)
    return np.sqrt(2 * np.pi) * sigma * np.exp(-t ** 2 / (2 * sigma ** 2))


def shepp_logan_image(geometry: ParallelGeometry, radius=None, supersample=4, ellipses=None) -> np.ndarray:
    """The phantom on the slice grid: each voxel's mean over ``supersample``^2 points
    (``radius`` in the geometry's unit of length, as :func:`shepp_logan_radon`'s).

    Each row of sample points crosses an ellipse in one interval of columns, solved
    for exactly; the intervals' ends are marked and summed along the row, so 2048^2
    pixels take well under a second."""
    radius = default_radius(geometry) if radius is None else radius
    ny, nx = geometry.slice_shape
    ss = supersample
    x = ((np.arange(nx * ss) + 0.5) / ss - 0.5 - (nx - 1) / 2.0) * geometry.voxel_size
    y = -((np.arange(ny * ss) + 0.5) / ss - 0.5 - (ny - 1) / 2.0) * geometry.voxel_size
    # Per pixel row, the value steps where sample rows enter and leave each ellipse
    # (the sample rows of a pixel row summed: sums commute), added up along the row.
    ends = np.zeros((ny, nx * ss + 1))
    rows = np.arange(ny * ss) // ss
    for value, a, b, x0, y0, phi in _scaled_ellipses(radius, ellipses):
        # (u/a)^2 + (v/b)^2 <= 1 with u, v the offsets turned by phi, as a quadratic
        # A dx^2 + B dx dy + C dy^2 <= 1 in the offsets dx, dy from the centre.
        c, s_ = np.cos(phi), np.sin(phi)
        qa = (c / a) ** 2 + (s_ / b) ** 2
        qb = 2 * c * s_ * (1 / a ** 2 - 1 / b ** 2)
        qc = (s_ / a) ** 2 + (c / b) ** 2
        dy = y - y0
        disc = (qb * dy) ** 2 - 4 * qa * (qc * dy ** 2 - 1)
        inside = disc >= 0
        root = np.sqrt(np.where(inside, disc, 0))
        first = np.searchsorted(x, x0 + (-qb * dy - root) / (2 * qa), side="left")
        stop = np.searchsorted(x, x0 + (-qb * dy + root) / (2 * qa), side="right")
        inside &= stop > first
        np.add.at(ends, (rows[inside], first[inside]), value)
        np.add.at(ends, (rows[inside], stop[inside]), -value)
    return np.cumsum(ends[:, :-1], axis=1).reshape(ny, nx, ss).sum(axis=2) / ss ** 2


# A 3-D modified Shepp-Logan of ellipsoids with one axis along the rotation axis (z, up,
# detector rows): value, semi-axes a, b, c, centre x0, y0, z0, rotation about z (deg),
# in units of the phantom radius. Each detector row then sees a 2-D ellipse phantom.
SHEPP_LOGAN_3D = (
    (1.00, 0.6900, 0.920, 0.810, 0.00, 0.0000, 0.00, 0),
    (-0.80, 0.6624, 0.874, 0.780, 0.00, -0.0184, 0.00, 0),
    (-0.20, 0.1100, 0.310, 0.220, 0.22, 0.0000, 0.00, -18),
    (-0.20, 0.1600, 0.410, 0.280, -0.22, 0.0000, 0.00, 18),
    (0.10, 0.2100, 0.250, 0.410, 0.00, 0.3500, -0.15, 0),
    (0.10, 0.0460, 0.046, 0.050, 0.00, 0.1000, 0.25, 0),
    (0.10, 0.0460, 0.046, 0.050, 0.00, -0.1000, 0.25, 0),
    (0.10, 0.0460, 0.023, 0.050, -0.08, -0.6050, 0.00, 0),
    (0.10, 0.0230, 0.023, 0.020, 0.00, -0.6060, 0.00, 0),
    (0.10, 0.0230, 0.046, 0.020, 0.06, -0.6050, 0.00, 0),
)


def _row_ellipses(n_rows, row, radius, z_scale):
    """The 2-D ellipses where detector row ``row`` cuts the 3-D phantom: ``z`` runs up
    from the middle row, ``z_scale`` pixels of phantom height per pixel of row."""
    z = ((n_rows - 1) / 2.0 - row) * z_scale / radius
    for value, a, b, c, x0, y0, z0, phi in SHEPP_LOGAN_3D:
        cut = 1 - ((z - z0) / c) ** 2
        if cut > 0:
            shrink = np.sqrt(cut)
            yield value, a * shrink, b * shrink, x0, y0, phi


def _phantom_extent(geometry, n_rows, radius, z_scale):
    """The 3-D phantom's radius (default 90% of half the detector) and the length of its
    height per detector row (default: the rows span 80% of its height)."""
    radius = default_radius(geometry) if radius is None else radius
    return radius, 1.6 * radius / n_rows if z_scale is None else z_scale


def shepp_logan_3d_radon(geometry: ParallelGeometry, n_rows, radius=None, z_scale=None) -> np.ndarray:
    """Exact line integrals of the 3-D phantom, ``(n_angles, n_rows, n_bins)`` in the
    tomopy/DXchange layout, for the geometry's angles and axis. ``z_scale`` stretches the
    rows over the phantom's height (default: rows span 80% of it)."""
    radius, z_scale = _phantom_extent(geometry, n_rows, radius, z_scale)
    out = np.empty((geometry.n_angles, n_rows, geometry.n_bins))
    for row in range(n_rows):
        out[:, row] = shepp_logan_radon(geometry, radius,
                                        _row_ellipses(n_rows, row, radius, z_scale))
    return out


def shepp_logan_3d_volume(geometry: ParallelGeometry, n_rows, rows=None, radius=None, z_scale=None,
                          supersample=4) -> np.ndarray:
    """The 3-D phantom on the slice grid, one slice per detector row of ``rows``."""
    radius, z_scale = _phantom_extent(geometry, n_rows, radius, z_scale)
    rows = range(n_rows) if rows is None else rows
    return np.stack([shepp_logan_image(geometry, radius, supersample,
                                       _row_ellipses(n_rows, row, radius, z_scale))
                     for row in rows])


def _ellipsoids(radius):
    """The 3-D phantom's ellipsoids in world coordinates: value, semi-axes ``(3,)``,
    centre ``(3,)``, and the rotation about z (world to the ellipsoid's axes)."""
    for value, a, b, c, x0, y0, z0, phi in SHEPP_LOGAN_3D:
        t = np.deg2rad(phi)
        rotation = np.array([[np.cos(t), np.sin(t), 0], [-np.sin(t), np.cos(t), 0], [0, 0, 1]])
        yield value, np.array([a, b, c]) * radius, np.array([x0, y0, z0]) * radius, rotation


def cone_radius(geometry: ConeGeometry) -> float:
    """The default radius of the cone-beam phantom: 90% of half the volume's width in x
    and y, and no more than its height allows (the tallest ellipsoid reaches 0.81
    radius along z)."""
    nz, ny, nx = geometry.volume_shape
    sx, sy, sz = geometry.voxel_sizes
    return 0.45 * min(nx * sx, ny * sy, nz * sz / 0.81 * 0.9)


def shepp_logan_cone(geometry: ConeGeometry, radius=None) -> np.ndarray:
    """Exact line integrals of the 3-D Shepp-Logan phantom (semi-axes and centres in
    units of ``radius``, world coordinates: x, y, z as :class:`ConeGeometry` puts them,
    centred on the volume) along the ray from each source through each pixel centre:
    ``(n_angles, n_rows, n_cols)``, float64."""
    radius = cone_radius(geometry) if radius is None else radius
    f = poses(geometry)
    n_rows, n_cols = geometry.detector_shape
    r, c = np.meshgrid(np.arange(n_rows, dtype=float), np.arange(n_cols, dtype=float), indexing="ij")
    out = np.zeros((geometry.n_angles, n_rows, n_cols))
    centre = np.asarray(geometry.volume_offset)
    for p in range(geometry.n_angles):
        ray = f.first[p] + c[..., None] * f.u[p] + r[..., None] * f.v[p]
        ray /= np.linalg.norm(ray, axis=2, keepdims=True)
        for value, axes, middle, rotation in _ellipsoids(radius):
            # |(s + t d - m) R^T / axes| = 1: a t^2 + 2 b t + c = 0; the chord is in t.
            start = (rotation @ (geometry.sources[p] - centre - middle)) / axes
            direction = (ray @ rotation.T) / axes
            qa = np.einsum("...c,...c->...", direction, direction)
            qb = direction @ start
            qc = start @ start - 1
            discriminant = np.maximum(qb * qb - qa * qc, 0)
            out[p] += value * 2 * np.sqrt(discriminant) / qa
    return out


def shepp_logan_cone_volume(geometry: ConeGeometry, radius=None, planes=None,
                            supersample=2) -> np.ndarray:
    """The 3-D phantom of :func:`shepp_logan_cone` on the volume's grid, each voxel the
    mean of ``supersample``^3 points; z ``planes`` (a range; None: all)."""
    radius = cone_radius(geometry) if radius is None else radius
    nz, ny, nx = geometry.volume_shape
    planes = range(nz) if planes is None else planes
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    sx, sy, sz = geometry.voxel_sizes
    axis = lambda n, idx, s: ((np.asarray(idx, float)[:, None] + offsets[None, :])  # noqa: E731
                              .ravel() - (n - 1) / 2) * s
    offset = np.asarray(geometry.volume_offset)
    # each axis' points as the whole grid's would be: (c + o) - o, rounding and all
    fine_axes = [(axis(n, idx, s) + offset[i]) - offset[i] for i, (n, idx, s) in
                 enumerate(((nx, range(nx), sx), (ny, range(ny), sy), (nz, planes, sz)))]
    fine = np.zeros([len(a) for a in fine_axes[::-1]])
    for value, axes, middle, rotation in _ellipsoids(radius):
        # only the points of the ellipsoid's bounding box (those outside are outside):
        # the demo's 128^3 took 17.7 s, every point tested against every ellipsoid
        reach = np.sqrt(((rotation.T * axes) ** 2).sum(axis=1)) * (1 + 1e-9)
        box = [slice(*np.searchsorted(a, [m - r, m + r])) for a, m, r in
               zip(fine_axes, middle, reach)]
        if any(b.start >= b.stop for b in box):
            continue
        z, y, x = np.meshgrid(*[a[b] for a, b in zip(fine_axes[::-1], box[::-1])],
                              indexing="ij")
        local = ((np.stack([x, y, z], -1) - middle) @ rotation.T) / axes
        fine[box[2], box[1], box[0]] += value * (np.einsum("...c,...c->...", local, local) <= 1)
    ss = supersample
    return fine.reshape(len(planes), ss, ny, ss, nx, ss).mean(axis=(1, 3, 5))


def detector_counts(line_integrals, n_frames=10, flat=20000.0, dark=100.0, seed=0):
    """uint16 ``(projections, flats, darks)`` a detector records for ``line_integrals``
    ``(n_angles, n_rows, n_bins)``: counts between a dark and a flat level with Poisson
    noise (normal approximation), and ``n_frames`` noisy flats and darks."""
    rng = np.random.default_rng(seed)
    shape = line_integrals.shape[1:]
    counts = dark + (flat - dark) * np.exp(-line_integrals)
    noisy = lambda mean, size: np.clip(np.round(  # noqa: E731
        rng.normal(mean, np.sqrt(mean), size)), 0, 65535).astype(np.uint16)
    return noisy(counts, counts.shape), noisy(flat, (n_frames,) + shape), \
        noisy(dark, (n_frames,) + shape)
