"""Geometry conventions (docs/design.md, section 1): orientation, axis, region of interest and
the angle weights of the FBP sum."""

import warnings

import numpy as np
import pytest
from conftest import assert_verified

import pybp
from pybp import phantoms
from pybp.geometry.angles import GAP_FACTOR
from pybp.geometry.parallel import ParallelGeometry


def test_skimage_radon_reconstructs_upright(cl_device):
    """A sinogram from skimage.transform.radon comes back as the image, not a flipped
    or rotated copy (odd size: skimage's centre n//2 equals ours, (n-1)/2)."""
    from skimage import transform
    n = 65
    image = np.zeros((n, n))
    image[14:24, 20:28] = 1.0  # an asymmetric mark: upper left
    image[40:44, 36:50] = 0.5  # and a bar lower right
    angles = np.linspace(0, np.pi, 90, endpoint=False)
    sinogram = transform.radon(image, theta=np.degrees(angles)).T.astype(np.float32)
    got = pybp.fbp(sinogram, angles, device=cl_device, slices_per_pass=1)

    def corr(a, b):
        return np.corrcoef(a.ravel(), b.ravel())[0, 1]

    assert corr(got, image) > 0.9
    for other in (image[::-1], image[:, ::-1], image.T, np.rot90(image)):
        assert corr(got, image) > corr(got, other) + 0.3


