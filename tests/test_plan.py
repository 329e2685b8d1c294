"""The plan (pybp/parallel/plan.py): every pass width chosen and checked in the constructor,
work split into pieces within each width's caps, any number of slices, outputs; a call
that fails writes nothing."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_verified

import pybp
from pybp.parallel import reference, verify


@pytest.mark.parametrize("kernel", ["standard", "multiproj", "alu"])
def test_split_pieces_add_up(cl_device, rng, kernel):
    """Work split into angle and detector pieces (device image or constant-memory
    limits) gives the unsplit result: zero borders make linear pieces sum exactly
    (to float rounding; hardware weights are quantized per piece on GPUs)."""
    n_bins, n_angles = 70, 45
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    data = rng.standard_normal((4, n_angles, n_bins)).astype(np.float32)
    whole = pybp.Backprojector(n_bins, angles, device=cl_device, kernel=kernel, slices_per_pass=4)
    split = pybp.Backprojector(n_bins, angles, device=cl_device, kernel=kernel, slices_per_pass=4,
                               piece_shape=(16, 25))
    assert all(len(p.pieces) == 3 * 3 for p in split.plan.passes.values())
    assert_verified(split(data), data, split)
    difference = reference.relative_rms(split(data), whole(data).astype(np.float64))
    assert difference <= verify.TOLERANCES[verify.rule_for(split.params)]


def test_launch_texel_cap_splits_angles(cl_device, rng):
    """A cap on the texels one launch reads (to stay in L2) splits the angles evenly,
    each pass width within its own texel size."""
    n_bins, n_angles = 64, 50
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    data = rng.standard_normal((2, n_angles, n_bins)).astype(np.float32)
    plain = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=2)
    cap = 20 * n_bins * plain.params.bytes_per_bin  # 20 projections' texels at width 2
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=2,
                            overrides=dict(launch_texel_bytes=cap))
    assert [piece.n_angles for piece in bp.plan.passes[2].pieces] == [17, 17, 16]
    for width, plan in bp.plan.passes.items():
        assert plan.texel_bytes <= cap or len(plan.pieces) == n_angles
    assert_verified(bp(data), data, bp)


def test_any_number_of_slices(cl_device, rng):
    """7 slices at 4 per pass: a pass of 4, then a last pass of 3."""
    n_bins = 40
    angles = np.linspace(0, np.pi, 24, endpoint=False)
    data = rng.standard_normal((7, 24, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=4)
    got = bp(data)
    for i in range(7):
        assert_verified(got[i], data[i], bp)


def test_every_width_is_planned_in_the_constructor(cl_device):
    angles = np.linspace(0, np.pi, 24, endpoint=False)
    bp = pybp.Backprojector(40, angles, device=cl_device, slices_per_pass=4)
    assert set(bp.plan.passes) == {1, 2, 4}
    assert [bp.plan.width_for(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 4]
    for width, plan in bp.plan.passes.items():
        assert plan.params.slices_per_pass == width
        assert len(plan.tables) == len(plan.pieces)
        assert plan.tables[0].shape[1] == plan.params.constant_floats
    assert "1 slice(s)" in bp.plan.describe()
    # An override the full width cannot take fails here, not in a call.
    with pytest.raises(ValueError, match="texel_rows"):
        pybp.Backprojector(40, angles, device=cl_device, slices_per_pass=2,
                           overrides=dict(texel_rows=2))


def test_a_failing_call_writes_nothing(cl_device, rng):
    """Data are checked before the first pass: ``out`` keeps what it held."""
    n_bins = 32
    angles = np.linspace(0, np.pi, 20, endpoint=False)
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=1)
    out = np.full((3, n_bins, n_bins), 7.0, np.float32)
    data = rng.standard_normal((3, 20, n_bins)).astype(np.float32)
    data[2, 5, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        bp(data, out=out)
    data[2, 5, 5] = 3e37  # 20 angles of it overflow float32
    with pytest.raises(ValueError, match="overflow float32"):
        bp(data, out=out)
    assert (out == 7.0).all()


def test_out_accepts_numpy_memmap_and_hdf5(cl_device, rng, tmp_path):
    n_bins = 32
    angles = np.linspace(0, np.pi, 20, endpoint=False)
    data = rng.standard_normal((3, 20, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, device=cl_device)
    want = bp(data)
    mapped = np.lib.format.open_memmap(tmp_path / "v.npy", mode="w+", dtype=np.float32,
                                       shape=want.shape)
    assert bp(data, out=mapped) is mapped
    np.testing.assert_array_equal(mapped, want)
    single = np.zeros(want.shape[1:], np.float32)
    bp(data[1], out=single)  # a one-slice pass: another kernel setting, other rounding
    np.testing.assert_allclose(single, want[1], rtol=0, atol=1e-5 * np.abs(want).max())
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "v.h5", "w") as f:
        dataset = f.create_dataset("slices", shape=want.shape, dtype="f4")
        bp(data, out=dataset)
        np.testing.assert_array_equal(dataset[...], want)


def test_runner_does_not_import_the_tuner():
    """The profiler owns the choice of parameters; the runner never needs the tuner."""
    code = "import sys, pybp; assert 'pybp.tune.search' not in sys.modules, sorted(sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
