"""Rotation-axis estimation (pybp/parallel/centre.py) on scans of the 3-D phantom with flats,
darks and noise, the axis off the detector's middle: within ``CENTER_TOLERANCE``."""

import numpy as np
import pytest
from scipy import ndimage

import pybp
from pybp import phantoms
from pybp.parallel import centre
from pybp.geometry.parallel import ParallelGeometry
from pybp.io.demo import phantom_scan

CENTER_TOLERANCE = 0.25  # pixels (issue 9): Vo's method
REFINED_TOLERANCE = 0.1  # pixels (issue 20): refined by the least negative slice


@pytest.mark.parametrize("n_bins, span, offset, n_angles", [
    (96, 180, 4.3, 120), (96, 360, -5.6, 240),
    (128, 180, 20.2, 180),    # the object runs off the detector's right edge
    (256, 360, -80.6, 400),   # the axis 81 pixels from the middle, object cut on the left
])
def test_vo_finds_the_axis(n_bins, span, offset, n_angles):
    degrees, projections, flats, darks, center, _ = phantom_scan(
        n_bins, 6, n_angles, span, axis_offset=offset, seed=7)
    found = centre.estimate_center(projections, np.deg2rad(degrees), flats, darks)
    assert abs(found["vo"] - center) < CENTER_TOLERANCE, (found, center)
    assert found["row"] == 3
    if offset > 20 or offset < -80:  # the object runs off the detector: Vo's stands
        assert found["refined"] is None and found["center"] == found["vo"]
    else:
        assert found["center"] == found["refined"]
        assert abs(found["refined"] - center) < REFINED_TOLERANCE, (found, center)


def line_integrals(n_bins, n_angles, span, center, radius=None, noise=0.0, seed=0):
    """A sinogram of the 2-D phantom (exact line integrals, largest 2) with Gaussian
    noise of ``noise``; ``span`` degrees in ``n_angles`` even steps (the last one step
    short of ``span``)."""
    angles = np.deg2rad(np.arange(n_angles) * (span / n_angles))
    geometry = ParallelGeometry.create(n_bins, angles, center=center)
    sinogram = phantoms.shepp_logan_radon(geometry, radius=radius)
    sinogram *= 2 / sinogram.max()
    return sinogram + np.random.default_rng(seed).normal(0, noise, sinogram.shape), angles


@pytest.mark.parametrize("case", ["noise", "rings", "360", "blurred", "axis far"])
def test_refinement_to_a_tenth_of_a_pixel(case):
    """The least negative slice from a start 0.9 pixel off (as Vo's method was on a
    real scan), on noisy data, rings (two miscalibrated columns), a 360 degree scan,
    a detector blur, and an axis 20 pixels from the middle."""
    n_bins, center = 192, 95.5 + (-20.35 if case == "axis far" else 3.37)
    sinogram, angles = line_integrals(n_bins, 360 if case == "360" else 180,
                                      360 if case == "360" else 180, center, radius=60,
                                      noise=0.02)
    if case == "rings":
        sinogram[:, 60] += 0.05
        sinogram[:, 101] -= 0.04
    if case == "blurred":
        sinogram = ndimage.gaussian_filter1d(sinogram, 1.5, axis=1)
    refined = centre.refine_center(sinogram, angles, center + 0.9)
    assert abs(refined - center) < REFINED_TOLERANCE, refined - center
    assert abs(pybp.find_center(sinogram, angles) - center) < REFINED_TOLERANCE


def test_a_sample_wider_than_the_field_of_view_keeps_vo():
    sinogram, angles = line_integrals(128, 180, 180, 66.2, radius=70, noise=0.01)
    assert centre.truncated(sinogram)
    assert centre.refine_center(sinogram, angles, 66.0) is None
    assert abs(pybp.find_center(sinogram, angles) - 66.2) < CENTER_TOLERANCE


def test_auto_centre_in_the_api(cl_device):
    """``center="auto"`` in fbp and reconstruct is find_center's axis."""
    sinogram, angles = line_integrals(128, 120, 180, 66.3, noise=0.01)
    sinogram = sinogram.astype(np.float32)
    found = pybp.find_center(sinogram, angles, device=cl_device)
    want = pybp.fbp(sinogram, angles, center=found, device=cl_device)
    got = pybp.fbp(sinogram, angles, center="auto", device=cl_device)
    np.testing.assert_array_equal(got, want)
    degrees, projections, flats, darks, center, _ = phantom_scan(96, 4, 120, seed=2,
                                                                 axis_offset=4.3)
    found = pybp.find_center(projections, np.deg2rad(degrees), flats, darks, device=cl_device)
    assert abs(found - center) < CENTER_TOLERANCE
    volume = pybp.reconstruct(projections, np.deg2rad(degrees), flats, darks, center="auto",
                              device=cl_device, progress=False)
    np.testing.assert_array_equal(volume, pybp.reconstruct(
        projections, np.deg2rad(degrees), flats, darks, center=found, device=cl_device,
        progress=False))


@pytest.mark.parametrize("span", [180, 360])
def test_registration_cross_check(span):
    degrees, projections, flats, darks, center, _ = phantom_scan(
        128, 6, 2 * 128 if span == 360 else 128, span, axis_offset=-9.4, seed=3)
    found = centre.estimate_center(projections, np.deg2rad(degrees), flats, darks)
    assert abs(found["registration"] - center) < CENTER_TOLERANCE


def test_no_opposite_frames_no_registration():
    degrees, projections, flats, darks, center, _ = phantom_scan(96, 4, 60, 120.0, seed=1)
    found = centre.estimate_center(projections, np.deg2rad(degrees), flats, darks)
    assert found["registration"] is None


def test_search_window_bounds_the_answer():
    degrees, projections, flats, darks, center, _ = phantom_scan(96, 4, 120, seed=2,
                                                                 axis_offset=4.3)
    sinogram = centre.normalised_rows(projections, flats, darks, 1, 3).mean(axis=1)
    got = centre.vo_center(sinogram, np.deg2rad(degrees), search=(20.0, 40.0))
    assert 20.0 <= got <= 40.0
    with pytest.raises(ValueError, match="search"):
        centre.vo_center(sinogram, np.deg2rad(degrees), search=(20.2, 20.4))
