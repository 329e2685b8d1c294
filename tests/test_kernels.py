"""Every texture kernel x slices per pass x interpolation x storage x texel source,
against the float64 reference of the same formula."""

import numpy as np
import pytest

import pybp
from pybp import reference
from pybp.params import ROUNDINGS, SLICES_PER_PASS, TEXTURE_KERNELS

N_BINS, N_ANGLES = 72, 50
VARIANTS = [(k, c) for k in TEXTURE_KERNELS for c in ("constant", "local") if c == "constant" or k == "multiproj"]


def check(result, want, params, interpolation, tolerance):
    if interpolation == "nearest":
        share = reference.mismatch_share(result, want)
        assert share <= reference.NEAREST_MISMATCH_SHARE, f"{params.key()}: {share:.2%} pixels differ"
    else:
        error = reference.relative_rms(result, want)
        assert error <= tolerance(params), f"{params.key()}: error {error:.2e}"


@pytest.mark.parametrize("source", ["image", "buffer"])
@pytest.mark.parametrize("storage", ["float", "half"])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
@pytest.mark.parametrize("kernel,constants", VARIANTS)
def test_kernel_matches_reference(cl_device, linear_tolerance, rng, kernel, constants, slices,
                                  interpolation, storage, source):
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
    got = bp(data)
    stored = data.astype(np.float16) if storage == "half" else data
    want = reference.backproject(stored, bp.geometry, interpolation)
    check(got, want, bp.params, interpolation, linear_tolerance)
    if storage == "half" and interpolation == "linear":
        # Design section 6: half storage stays within 1e-2 of the float result.
        assert reference.relative_rms(got, reference.backproject(data, bp.geometry)) <= reference.RTOL_HALF


@pytest.mark.parametrize("storage", ["float", "half"])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("kernel,constants", VARIANTS)
def test_four_slices_in_two_images(cl_device, linear_tolerance, rng, kernel, constants,
                                   interpolation, storage):
    """Slices 0-1 and 2-3 in two texel rows (for GPUs where 128-bit texels filter slower)."""
    angles = np.linspace(0, np.pi, N_ANGLES, endpoint=False)
    data = rng.standard_normal((4, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, device=cl_device, interpolation=interpolation,
                            slices_per_pass=4, precision=storage, kernel=kernel,
                            overrides=dict(constants=constants, texel_rows=2))
    assert bp.params.texel_rows == 2
    got = bp(data[:3])  # a last pass of 3 slices runs the 4-slice setting
    stored = data[:3].astype(np.float16) if storage == "half" else data[:3]
    check(got, reference.backproject(stored, bp.geometry, interpolation), bp.params,
          interpolation, linear_tolerance)


ALU_SHAPES = [dict(square=64, items=256, items_per_row=32),   # n_q = 16
              dict(square=32, items=256, items_per_row=16),   # n_q = 4
              dict(square=32, items=128, items_per_row=8, cached_projections=7)]  # n_q = 8


@pytest.mark.parametrize("source", ["image", "buffer"])
@pytest.mark.parametrize("storage", ["float", "half"])
@pytest.mark.parametrize("shape", range(len(ALU_SHAPES)))
@pytest.mark.parametrize("interpolation,cache", [("linear", "pair"), ("linear", "plain"),
                                                 ("nearest", "plain")])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_alu_matches_reference(cl_device, rng, slices, rounding, interpolation, cache, shape,
                               storage, source):
    """ALU kernel (Sect. 6): exact arithmetic, so 1e-5 on every device; nearest picks
    the reference's bins. Odd slice sizes and angle counts leave partial squares and
    partial rounds of cached projections. (Buffers: one shape; the cache is the same.)"""
    if source == "buffer" and shape:
        pytest.skip("buffers are exercised with the first shape")
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, center=(N_BINS - 1) / 2 - 5.2, slice_shape=(61, 75),
                            device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                            precision=storage, kernel="alu",
                            overrides=dict(ALU_SHAPES[shape], rounding=rounding, cache=cache,
                                           source=source))
    got = bp(data)
    stored = data.astype(np.float16) if storage == "half" else data
    want = reference.backproject(stored, bp.geometry, interpolation)
    if interpolation == "nearest":
        assert reference.mismatch_share(got, want) <= reference.NEAREST_MISMATCH_SHARE
    else:
        assert reference.relative_rms(got, want) <= reference.RTOL_EXACT, bp.params.key()


@pytest.mark.parametrize("shape", [1, 2])
@pytest.mark.parametrize("interpolation,cache", [("linear", "pair"), ("linear", "plain"),
                                                 ("nearest", "plain")])
