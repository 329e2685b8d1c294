"""Cone-beam geometry (pybp/geometry/cone.py: ASTRA's conventions, three constructors,
one matrix form) and the voxel-driven back-projection (pybp/cone/) against the float64
NumPy reference (pybp/cone/reference.py)."""

import numpy as np
import pytest

import pybp
from pybp.cone import reference
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry

EXACT = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=8, group=(16, 8))
EXACT_RTOL = 1e-5  # relative RMS, zero-mean data (the bound for the exact family)


def relative_rms(got, want):
    return float(np.sqrt(np.mean((np.asarray(got, np.float64) - want) ** 2) / np.mean(want ** 2)))


def circular(n_angles=16, detector=(24, 96), volume=(12, 40, 40), **options):
    options = dict(dict(pixel_size=(0.9, 0.8), source_origin=120.0, origin_detector=60.0,
                        voxel_size=1.0), **options)
    return ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_angles, endpoint=False), detector,
                                 volume_shape=volume, **options)


def astra_vectors(geometry_options, angles):
    """ASTRA cone_vec rows for a circular scan, written out from ASTRA's definition."""
    so, od, (pr, pc) = (geometry_options[k] for k in ("source_origin", "origin_detector",
                                                      "pixel_size"))
    rows = []
    for t in angles:
        s, c = np.sin(t), np.cos(t)
        rows.append([s * so, -c * so, 0, -s * od, c * od, 0, c * pc, s * pc, 0, 0, 0, pr])
    return np.array(rows)


def ray_pixel(vector, point, detector_shape):
    """Where the ray from the source through ``point`` meets the detector, as (row,
    column) from the first pixel's centre: a line-plane intersection from the vectors
    alone (no matrix)."""
    src, d, u, v = (np.asarray(vector[3 * a:3 * a + 3]) for a in range(4))
    normal = np.cross(u, v)
    lam = normal @ (d - src) / (normal @ (point - src))
    hit = src + lam * (point - src) - d
    # Solve hit = a u + b v (u and v need not be orthogonal).
    a, b = np.linalg.lstsq(np.stack([u, v], 1), hit, rcond=None)[0]
    n_rows, n_cols = detector_shape
    return b + (n_rows - 1) / 2, a + (n_cols - 1) / 2


# ---- geometry ---------------------------------------------------------------------------
def test_matrices_project_as_the_rays_of_astra_vectors(rng):
    """Any trajectory: random sources, detector centres and (non-orthogonal) steps."""
    n = 5
    angles = rng.uniform(0, 2 * np.pi, n)
    src = np.stack([np.sin(angles) * 300, -np.cos(angles) * 300, rng.uniform(-20, 20, n)], 1)
    d = -src * 0.6 + rng.normal(0, 3, (n, 3))
    u = np.stack([np.cos(angles), np.sin(angles), rng.normal(0, 0.1, n)], 1) * 0.7
    v = np.stack([rng.normal(0, 0.1, n), rng.normal(0, 0.1, n), np.ones(n)], 1) * 0.6
    vectors = np.concatenate([src, d, u, v], 1)
    g = ConeGeometry.from_astra(vectors, (50, 70), (8, 10, 12), 2.0, volume_offset=(3, -4, 5))
    for p in range(n):
        r, c, w = reference.project_voxels(g, p)
        for k, j, i in [(0, 0, 0), (7, 9, 11), (3, 5, 2)]:
            point = (np.array([i, j, k]) - (np.array([12, 10, 8]) - 1) / 2) * 2.0 + (3, -4, 5)
            want = ray_pixel(vectors[p], point, (50, 70))
            np.testing.assert_allclose((r[k, j, i], c[k, j, i]), want, rtol=0, atol=1e-9)
    assert np.all(w > 0)