@pytest.mark.parametrize("case", ["off-centre", "per-angle", "non-square", "360", "roi"])
def test_geometry_cases_match_reference(cl_device, rng, case):
    n_bins, n_angles = 64, 40
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    options = {}
    if case == "off-centre":
        options["center"] = 20.25
    elif case == "per-angle":
        options["center"] = 31.5 + 2.5 * np.sin(np.linspace(0, 6, n_angles))
    elif case == "non-square":
        options["slice_shape"] = (37, 90)
    elif case == "360":
        angles = np.linspace(0, 2 * np.pi, n_angles, endpoint=False)
    elif case == "roi":
        options.update(slice_shape=(24, 20), slice_offset=(-9.0, 13.0))
    data = rng.standard_normal((3, n_angles, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=2, **options)
    got = bp(data)
    assert got.shape == (3,) + bp.geometry.slice_shape
    assert_verified(got, data, bp)


def test_roi_is_a_window_of_the_full_slice(cl_device, rng):
    n_bins = 48
    angles = np.linspace(0, np.pi, 30, endpoint=False)
    data = rng.standard_normal((30, n_bins)).astype(np.float32)
    full = pybp.backproject(data, angles, device=cl_device, overrides=dict(source="buffer"))
    # Rows 10..21 and columns 30..39 of the full slice: their centre is offset from
    # the full slice's centre (23.5, 23.5) by (-8, +11) pixels.
    roi = pybp.backproject(data, angles, device=cl_device, slice_shape=(12, 10),
                           slice_offset=(15.5 - 23.5, 34.5 - 23.5), overrides=dict(source="buffer"))
    np.testing.assert_allclose(roi, full[10:22, 30:40], rtol=1e-4, atol=1e-4)


def weights_of(angles):
    return ParallelGeometry.create(10, angles).angle_weights()


def test_even_scans_weigh_pi_over_n():
    for angles in (np.linspace(0, np.pi, 7, endpoint=False),
                   np.linspace(0, 2 * np.pi, 8, endpoint=False),
                   np.linspace(0, 2 * np.pi, 9, endpoint=False)):  # 360: interleaved halves
        np.testing.assert_allclose(weights_of(angles), np.pi / angles.size)
    uneven = np.array([0.0, 0.1, 0.5, 2.0])  # no gap wider than 4 typical steps
    assert weights_of(uneven).sum() == pytest.approx(np.pi)


def test_gaps_are_not_filled_by_their_neighbours():
    """A missing wedge or a run of lost projections counts as GAP_FACTOR typical steps:
    the projections beside it weigh (1 + GAP_FACTOR) / 2 steps, not half the gap."""
    step = np.radians(1.0)
    tilt = np.radians(np.arange(-60, 61, 1.0))  # +-60 degrees: a 60 degree wedge
    weights = weights_of(tilt)
    np.testing.assert_allclose(weights[1:-1], step)
    np.testing.assert_allclose(weights[[0, -1]], step * (1 + GAP_FACTOR) / 2)
    assert weights.sum() < np.radians(130)
    full = np.linspace(0, np.pi, 180, endpoint=False)
    lost = np.delete(full, np.arange(50, 62))  # 12 projections lost
    weights = weights_of(lost)
    assert weights.max() == pytest.approx(step * (1 + GAP_FACTOR) / 2)
    assert np.sum(weights > step * 1.01) == 2


def test_user_angle_weights_are_used(cl_device, rng):
    angles = np.linspace(0, np.pi, 40, endpoint=False)
    weights = rng.uniform(0.5, 1.5, 40) * np.pi / 40
    data = rng.standard_normal((40, 48)).astype(np.float32)
    bp = pybp.Backprojector(48, angles, device=cl_device, filter="ramp", kernel="alu",
                            angle_weights=weights)
    np.testing.assert_array_equal(bp.geometry.angle_weights(), weights)
    assert_verified(bp(data), data, bp, filter="ramp")
    for bad, word in ((weights[:5], "one weight per angle"), (-weights, ">= 0"),
                      (np.full(40, np.nan), "NaN")):
        with pytest.raises(ValueError, match=f"angle_weights: .*{word}"):
            pybp.Backprojector(48, angles, device=cl_device, filter="ramp", angle_weights=bad)


def test_angles_in_degrees_are_refused_everywhere(cl_device):
    """One rule for every call that takes angles: radians spanning more than a turn
    are refused (degrees passed as radians reconstruct garbage, silently: FDK then
    correlated 0.16 with the right volume); angle_unit="deg" converts them, "rad"
    takes several turns as they are."""
    degrees = np.arange(0, 360, 3.0)
    sinogram = np.zeros((len(degrees), 16), np.float32)
    cone = dict(detector_shape=(8, 16), pixel_size=1.0, source_origin=40, origin_detector=20,
                volume_shape=(8, 8, 8), voxel_size=1.0)
    calls = [lambda **k: pybp.fbp(sinogram, degrees, device=cl_device, **k),
             lambda **k: pybp.Backprojector(16, degrees, device=cl_device, **k),
             lambda **k: pybp.reconstruct(sinogram[:, None], degrees, log=False,
                                          device=cl_device, progress=False, **k),
             lambda **k: pybp.find_center(sinogram + np.arange(16, dtype=np.float32), degrees,
                                          refine=False, **k),
             lambda **k: pybp.ConeGeometry.circular(degrees, **cone, **k)]
    for call in calls:
        with pytest.raises(ValueError, match="angles: they span 357, more than one turn"):
            call()
        call(angle_unit="deg")  # the same angles said to be degrees
    turn = np.linspace(0, 2 * np.pi, 100)  # a full turn, endpoint included
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pybp.ConeGeometry.circular(turn, **cone)
        pybp.ConeGeometry.circular(np.concatenate([turn, turn + 2 * np.pi]), **cone,
                                   angle_unit="rad")
    with pytest.raises(ValueError, match="angle_unit: expected 'rad', 'deg' or None"):
        pybp.ConeGeometry.circular(turn, **cone, angle_unit="degrees")
    np.testing.assert_allclose(pybp.ConeGeometry.circular(degrees, **cone, angle_unit="deg")
                               .matrices, pybp.ConeGeometry.circular(np.radians(degrees), **cone)
                               .matrices)


def test_limited_angle_fbp_matches_iradon(cl_device):
    """FBP of a +-60 degree scan of the phantom correlates with scikit-image's iradon,
    whose weights are uniform, inside the reconstruction circle (over-weighting the ends
    of the wedge, as half-the-gap weights did, gave 0.72)."""
    from skimage import transform
    n = 129
    angles = np.radians(np.arange(-60, 61, 1.0))
    geometry = ParallelGeometry.create(n, angles)
    sinogram = phantoms.shepp_logan_radon(geometry).astype(np.float32)
    ours = pybp.fbp(sinogram, angles, device=cl_device)
    theirs = transform.iradon(sinogram.T.astype(np.float64), theta=np.degrees(angles),
                              filter_name="ramp", output_size=n, circle=True)
    disk = np.hypot(*np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2)) < n / 2 - 1
    assert np.corrcoef(ours[disk], theirs[disk])[0, 1] >= 0.99