@pytest.mark.parametrize("rounding", ["native", "fixed"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_column_offsets_match_reference(cl_device, rng, slices, rounding, interpolation, cache,
                                        shape):
    """The h_x offset cache (Sect. 6.8), one offset per pixel column, changes only how a
    pixel's position is found: the same tolerances as the per-projection offset."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, center=(N_BINS - 1) / 2 + 4.7, slice_shape=(70, 45),
                            device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                            kernel="alu", overrides=dict(ALU_SHAPES[shape], rounding=rounding,
                                                         cache=cache, offset_cache="hx"))
    got = bp(data)
    want = reference.backproject(data, bp.geometry, interpolation)
    if interpolation == "nearest":
        assert reference.mismatch_share(got, want) <= reference.NEAREST_MISMATCH_SHARE
    else:
        assert reference.relative_rms(got, want) <= reference.RTOL_EXACT, bp.params.key()


@pytest.mark.parametrize("rounding", ["native", "fixed"])
@pytest.mark.parametrize("source", ["image", "buffer"])
@pytest.mark.parametrize("slices", [1, 4])
def test_oversampling_is_close_on_the_phantom(cl_device, slices, source, rounding):
    """Oversampling (Sect. 7.2) approximates linear interpolation at nearest's cost: on
    the FBP of the Shepp-Logan phantom it stays within RTOL_OVERSAMPLE of the exact
    result, and nearer it than nearest interpolation is by 3x."""
    from pybp.geometry import Geometry

    n_bins = 255
    angles = np.linspace(0, np.pi, 256, endpoint=False)
    geometry = Geometry.create(n_bins, angles)
    stack = np.repeat(reference.shepp_logan_radon(geometry).astype(np.float32)[None], slices, 0)
    want = reference.fbp(stack, geometry)
    errors = {}
    for cache, interpolation in (("oversample", "linear"), ("plain", "nearest")):
        bp = pybp.Backprojector(n_bins, angles, device=cl_device, kernel="alu", filter="ramp",
                                slices_per_pass=slices, interpolation=interpolation,
                                overrides=dict(cache=cache, source=source, rounding=rounding))
        errors[cache] = reference.relative_rms(bp(stack), want)
    assert errors["oversample"] <= reference.RTOL_OVERSAMPLE
    assert errors["oversample"] * 3 <= errors["plain"]


@pytest.mark.parametrize("texture_groups", [1, 4, 8])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_hybrid_matches_reference(cl_device, linear_tolerance, rng, slices, interpolation,
                                  texture_groups):
    """Hybrid mode (Sect. 7.1): texture work-groups and ALU work-groups in one launch
    each reconstruct their squares; the result is the reference's within the texture
    engine's tolerance (exact on CPU runtimes)."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, slice_shape=(150, 140), device=cl_device,
                            interpolation=interpolation, slices_per_pass=slices, kernel="alu",
                            overrides=dict(square=32, items_per_row=16,
                                           texture_groups=texture_groups))
    if bp.params.source != "image":
        pytest.skip("the hybrid mode needs images")
    got = bp(data)
    want = reference.backproject(data, bp.geometry, interpolation)
    if interpolation == "nearest":
        assert reference.mismatch_share(got, want) <= reference.NEAREST_MISMATCH_SHARE
    else:
        assert reference.relative_rms(got, want) <= linear_tolerance(bp.params)


@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_half_cache_keeps_half_data_exactly(cl_device, rng, slices, interpolation):
    """Half values in local memory (Sect. 6.7) hold half-storage data exactly."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, slice_shape=(61, 75), device=cl_device,
                            interpolation=interpolation, slices_per_pass=slices, precision="half",
                            kernel="alu", overrides=dict(cache="plain", cache_storage="half"))
    got = bp(data)
    want = reference.backproject(data.astype(np.float16), bp.geometry, interpolation)
    if interpolation == "nearest":
        assert reference.mismatch_share(got, want) <= reference.NEAREST_MISMATCH_SHARE
    else:
        assert reference.relative_rms(got, want) <= reference.RTOL_EXACT
    with pytest.raises(ValueError, match="cache_storage"):
        pybp.Backprojector(N_BINS, angles, device=cl_device, kernel="alu",
                           overrides=dict(cache="plain", cache_storage="half"))


def test_alu_edges_and_region_of_interest(cl_device, rng):
    """Bins near the detector edges read zero, as the texture path's clamp; an off-centre
    region of interest reaches past them."""
    n_bins = 40
    angles = np.linspace(0, np.pi, 33, endpoint=False)
    data = rng.standard_normal((1, 33, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, slice_shape=(50, 70), slice_offset=(6.0, -9.5),
                            device=cl_device, kernel="alu", slices_per_pass=1)
    want = reference.backproject(data, bp.geometry)
    assert reference.relative_rms(bp(data), want) <= reference.RTOL_EXACT


def test_two_slices_fall_back_to_four_channel_texels(cl_device):
    """PoCL has no CL_RG: two slices must still run, in RGBA texels or a buffer."""
    bp = pybp.Backprojector(32, np.linspace(0, np.pi, 16, endpoint=False), device=cl_device,
                            slices_per_pass=2)
    assert bp.params.texel_channels >= 2
    if (2, "float") not in bp.formats and bp.params.source == "image":
        assert bp.params.texel_channels == 4