def test_astra_convention_of_a_circular_scan():
    """At angle 0 the source is at -y: +x lands on higher columns, +z on higher rows;
    the origin on the detector's centre, less detector_offset pixels (the detector
    moved by +2 rows and -3 columns sees the origin 2 rows lower and 3 columns higher)."""
    g = circular(n_angles=4, detector_offset=(2.0, -3.0))
    m = g.matrices[0]
    at = lambda x: (m @ np.append(x, 1))[:2] / (m @ np.append(x, 1))[2]  # noqa: E731
    centre = np.array([(96 - 1) / 2 + 3.0, (24 - 1) / 2 - 2.0])  # (column, row)
    np.testing.assert_allclose(at([0, 0, 0]), centre, atol=1e-9)
    assert at([1, 0, 0])[0] > centre[0] and at([0, 0, 1])[1] > centre[1]
    np.testing.assert_allclose(g.sources[0], [0, -120, 0], atol=1e-12)
    np.testing.assert_allclose(np.exp(1j * g.angles),
                               np.exp(1j * np.linspace(0, 2 * np.pi, 4, endpoint=False)), atol=1e-12)
    # w: depth over the isocentre's: 1 at the origin, (SOD + 60) / SOD on the detector.
    np.testing.assert_allclose((m @ [0, 60, 0, 1])[2], 180 / 120)


def test_three_constructors_one_geometry(rng):
    options = dict(pixel_size=(0.9, 0.8), source_origin=120.0, origin_detector=60.0)
    angles = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    a = circular()
    b = ConeGeometry.from_astra(astra_vectors(options, angles), (24, 96), (12, 40, 40), 1.0)
    c = ConeGeometry.from_matrices(a.matrices * rng.uniform(-3, 3, (16, 1, 1)), (24, 96),
                                   (12, 40, 40), 1.0)
    np.testing.assert_allclose(b.matrices, a.matrices, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c.matrices, a.matrices, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c.sources, a.sources, rtol=0, atol=1e-9)


def test_bad_geometries_name_the_argument():
    ok = dict(detector_shape=(8, 8), volume_shape=(4, 4, 4), voxel_size=1.0)
    good = circular(n_angles=2).matrices
    cases = [
        (lambda: ConeGeometry.from_matrices(np.zeros((2, 4, 3)), **ok), ValueError, "matrices"),
        (lambda: ConeGeometry.from_matrices(good * np.nan, **ok), ValueError, "matrices"),
        (lambda: ConeGeometry.from_matrices(np.zeros((2, 3, 4)), **ok), ValueError, "matrices"),
        (lambda: ConeGeometry.from_astra(np.zeros((2, 11)), **ok), ValueError, "vectors"),
        (lambda: ConeGeometry.from_astra([[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]], **ok),
         ValueError, "vectors"),  # the source in the detector's plane
        (lambda: circular(source_origin=0), ValueError, "source_origin"),
        (lambda: circular(origin_detector=-5), ValueError, "origin_detector"),
        (lambda: circular(pixel_size=(0.5, 0)), ValueError, "pixel_size"),
        (lambda: circular(voxel_size=-1), ValueError, "voxel_size"),
        (lambda: circular(volume=(4, 0, 4)), ValueError, "volume_shape"),
        (lambda: circular(detector=(4.5, 4)), TypeError, "detector_shape"),
        (lambda: circular(volume=(4, 300, 300)), ValueError, "volume_offset"),  # reaches the source
        (lambda: circular(volume_offset=(0, 0, 0, 0)), ValueError, "volume_offset"),
        (lambda: circular(voxel_size="big"), TypeError, "voxel_size"),
        (lambda: pybp.ConeBackprojector("geometry"), TypeError, "geometry"),
    ]
    for make, error, name in cases:
        with pytest.raises(error, match=name):
            make()


# ---- the NumPy reference ------------------------------------------------------------------
def test_reference_sampling_is_bilinear_with_zeros_beyond_the_edge():
    image = np.arange(12.0).reshape(3, 4) + 1
    r = np.array([0.0, 1.5, 2.0, -0.5, 2.5, -1.0, 0.25])
    c = np.array([0.0, 2.5, 3.0, 0.0, 1.0, 0.0, 3.5])
    want = [1.0, 9.5, 12.0, 0.5, 0.5 * 10, 0.0, 0.5 * 5.0]  # value 4 r + c + 1 inside
    np.testing.assert_allclose(reference.bilinear(image, r, c), want)