# ---- ASTRA's parallel-beam dicts (ParallelGeometry.from_astra) --------------------------
# Each case is checked against ASTRA's own definitions written out here, not against
# pybp: a Gaussian blob placed in ASTRA's volume coordinates (3-D: x, y, z growing with
# column, row and slice; 2-D: y down the rows from WindowMaxY) and projected along the
# rays ASTRA's vectors define (pixel c at d + (c - (n - 1) / 2) u), against pybp's
# projection of the voxelised blob. Measured relative RMS 6.9e-3 to 1.2e-2 over rays above
# a fifth of the peak (PoCL, 2026-11-28: the footprints' boxes against a blob of 2.4 to 3
# voxels); the same blob under the other convention's angles, or mirrored, 0.58 to 0.79.
BLOB_RMS = 2e-2
SIGMA = 3.0  # the blob's sigma, in the volume's length


def blob_volume(shape, sizes, centre, dims, at, supersample=4):
    """A 3-D Gaussian of ``SIGMA`` at ``at`` (x, y, z) on ASTRA's grid ``shape``
    (``(nz,) ny, nx``): each voxel the mean of ``supersample``^2 points across its
    slice, at the slice's height."""
    ny, nx = shape[-2:]
    o = (np.arange(supersample) + 0.5) / supersample
    x = np.arange(nx)[None, :, None, None] + o[None, None, None, :] - nx / 2
    x = centre[0] + x * sizes[0]
    y = (np.arange(ny)[:, None, None, None] + o[None, None, :, None] - ny / 2) * sizes[1]
    y = centre[1] + (y if dims == 3 else -y)  # 2-D: row 0 at WindowMaxY
    planes = []
    heights = [0.0] if dims == 2 else \
        centre[2] + (np.arange(shape[0]) + 0.5 - shape[0] / 2) * sizes[2]
    for z in heights:
        r2 = (x - at[0]) ** 2 + (y - at[1]) ** 2 + (z - at[2]) ** 2
        planes.append(np.exp(-r2 / (2 * SIGMA ** 2)).mean(axis=(2, 3)))
    return np.stack(planes).astype(np.float32)


def blob_integrals(rows, n_rows, n_bins, at, supersample=8):
    """Line integrals of the blob along the rays of ASTRA vector ``rows`` (ray, d, u, v),
    each pixel their mean over ``supersample`` rays across its width (a row is its
    slice's plane): ``(n_angles, n_rows, n_bins)``."""
    ray, d, u, v = (rows[:, None, None, None, 3 * a:3 * a + 3] for a in range(4))
    o = (np.arange(supersample) + 0.5) / supersample - 0.5
    c = (np.arange(n_bins)[:, None] - (n_bins - 1) / 2 + o)[None, None, :, :, None]
    r = (np.arange(n_rows) - (n_rows - 1) / 2)[None, :, None, None, None]
    offset = d + c * u + r * v - np.asarray(at)
    along = (offset * ray).sum(-1) / np.linalg.norm(ray, axis=-1)
    rho2 = (offset ** 2).sum(-1) - along ** 2
    return np.sqrt(2 * np.pi) * SIGMA * np.exp(-rho2 / (2 * SIGMA ** 2)).mean(-1)


