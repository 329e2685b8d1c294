"""Rotation-axis estimation (pybp/centre.py) on scans of the 3-D phantom with flats,
darks and noise, the axis off the detector's middle: within ``CENTER_TOLERANCE``."""

import numpy as np
import pytest

from pybp import centre
from pybp.io.demo import phantom_scan

CENTER_TOLERANCE = 0.25  # pixels (issue 9)


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
    assert found["center"] == found["vo"] and found["row"] == 3


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
