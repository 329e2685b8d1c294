"""The ALU kernel (Sect. 6) and its modes, judged by the one rule (pybp.parallel.verify): exact
arithmetic, so 1e-5 relative RMS for linear interpolation, and nearest picks the
reference's bin except within 1e-4 bin of a boundary."""

import numpy as np
import pytest
from conftest import assert_verified, rotated_grid

import pybp
from pybp import phantoms
from pybp.parallel import reference, verify
from pybp.geometry.parallel import ParallelGeometry
from pybp.parallel.params import ROUNDINGS, SLICES_PER_PASS

N_BINS, N_ANGLES = 72, 50
ALU_SHAPES = [dict(square=64, items=256, items_per_row=32),   # n_q = 16
              dict(square=32, items=256, items_per_row=16),   # n_q = 4
              dict(square=32, items=128, items_per_row=8, cached_projections=7)]  # n_q = 8
CACHES = [("linear", "pair"), ("linear", "plain"), ("nearest", "plain")]
# Buffers and half storage are exercised with the first shape only: the cache reads
# whole texels whatever the shape.
LAYOUTS = ([(shape, "image", "float") for shape in range(len(ALU_SHAPES))]
           + [(0, "buffer", "float"), (0, "image", "half"), (0, "buffer", "half")])


@pytest.mark.parametrize("rounding,slices,interpolation,cache,shape,source,storage",
                         rotated_grid(ROUNDINGS, SLICES_PER_PASS, CACHES, LAYOUTS))
def test_alu_matches_reference(cl_device, rng, slices, rounding, interpolation, cache, shape,
                               source, storage):
    """Odd slice sizes and angle counts leave partial squares and partial rounds of
    cached projections. Every rounding meets every slice count, cache and layout; on a
    GPU each combination of them all (conftest.rotated_grid)."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, center=(N_BINS - 1) / 2 - 5.2, slice_shape=(61, 75),
                            device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                            precision=storage, kernel="alu",
                            overrides=dict(ALU_SHAPES[shape], rounding=rounding, cache=cache,
                                           source=source))
    assert_verified(bp(data), data, bp)


@pytest.mark.parametrize("rounding,slices,interpolation,cache,shape",
                         rotated_grid(["native", "fixed"], SLICES_PER_PASS, CACHES, [1, 2]))
def test_column_offsets_match_reference(cl_device, rng, slices, rounding, interpolation, cache,
                                        shape):
    """The h_x offset cache (Sect. 6.8), one offset per pixel column, changes only how a
    pixel's position is found: the same rule as the per-projection offset."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, center=(N_BINS - 1) / 2 + 4.7, slice_shape=(70, 45),
                            device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                            kernel="alu", overrides=dict(ALU_SHAPES[shape], rounding=rounding,
                                                         cache=cache, offset_cache="hx"))
    assert_verified(bp(data), data, bp)


@pytest.mark.parametrize("rounding", ["native", "fixed"])
@pytest.mark.parametrize("source", ["image", "buffer"])
@pytest.mark.parametrize("slices", [1, 4])
def test_oversampling_is_close_on_the_phantom(cl_device, slices, source, rounding):
    """Oversampling (Sect. 7.2) approximates linear interpolation at nearest's cost: on
    the FBP of the Shepp-Logan phantom it stays within the `oversample` tolerance of the
    exact result, and nearer it than nearest interpolation is by 3x."""
    n_bins = 255
    angles = np.linspace(0, np.pi, 256, endpoint=False)
    geometry = ParallelGeometry.create(n_bins, angles)
    stack = np.repeat(phantoms.shepp_logan_radon(geometry).astype(np.float32)[None], slices, 0)
    errors = {}
    for cache, interpolation in (("oversample", "linear"), ("plain", "nearest")):
        bp = pybp.Backprojector(n_bins, angles, device=cl_device, kernel="alu", filter="ramp",
                                slices_per_pass=slices, interpolation=interpolation,
                                overrides=dict(cache=cache, source=source, rounding=rounding))
        errors[cache] = reference.relative_rms(bp(stack), reference.fbp(stack, geometry))
    assert verify.rule_for(bp.params.with_(interpolation="linear", cache="oversample")) == "oversample"
    assert errors["oversample"] <= verify.TOLERANCES["oversample"]
    assert errors["oversample"] * 3 <= errors["plain"]


@pytest.mark.parametrize("texture_groups", [1, 4, 8])
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_hybrid_matches_reference(cl_device, rng, slices, interpolation, texture_groups):
    """Hybrid mode (Sect. 7.1): texture work-groups and ALU work-groups in one launch
    each reconstruct their squares; judged by the texture engine's rule."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, slice_shape=(150, 140), device=cl_device,
                            interpolation=interpolation, slices_per_pass=slices, kernel="alu",
                            overrides=dict(square=32, items_per_row=16,
                                           texture_groups=texture_groups))
    assert verify.rule_for(bp.params) in ("texture", "nearest")
    assert_verified(bp(data), data, bp)


@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_half_cache_keeps_half_data_exactly(cl_device, rng, slices, interpolation):
    """Half values in local memory (Sect. 6.7) hold half-storage data exactly."""
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
    bp = pybp.Backprojector(N_BINS, angles, slice_shape=(61, 75), device=cl_device,
                            interpolation=interpolation, slices_per_pass=slices, precision="half",
                            kernel="alu", overrides=dict(cache="plain", cache_storage="half"))
    assert_verified(bp(data), data, bp)
    with pytest.raises(ValueError, match="cache_storage"):
        pybp.Backprojector(N_BINS, angles, device=cl_device, kernel="alu",
                           overrides=dict(cache="plain", cache_storage="half"))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 3e4])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("slices", SLICES_PER_PASS)
def test_half_pair_cache_within_half_rule_of_float(cl_device, slices, rounding, scale):
    """Value and difference as halves side by side (issue 24's half fast path): the FBP
    of the phantom within 1e-3 relative RMS of the float64 reference of the float data
    (the ``half`` rule), at any data scale (the half scaling), and of float storage."""
    n_bins, n_angles = 127, 90
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    geometry = ParallelGeometry.create(n_bins, angles)
    data = scale * np.stack([np.roll(phantoms.shepp_logan_radon(geometry), 3 * s, axis=1)
                             for s in range(slices)]).astype(np.float32)
    options = dict(device=cl_device, filter="ramp", slices_per_pass=slices, kernel="alu")
    bp = pybp.Backprojector(n_bins, angles, precision="half", **options,
                            overrides=dict(cache="pair", cache_storage="half", rounding=rounding))
    assert verify.rule_for(bp.params) == "half"
    got = bp(data)
    assert_verified(got, data, bp, filter="ramp")
    exact = pybp.Backprojector(n_bins, angles, **options)(data)
    assert verify.judge_half(got, exact).passed


def test_alu_edges_and_region_of_interest(cl_device, rng):
    """Bins near the detector edges read zero, as the texture path's clamp; an off-centre
    region of interest reaches past them."""
    n_bins = 40
    angles = np.linspace(0, np.pi, 33, endpoint=False)
    data = rng.standard_normal((1, 33, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, slice_shape=(50, 70), slice_offset=(6.0, -9.5),
                            device=cl_device, kernel="alu", slices_per_pass=1)
    assert_verified(bp(data), data, bp)