def parallel_dicts():
    """(name, proj_geom, vol_geom, blob centre) of each ASTRA type, with a window off
    the origin, detector columns of 1.5 (voxels of 1 or 1.25) and a shifted detector."""
    t = np.radians([0.0, 30.0, 45.0, 100.0, 160.0])
    window = {"WindowMinX": -14.0, "WindowMaxX": 16.0, "WindowMinY": -18.0, "WindowMaxY": 12.0}
    plane = {"GridRowCount": 30, "GridColCount": 30, "option": window}
    slab = {"GridRowCount": 24, "GridColCount": 24, "GridSliceCount": 3,
            "option": {"WindowMinX": -12.0, "WindowMaxX": 18.0, "WindowMinY": -18.0,
                       "WindowMaxY": 12.0, "WindowMinZ": -1.875, "WindowMaxZ": 1.875}}
    s, c, zero = np.sin(t), np.cos(t), 0 * t
    shift = 2.5  # pixels along u
    vec2 = np.stack([s, -c, shift * 1.5 * c, shift * 1.5 * s, 1.5 * c, 1.5 * s], 1)
    vec3 = np.stack([s, -c, zero, shift * 1.5 * c + 3 * s, shift * 1.5 * s - 3 * c, zero,
                     1.5 * c, 1.5 * s, zero, zero, zero, zero + 1.25], 1)
    yield ("parallel", {"type": "parallel", "DetectorWidth": 1.5, "DetectorCount": 32,
                        "ProjectionAngles": t}, plane, (3.0, -5.0, 0.0))
    yield ("parallel_vec", {"type": "parallel_vec", "DetectorCount": 32, "Vectors": vec2},
           plane, (3.0, -5.0, 0.0))
    yield ("parallel3d", {"type": "parallel3d", "DetectorSpacingX": 1.5,
                          "DetectorSpacingY": 1.25, "DetectorRowCount": 3,
                          "DetectorColCount": 32, "ProjectionAngles": t}, slab, (5.0, -6.0, 1.0))
    yield ("parallel3d_vec", {"type": "parallel3d_vec", "DetectorRowCount": 3,
                              "DetectorColCount": 32, "Vectors": vec3}, slab, (5.0, -6.0, 1.0))


@pytest.mark.parametrize("case", list(parallel_dicts()), ids=lambda case: case[0])
def test_parallel_geometry_from_astra_is_astras(cl_device, case):
    from pybp.geometry import astra
    name, proj_geom, vol_geom, at = case
    g = pybp.ParallelGeometry.from_astra(proj_geom, vol_geom)
    dims = 3 if name.startswith("parallel3d") else 2
    shape, sizes, centre = astra.volume_window(vol_geom, dims)
    rows, n_rows, n_bins = astra.parallel_vectors(proj_geom)
    assert g.pixel_size == pytest.approx(1.5) and g.voxel_size == pytest.approx(sizes[0])
    assert g.slice_shape == shape[-2:]
    volume = blob_volume(shape, sizes, centre, dims, at)
    want = blob_integrals(rows, n_rows, n_bins, at)
    inner = want > 0.2 * want.max()

    def error(geometry):
        slices = len(volume) if isinstance(geometry, pybp.ParallelGeometry) else None
        got = pybp.Projector(geometry, slices, device=cl_device).forward(volume)
        got = got.reshape(want.shape)
        return float(np.linalg.norm((got - want)[inner]) / np.linalg.norm(want[inner]))

    assert error(g) < BLOB_RMS, error(g)
    if dims == 3:
        # the same dicts as a ParallelVectorGeometry: the cone-beam pair's kernels at w = 1
        # (a box of a voxel's faces, its row the voxel's slice) are parallel beam's model
        vectors = pybp.ParallelVectorGeometry.from_astra(proj_geom, vol_geom)
        assert error(vectors) < BLOB_RMS, error(vectors)
        ours = pybp.Projector(g, slices=len(volume), device=cl_device).forward(volume)
        theirs = pybp.Projector(vectors, device=cl_device).forward(volume)
        assert np.linalg.norm(theirs - ours) < 1e-5 * np.linalg.norm(ours)
    # the other convention's angles, and the slices mirrored, are far off: the test sees both
    flipped = pybp.ParallelGeometry(-g.angles, g.n_bins, g.center, g.slice_shape,
                                    g.slice_offset, pixel_size=g.pixel_size,
                                    voxel_size=g.voxel_size, angle_unit="rad")
    assert error(flipped) > 0.3
    mirrored = pybp.ParallelGeometry(g.angles, g.n_bins, g.center, g.slice_shape,
                                     (-g.slice_offset[0], g.slice_offset[1]),
                                     pixel_size=g.pixel_size, voxel_size=g.voxel_size,
                                     angle_unit="rad")
    assert error(mirrored) > 0.3