# ---- the device kernel ---------------------------------------------------------------------
@pytest.mark.parametrize("params", [
    ConeParams(voxels_per_item=1, projections_per_pass=1, group=(8, 4)),
    ConeParams(voxels_per_item=4, projections_per_pass=3, group=(16, 4)),
    ConeParams(voxels_per_item=16, projections_per_pass=8, group=(32, 8)),
])
def test_exact_backprojection_against_float64(cl_device, rng, params):
    """Zero-mean data on a detector 512 columns wide, the volume spread over it, an
    offset volume and a shifted detector; planes and projections that do not fill the
    last item or pass."""
    g = circular(n_angles=13, detector=(20, 512), volume=(11, 45, 47), pixel_size=0.5,
                 source_origin=200.0, origin_detector=100.0, voxel_size=3.5,
                 volume_offset=(2.0, -1.5, 0.7), detector_offset=(0.4, -3.2))
    r, c, _ = reference.project_voxels(g, 0)
    assert c.max() - c.min() > 400  # positions across the detector
    projections = rng.standard_normal((13, 20, 512)).astype(np.float32)
    want = reference.backproject(projections, g)
    got = pybp.cone_backproject(projections, g, params=params, device=cl_device)
    assert got.shape == g.volume_shape and got.dtype == np.float32
    assert relative_rms(got, want) < EXACT_RTOL


def test_a_kept_backprojector_and_its_errors(cl_device, rng):
    g = circular(n_angles=5, detector=(8, 16), volume=(4, 8, 8), pixel_size=2.0)
    projections = rng.standard_normal((5, 8, 16)).astype(np.float32)
    want = reference.backproject(projections, g)
    with pybp.ConeBackprojector(g, EXACT, device=cl_device) as bp:
        out = np.zeros(g.volume_shape, np.float64)
        assert bp(projections, out=out) is out
        assert relative_rms(out, want) < EXACT_RTOL
        assert relative_rms(bp(projections), want) < EXACT_RTOL  # the same buffers again
        with pytest.raises(ValueError, match="projections"):
            bp(projections[:, :, :8])
        with pytest.raises(ValueError, match="out"):
            bp(projections, out=np.zeros((4, 8, 9), np.float32))
    with pytest.raises(RuntimeError, match="closed"):
        bp(projections)


def test_what_the_device_cannot_hold_is_refused_by_name(cl_device):
    """Before OpenCL fails on it: a memory limit that holds no slab, a pass of
    projections over the device's buffers or constant memory, params of another type."""
    small = circular(n_angles=4, detector=(8, 16), volume=(4, 8, 8), pixel_size=2.0)
    for limit in (1000, 0, -5, float("nan"), True, "1G"):
        with pytest.raises(ValueError, match="memory_limit"):
            pybp.ConeBackprojector(small, memory_limit=limit, device=cl_device)
    with pytest.raises(ValueError, match="params.*projections_per_pass"):
        pybp.ConeBackprojector(small, params=ConeParams(projections_per_pass=10 ** 7),
                               device=cl_device)
    with pytest.raises(TypeError, match="params"):
        pybp.ConeBackprojector(small, params=dict(voxels_per_item=4), device=cl_device)


