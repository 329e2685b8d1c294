"""Geometry conventions (docs/design.md, section 1): orientation, axis, region of interest and
the angle weights of the FBP sum."""

import warnings

import numpy as np
import pytest
from conftest import assert_verified

import pybp
from pybp import phantoms
from pybp.geometry.angles import GAP_FACTOR
from pybp.geometry.parallel import Geometry


def test_skimage_radon_reconstructs_upright(cl_device):
    """A sinogram from skimage.transform.radon comes back as the image, not a flipped
    or rotated copy (odd size: skimage's centre n//2 equals ours, (n-1)/2)."""
    transform = pytest.importorskip("skimage.transform")
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
    return Geometry.create(10, angles).angle_weights()


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
    transform = pytest.importorskip("skimage.transform")
    n = 129
    angles = np.radians(np.arange(-60, 61, 1.0))
    geometry = Geometry.create(n, angles)
    sinogram = phantoms.shepp_logan_radon(geometry).astype(np.float32)
    ours = pybp.fbp(sinogram, angles, device=cl_device)
    theirs = transform.iradon(sinogram.T.astype(np.float64), theta=np.degrees(angles),
                              filter_name="ramp", output_size=n, circle=True)
    disk = np.hypot(*np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2)) < n / 2 - 1
    assert np.corrcoef(ours[disk], theirs[disk])[0, 1] >= 0.99
