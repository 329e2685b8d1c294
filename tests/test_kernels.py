"""Every texture kernel x slices per pass x interpolation x storage x texel source,
judged against the float64 reference of the same formula by the one rule (pybp.parallel.verify)."""

import numpy as np
import pytest
from conftest import assert_verified

import pybp
from pybp.parallel.params import SLICES_PER_PASS, TEXTURE_KERNELS

N_BINS, N_ANGLES = 72, 50
VARIANTS = [(k, c) for k in TEXTURE_KERNELS for c in ("constant", "local") if c == "constant" or k == "multiproj"]


@pytest.mark.parametrize("source", ["image", "buffer"])
@pytest.mark.parametrize("storage", ["float", "half"])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
@pytest.mark.parametrize("kernel,constants", VARIANTS)
def test_kernel_matches_reference(cl_device, rng, kernel, constants, slices, interpolation,
                                  storage, source):
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))  # uneven steps
    center = (N_BINS - 1) / 2 + 3.3
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, center=center, slice_shape=(61, 75), device=cl_device,
                            interpolation=interpolation, slices_per_pass=slices,
                            precision=storage, kernel=kernel,
                            overrides=dict(constants=constants, source=source))
    if source == "image" and bp.params.source != "image":
        pytest.xfail(f"{bp.device.name} has no usable {storage} image with {slices} channels")
    assert bp.params.kernel == kernel and bp.params.slices_per_pass == slices
    assert_verified(bp(data), data, bp)


@pytest.mark.parametrize("storage", ["float", "half"])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("kernel,constants", VARIANTS)
def test_four_slices_in_two_images(cl_device, rng, kernel, constants, interpolation, storage):
    """Slices 0-1 and 2-3 in two texel rows (for GPUs where 128-bit texels filter slower)."""
    angles = np.linspace(0, np.pi, N_ANGLES, endpoint=False)
    data = rng.standard_normal((4, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, device=cl_device, interpolation=interpolation,
                            slices_per_pass=4, precision=storage, kernel=kernel,
                            overrides=dict(constants=constants, texel_rows=2))
    assert bp.params.texel_rows == 2
    # Two rows exist for 4 slices only: narrower passes are not planned, and a last
    # pass of 3 slices runs the 4-slice setting.
    assert set(bp.plan.passes) == {4} and set(bp.plan.unplanned) == {1, 2}
    assert "texel_rows" in bp.plan.unplanned[1]
    assert_verified(bp(data[:3]), data[:3], bp)


def test_two_slices_fall_back_to_four_channel_texels(cl_device):
    """PoCL has no CL_RG: two slices must still run, in RGBA texels or a buffer."""
    bp = pybp.Backprojector(32, np.linspace(0, np.pi, 16, endpoint=False), device=cl_device,
                            slices_per_pass=2)
    assert bp.params.texel_channels >= 2
    if (2, "float") not in bp.formats and bp.params.source == "image":
        assert bp.params.texel_channels == 4