def test_parallel_geometry_from_astra_matches_its_vectors():
    """A type and its vectors (as astra.geom_2vec writes them) give one geometry: the same
    angles (modulo a turn), centre, offset and sizes."""
    cases = {name: (p, v) for name, p, v, _ in parallel_dicts()}
    for plain, vec in (("parallel", "parallel_vec"), ("parallel3d", "parallel3d_vec")):
        a = pybp.ParallelGeometry.from_astra(*cases[plain])
        b = pybp.ParallelGeometry.from_astra(*cases[vec])
        turns = (a.angles - b.angles) / (2 * np.pi)
        np.testing.assert_allclose(turns, np.round(turns), atol=1e-12)
        np.testing.assert_allclose(b.center, a.center - 2.5, atol=1e-9)  # the shifted detector
        assert a.slice_offset == pytest.approx(b.slice_offset)


def test_parallel_vector_geometry_from_astra():
    """ASTRA's parallel3d and parallel3d_vec dicts and rows, and the laminography
    constructor: a parallel3d dict is its vectors' geometry, and laminography at a tilt
    of 0 is ASTRA's parallel3d; the matrices map a point to the pixel its ray meets (a
    point moved along the ray keeps its pixel); what is not such a geometry is refused
    by name."""
    from pybp.geometry.parallel_vectors import laminography_vectors
    cases = {name: (p, v) for name, p, v, _ in parallel_dicts()}
    plain = pybp.ParallelVectorGeometry.from_astra(*cases["parallel3d"])
    vec = pybp.ParallelVectorGeometry.from_astra(*cases["parallel3d_vec"])
    assert plain.volume_shape == vec.volume_shape == (3, 24, 24)
    assert plain.voxel_size == (1.25, 1.25, 1.25)[0] and plain.detector_shape == (3, 32)
    t = cases["parallel3d"][0]["ProjectionAngles"]
    flat = pybp.ParallelVectorGeometry.laminography(t, 0.0, (3, 32), (1.25, 1.5), (3, 24, 24),
                                                    1.25, volume_offset=(3.0, -3.0, 0.0))
    np.testing.assert_allclose(flat.matrices, plain.matrices, atol=1e-12)
    tilted = pybp.ParallelVectorGeometry.laminography([0, 70, 200], 30, (20, 24),
                                                      0.7, (8, 9, 10), (1.0, 1.1, 0.9),
                                                      detector_offset=(2, -3), angle_unit="deg")
    rows = laminography_vectors(np.radians([0, 70, 200]), np.radians(30), (0.7, 0.7), (2, -3))
    point = np.array([1.3, -2.0, 0.7, 1.0])
    moved = point + np.concatenate([5.0 * rows[1, :3], [0]])
    np.testing.assert_allclose(tilted.matrices[1] @ moved, tilted.matrices[1] @ point, atol=1e-12)
    # the detector's centre is its middle pixel, (2, -3) pixels from the origin's ray
    np.testing.assert_allclose(tilted.matrices[1] @ np.append(rows[1, 3:6], 1),
                               [(24 - 1) / 2, (20 - 1) / 2, 1], atol=1e-9)
    np.testing.assert_allclose(tilted.matrices[1] @ [0, 0, 0, 1],
                               [(24 - 1) / 2 + 3, (20 - 1) / 2 - 2, 1], atol=1e-9)
    assert np.allclose(np.linalg.norm(tilted.rays, axis=1), 1)
    assert "rays 30 degrees from the horizontal" in repr(tilted)
    bad = [(dict(cases["parallel3d"][0], type="cone"), cases["parallel3d"][1],
            r"^proj_geom: type 'cone'; .*\(cone beam: pybp\.ConeGeometry\.from_astra\)"),
           (cases["parallel"][0], cases["parallel"][1], r"^proj_geom: type 'parallel'; .*"
            r"\(2-D: pybp\.ParallelGeometry\.from_astra\)")]
    for proj_geom, vol_geom, message in bad:
        with pytest.raises(ValueError, match=message):
            pybp.ParallelVectorGeometry.from_astra(proj_geom, vol_geom)
    along = rows.copy()
    along[0, 6:9] = along[0, :3]  # columns along the rays
    with pytest.raises(ValueError, match=r"^vectors: projection 0: the rays run along the "
                                         r"detector's plane"):
        pybp.ParallelVectorGeometry.from_astra(along, (20, 24), (8, 9, 10), 1.0)
    with pytest.raises(ValueError, match=r"^tilt: expected an angle under a right angle"):
        pybp.ParallelVectorGeometry.laminography(t, 90, (3, 32), 1.0, (3, 24, 24), 1.0,
                                                 angle_unit="deg")
    with pytest.raises(TypeError, match=r"^from_astra: give parallel3d_vec rows"):
        pybp.ParallelVectorGeometry.from_astra(rows)


