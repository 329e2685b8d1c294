"""Exact at real sizes (docs/design.md, section 6): the ALU kernel, every rounding and cache, on
zero-mean data at detector widths where float32 positions from the slice corner went
wrong (1024 bins here; 2048 and 4096 on a GPU), with random angles over 180 and 360
degrees, an off-centre axis and a per-angle centre. Linear: 1e-5 relative RMS from the
float64 reference; nearest: the reference's bin except within 1e-4 bin of a boundary."""

import numpy as np
import pytest
from conftest import assert_verified, real_sizes

import pybp
from pybp.parallel.params import SLICES_PER_PASS

N_ANGLES = 64
N_ROWS = 32  # rows of the slice the reference computes: spread over the whole slice
VARIANTS = {
    "profile-linear": ("linear", {}),  # what this device's profile picks
    "pair-fixed": ("linear", dict(cache="pair", rounding="fixed")),
    "pair-native": ("linear", dict(cache="pair", rounding="native")),
    "plain-float": ("linear", dict(cache="plain", rounding="float")),
    "pair-fixed-buffer": ("linear", dict(cache="pair", rounding="fixed", source="buffer")),
    "profile-nearest": ("nearest", {}),
    "nearest-native": ("nearest", dict(rounding="native")),
    "nearest-fixed": ("nearest", dict(rounding="fixed")),
}


def scan(kind, n_bins, rng):
    """Random angles over 180 degrees with an off-centre axis, or over 360 degrees with
    a centre that moves per angle."""
    if kind == "180-off-centre":
        return np.sort(rng.uniform(0, np.pi, N_ANGLES)), (n_bins - 1) / 2 + 11.3
    angles = np.sort(rng.uniform(0, 2 * np.pi, N_ANGLES))
    return angles, (n_bins - 1) / 2 - 7.6 + 2.5 * np.sin(angles)


@pytest.mark.parametrize("kind", ["180-off-centre", "360-per-angle-centre"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
@pytest.mark.parametrize("n_bins", real_sizes())
def test_exact_at_real_sizes(cl_device, rng, n_bins, slices, variant, kind):
    interpolation, overrides = VARIANTS[variant]
    angles, center = scan(kind, n_bins, rng)
    data = rng.standard_normal((slices, N_ANGLES, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, center=center, device=cl_device, kernel="alu",
                            interpolation=interpolation, slices_per_pass=slices,
                            overrides=overrides)
    rows = np.linspace(0, n_bins - 1, N_ROWS).astype(int)
    assert_verified(bp(data), data, bp, rows=rows)
