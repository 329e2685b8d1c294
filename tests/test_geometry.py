"""Geometry conventions (design section 1), splitting of large work, outputs."""

import numpy as np
import pytest

import pybp
from pybp import reference
from pybp.geometry import Geometry


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
def test_geometry_cases_match_reference(cl_device, linear_tolerance, rng, case):
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
    want = reference.backproject(data, bp.geometry)
    assert reference.relative_rms(got, want) <= linear_tolerance(bp.params)


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


@pytest.mark.parametrize("kernel", ["standard", "multiproj"])
def test_split_pieces_add_up(cl_device, linear_tolerance, rng, kernel):
    """Work split into angle and detector pieces (device image or constant-memory
    limits) gives the unsplit result: zero borders make linear pieces sum exactly
    (to float rounding; hardware weights are quantized per piece on GPUs)."""
    n_bins, n_angles = 70, 45
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    data = rng.standard_normal((4, n_angles, n_bins)).astype(np.float32)
    whole = pybp.Backprojector(n_bins, angles, device=cl_device, kernel=kernel, slices_per_pass=4)
    split = pybp.Backprojector(n_bins, angles, device=cl_device, kernel=kernel, slices_per_pass=4,
                               piece_shape=(16, 25))
    assert len(split._pieces) == 3 * 3
    want = reference.backproject(data, whole.geometry)
    assert reference.relative_rms(split(data), whole(data)) <= linear_tolerance(split.params)
    assert reference.relative_rms(split(data), want) <= linear_tolerance(split.params)


def test_launch_texel_cap_splits_angles(cl_device, linear_tolerance, rng):
    """A cap on the texels one launch reads (to stay in L2) splits the angles evenly."""
    n_bins, n_angles = 64, 50
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    data = rng.standard_normal((2, n_angles, n_bins)).astype(np.float32)
    plain = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=2)
    cap = 20 * n_bins * plain.params.bytes_per_bin  # 20 projections' texels
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=2,
                            overrides=dict(launch_texel_bytes=cap))
    assert [piece.n_angles for piece in bp._pieces] == [17, 17, 16]
    want = reference.backproject(data, bp.geometry)
    assert reference.relative_rms(bp(data), want) <= linear_tolerance(bp.params)


def test_any_number_of_slices(cl_device, rng):
    """7 slices at 4 per pass: a pass of 4, then a last pass of 3."""
    n_bins = 40
    angles = np.linspace(0, np.pi, 24, endpoint=False)
    data = rng.standard_normal((7, 24, n_bins)).astype(np.float32)
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, slices_per_pass=4)
    got = bp(data)
    want = reference.backproject(data, bp.geometry)
    for i in range(7):
        assert reference.relative_rms(got[i], want[i]) < reference.RTOL_TEXTURE


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


def test_angle_weights_sum_to_pi():
    for angles in (np.linspace(0, np.pi, 7, endpoint=False),
                   np.linspace(0, 2 * np.pi, 8, endpoint=False),
                   np.array([0.0, 0.1, 0.5, 2.0])):
        weights = Geometry.create(10, angles).angle_weights()
        assert weights.sum() == pytest.approx(np.pi)
    equal = Geometry.create(10, np.linspace(0, 2 * np.pi, 8, endpoint=False)).angle_weights()
    np.testing.assert_allclose(equal, np.pi / 8)