def test_parallel_geometry_from_astra_refuses_what_it_cannot_model():
    cases = {name: (p, v) for name, p, v, _ in parallel_dicts()}
    p3, slab = cases["parallel3d_vec"]
    p2, plane = cases["parallel"]
    bad = []
    tilted = p3["Vectors"].copy()
    tilted[1, 2] = 0.3  # a ray out of the plane
    bad.append((dict(p3, Vectors=tilted), slab, r"^proj_geom: projection 1: the rays leave "
                r"the horizontal plane \(laminography\)"))
    oblique = p3["Vectors"].copy()
    oblique[2, 6:8] += 0.2 * oblique[2, 0:2]
    bad.append((dict(p3, Vectors=oblique), slab, r"^proj_geom: projection 2: the detector's "
                r"columns are not at right angles"))
    leaning = p3["Vectors"].copy()
    leaning[0, 9] = 0.1
    bad.append((dict(p3, Vectors=leaning), slab, r"^proj_geom: projection 0: the detector's "
                r"row step v is not straight up"))
    wider = p3["Vectors"].copy()
    wider[3, 6:8] *= 1.1
    bad.append((dict(p3, Vectors=wider), slab, r"^proj_geom: detector columns of 1\.5 to 1\.65"))
    bad.append((dict(p3, DetectorRowCount=4), slab, r"^vol_geom: 3 slices for 4 detector rows"))
    taller = p3["Vectors"].copy()
    taller[:, 11] = 2.0
    bad.append((dict(p3, Vectors=taller), slab, r"^proj_geom: detector rows 2 high, voxels 1\.25"))
    raised = p3["Vectors"].copy()
    raised[:, 5] = 0.5
    bad.append((dict(p3, Vectors=raised), slab, r"^proj_geom: the detector's rows are not at"))
    bad.append((dict(p2, type="cone"), plane, r"^proj_geom: type 'cone'; .* \(cone beam: "
                r"pybp\.ConeGeometry\.from_astra\)"))
    bad.append(({k: v for k, v in p2.items() if k != "DetectorWidth"}, plane,
                r"^proj_geom: ASTRA's 'parallel' geometry lacks 'DetectorWidth'"))
    bad.append((p2, slab, r"^vol_geom: expected ASTRA's 2-D volume geometry"))
    bad.append((p2, dict(plane, option=dict(plane["option"], WindowMaxX=46.0)),
                r"^vol_geom: voxels of 2 x 1 \(x, y\)"))
    bad.append((dict(p3, Vectors=p3["Vectors"][:, :11]), slab,
                r"^proj_geom: Vectors: expected \(n_angles, 12\) rows"))
    for proj_geom, vol_geom, message in bad:
        with pytest.raises(ValueError, match=message):
            pybp.ParallelGeometry.from_astra(proj_geom, vol_geom)
