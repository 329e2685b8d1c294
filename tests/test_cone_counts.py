"""Cone beam's integer counts all the way to the device (pybp/cone/backproject.py: a
pass's counts of 8 or 16 bits go up as they are, into a buffer of their own, and the
pre-weighting converts them), read straight into the page-locked staging where the
source can (pybp/stream/sources.py's read_into: an h5py dataset's ``read_direct``, a
TIFF stack's). The volume is that of the same counts given as float32 (converted on
the host) bit for bit, in one piece and in slabs whose windows have odd rows."""

import h5py
import numpy as np
import pytest
import tifffile

import pybp
from pybp import phantoms
from pybp.cone.backproject import COUNTS, IMAGES
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry
from pybp.io.readers import TiffStack
from pybp.stream import sources

EXACT = ConeParams("exact", 4, 2, (8, 4))


def _case(rng, dtype=np.uint16):
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 14, endpoint=False), (41, 64),
                              pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                              volume_shape=(48, 40, 40), voxel_size=0.6)
    line = np.abs(rng.standard_normal((14, 41, 64))) * 0.1
    counts, flats, darks = phantoms.detector_counts(line.astype(np.float32), 3)
    top = np.iinfo(dtype).max
    scale = min(1.0, top / max(counts.max(), flats.max()))  # (uint8's counts fit)
    as_type = lambda a: np.round(np.asarray(a, np.float64) * scale).astype(dtype)  # noqa: E731
    return g, as_type(counts), as_type(flats), as_type(darks)


@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.uint8])
def test_integer_counts_go_up_as_integers_and_give_the_float_volume(cl_device, rng, dtype):
    """Counts of 16 and 8 bits travel as themselves (the executor's input is the counts
    buffer, its staging of their type) and give the volume of the same counts as
    float32 bit for bit, in one piece and in 4 slabs or more; 32-bit counts go as
    float32."""
    g, counts, flats, darks = _case(rng, dtype)
    for limit in (None, 2 * 48 * 40 * 40):
        with pybp.ConeBackprojector(g, EXACT, filter="ramp", flats=flats, darks=darks,
                                    memory_limit=limit, store=False, device=cl_device) as bp:
            assert limit is None or len(bp.plan.slabs) >= 4
            got = bp(counts)
            executor = bp._recipe.executor
            assert executor.layout.input == COUNTS
            assert executor.layout.input_dtype == np.dtype(dtype)
            assert executor.pieces_in.dtype == np.dtype(dtype)
            want = bp(counts.astype(np.float32))
            assert executor.layout.input == IMAGES
            assert np.array_equal(got, want)
            wide = bp(counts.astype(np.uint32))
            assert executor.layout.input == IMAGES and np.array_equal(wide, want)


def test_windows_are_read_straight_into_staging(cl_device, rng, tmp_path, monkeypatch):
    """From an h5py dataset of uint16 and from uncompressed TIFF files, each pass's
    window is read by ``read_direct`` into the staging (the TIFF frames' rows straight
    from the file, not through ``numpy.fromfile``); compressed TIFF files are decoded
    and copied. All give the array's volume bit for bit."""
    g, counts, flats, darks = _case(rng)
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f.create_dataset("data", data=counts, chunks=(1,) + counts.shape[1:])
    for k, frame in enumerate(counts):
        tifffile.imwrite(tmp_path / f"p_{k:02d}.tif", frame)
        tifffile.imwrite(tmp_path / f"z_{k:02d}.tif", frame, compression="zlib")
    calls = []
    real_h5 = h5py.Dataset.read_direct
    real_tiff = TiffStack.read_direct

    def h5_direct(self, dest, source_sel=None, dest_sel=None):
        calls.append(("h5py", dest.dtype))
        return real_h5(self, dest, source_sel, dest_sel)

    def tiff_direct(self, dest, source_sel, dest_sel):
        calls.append(("tiff", dest.dtype))
        return real_tiff(self, dest, source_sel, dest_sel)

    monkeypatch.setattr(h5py.Dataset, "read_direct", h5_direct)
    monkeypatch.setattr(TiffStack, "read_direct", tiff_direct)
    fromfile = np.fromfile
    monkeypatch.setattr(np, "fromfile", lambda *a, **k: calls.append(("fromfile",)) or
                        fromfile(*a, **k))
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", flats=flats, darks=darks,
                                memory_limit=2 * 48 * 40 * 40, store=False,
                                device=cl_device) as bp:
        want = bp(counts)
        assert not calls  # (an array is copied)
        with h5py.File(tmp_path / "p.h5", "r") as f:
            assert np.array_equal(bp(f["data"]), want)
        assert calls and set(calls) == {("h5py", np.dtype(np.uint16))}
        calls.clear()
        plain = TiffStack(sorted(tmp_path.glob("p_*.tif")), "input")
        assert np.array_equal(bp(plain), want)
        assert calls and set(calls) == {("tiff", np.dtype(np.uint16))}
        calls.clear()
        packed = TiffStack(sorted(tmp_path.glob("z_*.tif")), "input")
        assert np.array_equal(bp(packed), want)
        assert ("tiff", np.dtype(np.uint16)) in calls


def test_read_into_reads_straight_or_converts(tmp_path):
    """Rows of frames into the first rows of each image of a destination: straight
    from an h5py dataset of the destination's type, converted from one of another
    type, and from TIFF files; the rows after them untouched."""
    data = np.random.default_rng(3).integers(0, 60000, (6, 9, 5)).astype(np.uint16)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["d"] = data
    for k, frame in enumerate(data):
        tifffile.imwrite(tmp_path / f"t_{k}.tif", frame)
    stack = TiffStack(sorted(tmp_path.glob("t_*.tif")), "input")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        for source in (f["d"], stack, data):
            for dtype in (np.uint16, np.float32):
                out = np.full((3, 6, 5), 7, dtype)
                sources.read_into(out, source, slice(2, 5), slice(3, 8))
                assert np.array_equal(out[:, :5], data[2:5, 3:8].astype(dtype))
                assert (out[:, 5:] == 7).all()