def test_voxel_sizes_are_checked_by_name():
    """voxel_size is a positive length or three of them (x, y, z); anything else is refused
    in one line naming it, for both whole-volume geometries."""
    angles = np.linspace(0, np.pi, 4)
    bad = [((1.0, 2.0), r"expected a number or three sides \(x, y, z\)"),
           ((1.0, -1.0, 1.0), "expected a positive length"), ((1.0, np.nan, 1.0), "contains NaN or Inf"),
           ("x", "expected real numbers")]
    for value, message in bad:
        with pytest.raises((ValueError, TypeError), match=rf"^voxel_size: {message}"):
            ConeGeometry.circular(angles, (8, 8), 1.0, 50.0, 20.0, (4, 4, 4), value)
        with pytest.raises((ValueError, TypeError), match=rf"^voxel_size: {message}"):
            pybp.ParallelVectorGeometry.laminography(angles, 0.2, (8, 8), 1.0, (4, 4, 4), value)
    assert ConeGeometry.circular(angles, (8, 8), 1.0, 50.0, 20.0, (4, 4, 4),
                                 (0.5, 0.5, 0.5)).voxel_size == 0.5  # equal sides: a cube


def test_astra_dicts_in_one_line():
    """ASTRA's proj_geom and vol_geom dicts (as astra.create_proj_geom and
    create_vol_geom make them): a 'cone' geometry is circular()'s with ASTRA's numbers,
    its 'cone_vec' form the same matrices; the volume window gives the voxel size and
    the offset, and a window of other sides along x, y and z voxels of those sides;
    other types and missing keys are refused by name."""
    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    cone = {"type": "cone", "DetectorSpacingX": 0.9, "DetectorSpacingY": 0.8,
            "DetectorRowCount": 30, "DetectorColCount": 40, "ProjectionAngles": angles,
            "DistanceOriginSource": 60.0, "DistanceOriginDetector": 30.0}
    volume = {"GridRowCount": 20, "GridColCount": 24, "GridSliceCount": 16,
              "option": {"WindowMinX": -6, "WindowMaxX": 6, "WindowMinY": -5 + 1.5,
                         "WindowMaxY": 5 + 1.5, "WindowMinZ": -4, "WindowMaxZ": 4}}
    g = ConeGeometry.from_astra(cone, volume)
    want = ConeGeometry.circular(angles, (30, 40), (0.8, 0.9), 60.0, 30.0, (16, 20, 24), 0.5,
                                 volume_offset=(0, 1.5, 0))
    np.testing.assert_allclose(g.matrices, want.matrices, rtol=0, atol=1e-12)
    assert g.volume_shape == (16, 20, 24) and g.voxel_size == 0.5
    assert g.volume_offset == pytest.approx((0, 1.5, 0))
    vectors = {"type": "cone_vec", "DetectorRowCount": 30, "DetectorColCount": 40,
               "Vectors": astra_vectors(dict(source_origin=60.0, origin_detector=30.0,
                                             pixel_size=(0.8, 0.9)), angles)}
    np.testing.assert_allclose(ConeGeometry.from_astra(vectors, volume).matrices, want.matrices,
                               rtol=0, atol=1e-9)
    flat = dict(volume, option=dict(volume["option"], WindowMinZ=-8, WindowMaxZ=8))
    boxes = ConeGeometry.from_astra(cone, flat)
    assert boxes.voxel_size == (0.5, 0.5, 1.0) and boxes.volume_shape == (16, 20, 24)
    np.testing.assert_allclose(
        boxes.matrices, ConeGeometry.circular(angles, (30, 40), (0.8, 0.9), 60.0, 30.0,
                                              (16, 20, 24), (0.5, 0.5, 1.0),
                                              volume_offset=(0, 1.5, 0)).matrices, atol=1e-12)
    assert "voxels of 0.5 x 0.5 x 1 (x, y, z)" in repr(boxes)
    with pytest.raises(ValueError, match=r"^proj_geom: type 'parallel3d'"):
        ConeGeometry.from_astra(dict(cone, type="parallel3d"), volume)
    with pytest.raises(ValueError, match=r"^proj_geom: ASTRA's 'cone' geometry lacks "
                                         r"'DistanceOriginSource'"):
        ConeGeometry.from_astra({k: v for k, v in cone.items() if k != "DistanceOriginSource"},
                                volume)
    with pytest.raises(ValueError, match=r"^vol_geom: expected ASTRA's 3-D volume geometry"):
        ConeGeometry.from_astra(cone, {"GridRowCount": 20, "GridColCount": 24})
