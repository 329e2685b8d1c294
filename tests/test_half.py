"""Half storage at any data scale (pybp/stages/halfscale.py): each slice is scaled by a power of
two into half's range before packing and back after, so FBP and plain back-projection
stay within the `half` tolerance (1e-3) of float storage for data scaled anywhere from
1e-6 to 1e4; data whose results float32 cannot hold are refused before any work."""

import numpy as np
import pytest

import pybp
from pybp import phantoms
from pybp.parallel import verify
from pybp.stages import halfscale as scaling
from pybp.geometry.parallel import ParallelGeometry

SCALES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1.0, 1e2, 1e4)


@pytest.mark.parametrize("kernel", ["alu", "multiproj"])
@pytest.mark.parametrize("filter", ["ramp", None])
def test_half_storage_at_any_scale(cl_device, kernel, filter):
    """Eight slices scaled 1e-6..1e4, two passes of four: every slice keeps half's
    precision whatever its neighbours' scale (measured before scaling: 9.1e-3 at
    1e-3 and 0.22 at 1e-4, and NaN above 65504)."""
    n_bins, n_angles = (1024, 256) if kernel == "alu" else (256, 128)
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    phantom = phantoms.shepp_logan_radon(ParallelGeometry.create(n_bins, angles))
    stack = np.stack([phantom * s for s in SCALES]).astype(np.float32)
    results = {}
    for precision in ("float", "half"):
        bp = pybp.Backprojector(n_bins, angles, device=cl_device, filter=filter, kernel=kernel,
                                slices_per_pass=4, precision=precision)
        results[precision] = bp(stack)
    assert np.isfinite(results["half"]).all()
    for scale, half, full in zip(SCALES, results["half"], results["float"]):
        verdict = verify.judge_half(half, full)
        assert verdict.passed, f"scale {scale:g}: {verdict}"


def test_scales_are_powers_of_two_within_range():
    scales = scaling.half_scales([0.0, 1e-30, 1.0, 65504.0, 3e38])
    assert scales[0] == 1.0
    exponents = np.log2(scales)
    np.testing.assert_array_equal(exponents, np.round(exponents))  # exact scaling
    assert (np.array([1e-30, 1.0, 65504.0, 3e38]) * scales[1:] <= scaling.HALF_TARGET).all()
    assert (1 / scales).min() > np.finfo(np.float32).tiny  # the inverse is a normal float


def test_results_float32_cannot_hold_are_refused(cl_device):
    angles = np.linspace(0, np.pi, 64, endpoint=False)
    data = np.full((64, 32), 1e37, np.float32)
    for precision in ("float", "half"):
        bp = pybp.Backprojector(32, angles, device=cl_device, precision=precision)
        with pytest.raises(ValueError, match="sinograms: .*overflow float32"):
            bp(data)
    with pytest.raises(ValueError, match="beyond float32"):
        bp(np.full((64, 32), 1e39))
    # Large but representable: results are finite.
    assert np.isfinite(bp(np.full((64, 32), 1e30, np.float32))).all()
