"""``pybp reconstruct`` from files to files (pybp/io, pybp/cli/files.py) on files the
tests write: DXchange, NXtomo, TIFF folders and .npy of the 3-D phantom with flats,
darks, noise and the axis off the middle.

The reference is ``pybp.reconstruct`` of the same arrays in memory with the same centre:
a reader or writer may not change a value (float16 outputs: to half's rounding,
``HALF_RTOL``). The in-memory volume itself is checked against the analytic phantom
(``PHANTOM_RMS``: noise and the FBP's blur of its edges)."""

import json

import h5py
import numpy as np
import pytest
import tifffile

import pybp
from pybp import phantoms
from pybp.cli import commands as cli
from pybp.geometry.parallel import ParallelGeometry
from pybp.io import open_scan
from pybp.io.demo import phantom_scan, write_dxchange

N_BINS, N_ROWS, N_ANGLES, OFFSET = 96, 6, 120, 4.3
HALF_RTOL = 1e-3    # float16 slices: 2^-11 rounding
PHANTOM_RMS = 0.06  # of the phantom's unit value, inside its circle


@pytest.fixture(scope="module")
def scan():
    degrees, projections, flats, darks, center, scale = phantom_scan(
        N_BINS, N_ROWS, N_ANGLES, axis_offset=OFFSET, seed=11)
    return dict(degrees=degrees, projections=projections, flats=flats, darks=darks,
                center=center, scale=scale)


@pytest.fixture(scope="module")
def in_memory(scan, cl_device):
    return pybp.reconstruct(scan["projections"], np.deg2rad(scan["degrees"]), scan["flats"],
                            scan["darks"], center=scan["center"], device=cl_device,
                            progress=False)


def test_in_memory_volume_is_the_phantom(scan, in_memory):
    geometry = ParallelGeometry.create(N_BINS, np.deg2rad(scan["degrees"]), center=scan["center"])
    truth = phantoms.shepp_logan_3d_volume(geometry, N_ROWS) * scan["scale"]
    y, x = np.mgrid[:N_BINS, :N_BINS] - (N_BINS - 1) / 2
    inside = np.hypot(x, y) < 0.42 * N_BINS
    error = np.sqrt(np.mean((in_memory - truth)[:, inside] ** 2)) / scan["scale"]
    assert error < PHANTOM_RMS


def write_nxtomo(path, scan, entries=1):
    """NXtomo with darks, flats, projections and flats again in one dataset."""
    p, f, d = scan["projections"], scan["flats"], scan["darks"]
    data = np.concatenate([d, f[:5], p, f[5:]])
    keys = np.concatenate([np.full(len(d), 2), np.ones(5), np.zeros(len(p)),
                           np.ones(len(f) - 5)]).astype(np.int32)
    angles = np.concatenate([np.zeros(len(d) + 5), scan["degrees"], np.full(len(f) - 5, 180.0)])
    with h5py.File(path, "w") as h5:
        for k in range(entries):
            entry = h5.create_group(f"scan{k}")
            entry.attrs["NX_class"] = "NXentry"
            entry["definition"] = "NXtomo"
            detector = entry.create_group("instrument/detector")
            entry["instrument"].attrs["NX_class"] = "NXinstrument"
            detector.attrs["NX_class"] = "NXdetector"
            detector["data"] = data
            detector["image_key"] = keys
            sample = entry.create_group("sample")
            sample.attrs["NX_class"] = "NXsample"
            sample["rotation_angle"] = angles
            sample["rotation_angle"].attrs["units"] = "degree"


def write_tiffs(folder, frames):
    folder.mkdir()
    for i, frame in enumerate(frames):
        tifffile.imwrite(folder / f"p_{i}.tif", frame)


def make_input(kind, scan, tmp_path):
    """The scan as a file of ``kind``, and the options `pybp reconstruct` needs for it."""
    if kind == "dxchange":
        path = tmp_path / "scan.h5"
        write_dxchange(path, scan["projections"], scan["flats"], scan["darks"], scan["degrees"])
        return [str(path)]
    if kind == "nxtomo":
        path = tmp_path / "scan.nxs"
        write_nxtomo(path, scan)
        return [str(path)]
    if kind == "tiff":
        for name in ("projections", "flats", "darks"):
            write_tiffs(tmp_path / name, scan[name])
        np.savetxt(tmp_path / "angles.txt", scan["degrees"])
        return [str(tmp_path / "projections" / "p_*.tif"), "--flats", str(tmp_path / "flats"),
                "--darks", str(tmp_path / "darks"), "--angles", str(tmp_path / "angles.txt")]
    for name in ("projections", "flats", "darks"):
        np.save(tmp_path / f"{name}.npy", scan[name])
    return [str(tmp_path / "projections.npy"), "--flats", str(tmp_path / "flats.npy"),
            "--darks", str(tmp_path / "darks.npy"), "--angle-range", "180"]


def run(argv, capsys=None):
    """``pybp ARGV`` in this process (``reconstruct`` unless another command is named)."""
    if argv and argv[0] not in ("preview", "center"):
        argv = ["reconstruct"] + argv
    code = cli.main(argv)
    out = capsys.readouterr() if capsys is not None else None
    return code, out


def read_tiff_folder(folder, first=0, n=N_ROWS):
    return np.stack([tifffile.imread(folder / f"slice_{first + i:05d}.tif") for i in range(n)])


@pytest.mark.parametrize("kind", ["dxchange", "nxtomo", "tiff", "npy"])
def test_readers_give_the_arrays(kind, scan, tmp_path):
    argv = make_input(kind, scan, tmp_path)
    options = dict(zip(argv[1::2], argv[2::2]))
    with open_scan(argv[0], flats=options.get("--flats"), darks=options.get("--darks"),
                   angles=options.get("--angles"),
                   angle_range=float(options["--angle-range"]) if "--angle-range" in options
                   else None) as opened:
        np.testing.assert_array_equal(opened.projections[:, 2:5], scan["projections"][:, 2:5])
        np.testing.assert_array_equal(opened.flats[:, 1:3], scan["flats"][:, 1:3])
        np.testing.assert_array_equal(opened.darks[:, 0:6], scan["darks"])
        np.testing.assert_allclose(opened.angles, np.deg2rad(scan["degrees"]), rtol=1e-12)
        assert opened.shape == scan["projections"].shape


@pytest.mark.parametrize("kind", ["dxchange", "nxtomo", "tiff", "npy"])
def test_reconstruct_from_each_format(kind, scan, in_memory, tmp_path, cl_device, capsys):
    out = tmp_path / "slices"
    code, printed = run(make_input(kind, scan, tmp_path) +
                        ["-o", str(out), "--center", str(scan["center"]), "--device",
                         cl_device.name], capsys)
    assert code == 0, printed.err
    np.testing.assert_array_equal(read_tiff_folder(out), in_memory)
    assert "reconstructed 6 slices of 96 x 96" in printed.out
    stored = json.loads((out / "pybp.json").read_text())
    assert stored["center"] == round(scan["center"], 6) and stored["first_row"] == 0


def test_center_auto_is_found_and_stored(scan, tmp_path, cl_device, capsys):
    out = tmp_path / "slices"
    code, printed = run(make_input("dxchange", scan, tmp_path) +
                        ["-o", str(out), "--device", cl_device.name, "--rows", "1:4"], capsys)
    assert code == 0, printed.err
    stored = json.loads((out / "pybp.json").read_text())
    assert abs(stored["center"] - scan["center"]) < 0.25
    assert f"center: {stored['center']:.2f}" in printed.out
    description = json.loads(tifffile.TiffFile(out / "slice_00001.tif").pages[0].description)
    assert description["center"] == stored["center"]
    assert sorted(p.name for p in out.glob("slice_*")) == [f"slice_0000{r}.tif" for r in (1, 2, 3)]


@pytest.mark.parametrize("suffix, dtype", [(".h5", "float32"), (".npy", "float32"),
                                           (".h5", "float16"), ("", "float16")])
def test_outputs_and_dtypes(suffix, dtype, scan, in_memory, tmp_path, cl_device, capsys):
    out = tmp_path / f"rec{suffix}"
    code, printed = run(make_input("dxchange", scan, tmp_path) +
                        ["-o", str(out), "--center", str(scan["center"]), "--rows", "4:6",
                         "--dtype", dtype, "--device", cl_device.name], capsys)
    assert code == 0, printed.err
    if suffix == ".h5":
        with h5py.File(out) as f:
            got = f["slices"][()]
            assert f["slices"].chunks == (1, N_BINS, N_BINS) and list(f) == ["slices"]
            assert json.loads(f["slices"].attrs["pybp_metadata"])["first_row"] == 4
            assert "--rows 4:6" in f["slices"].attrs["command"]
    elif suffix == ".npy":
        got = np.load(out)
        assert json.loads(out.with_suffix(".json").read_text())["rows"] == [4, 6]
    else:
        got = read_tiff_folder(out, 4, 2)
    assert got.dtype == np.dtype(dtype)
    assert not list(tmp_path.glob("*.partial*"))
    want = in_memory[4:6]  # rows 4:6 group into kernel passes as they do in 0:6
    if dtype == "float32":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=HALF_RTOL, atol=HALF_RTOL * np.abs(want).max())


def test_preview_and_center_sweep(scan, tmp_path, cl_device, capsys):
    argv = make_input("dxchange", scan, tmp_path)
    out = tmp_path / "slices"
    code, printed = run(argv + ["-o", str(out), "--center", str(scan["center"]), "--preview",
                                str(tmp_path / "look.png"), "--device", cl_device.name], capsys)
    assert code == 0, printed.err
    assert (tmp_path / "look.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run(["preview", str(out)], capsys)[0] == 0
    assert (tmp_path / "slices-preview.png").exists()
    code, printed = run(argv + ["-o", str(tmp_path / "sweep"), "--center-sweep", "50:53:1",
                                "--device", cl_device.name], capsys)
    assert code == 0, printed.err
    names = sorted(p.name for p in (tmp_path / "sweep").iterdir())
    assert names == ["center_50.00.png", "center_51.00.png", "center_52.00.png",
                     "center_53.00.png", "contact_sheet.png"]
    code, printed = run(["center"] + argv, capsys)
    assert code == 0, printed.err
    assert abs(float(printed.out.split("center: ")[1].split()[0]) - scan["center"]) < 0.25


@pytest.mark.parametrize("chunks", [None, (1, N_ROWS, N_BINS), (1, 4, N_BINS), (4, 6, 96),
                                    "gzip"])
def test_hdf5_rows_read_straight_from_the_file(chunks, scan, tmp_path):
    """Unfiltered datasets in one piece or in chunks of whole rows are read at their
    byte offsets (readers.DirectRows); any other layout through h5py: the same values."""
    data = scan["projections"]
    with h5py.File(tmp_path / "s.h5", "w") as f:
        if chunks == "gzip":
            f.create_dataset("exchange/data", data=data, chunks=(1, N_ROWS, N_BINS),
                             compression="gzip")
        else:
            f.create_dataset("exchange/data", data=data, chunks=chunks)
        f["exchange/theta"] = scan["degrees"]
    with open_scan(tmp_path / "s.h5") as opened:
        direct = type(opened.projections).__name__ == "DirectRows"
        assert direct == (chunks in (None, (1, N_ROWS, N_BINS), (1, 4, N_BINS)))
        for rows in (slice(0, N_ROWS), slice(1, 5), slice(3, 4), slice(5, 9)):
            np.testing.assert_array_equal(opened.projections[:, rows], data[:, rows])
        np.testing.assert_array_equal(opened.projections[7], data[7])
        np.testing.assert_array_equal(opened.projections[2:9, 2:6], data[2:9, 2:6])


class _WithoutChunkIter:
    """An h5py object as an HDF5 before 1.14 gives it: no ``chunk_iter``."""

    def __init__(self, wrapped, **replaced):
        self.__dict__.update(replaced, _wrapped=wrapped)

    def __getattr__(self, name):
        if name == "chunk_iter":
            raise AttributeError(name)
        return getattr(self._wrapped, name)


def test_hdf5_chunk_offsets_without_chunk_iter(scan, tmp_path):
    """Where HDF5 has no ``chunk_iter``, the chunks' offsets are looked up one by one:
    the same rows."""
    from pybp.io.hdf5 import direct_rows

    data = scan["projections"]
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f.create_dataset("exchange/data", data=data, chunks=(1, 4, N_BINS))
    with h5py.File(tmp_path / "s.h5", "r") as f:
        dataset = f["exchange/data"]
        old = _WithoutChunkIter(dataset, id=_WithoutChunkIter(dataset.id))
        assert not hasattr(old.id, "chunk_iter")
        for source in (direct_rows(dataset), direct_rows(old)):
            np.testing.assert_array_equal(source[:, 1:7], data[:, 1:7])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_hdf5_output_writes_slices_at_their_chunks_bytes(dtype, tmp_path, monkeypatch):
    """The HDF5 output writes each slice straight to its chunk's bytes, pieces from
    several threads at once and out of order, never through h5py's dataset: h5py reads
    back the slices bit for bit, the same as a file written through h5py (where the
    chunks' bytes are not known); a file written in part, closed and resumed, too."""
    from concurrent.futures import ThreadPoolExecutor

    from pybp.io.output import hdf5 as output_hdf5
    from pybp.io.writers import open_output

    shape = (12, 24, 40)
    data = np.random.default_rng(3).uniform(-2, 2, shape).astype(np.float32)
    want = data.astype(dtype)
    written = []
    real_setitem = h5py.Dataset.__setitem__

    def setitem(dataset, key, value):
        written.append(dataset.name)
        real_setitem(dataset, key, value)
    monkeypatch.setattr(h5py.Dataset, "__setitem__", setitem)

    def write(name, spans, resume=False, finish=True):
        out = open_output(tmp_path / name, shape, dtype, resume=resume, overwrite=not resume)
        try:
            direct = out.fd is not None
            with ThreadPoolExecutor(4) as pool:
                for future in [pool.submit(out.__setitem__, slice(a, b), data[a:b])
                               for a, b in spans]:
                    future.result()
            if finish:
                out.finish()
        finally:
            out.close()
        return direct

    assert write("a.h5", [(9, 12), (0, 3), (6, 9), (3, 6)])
    assert "/slices" not in written and "/pybp_done" in written
    with h5py.File(tmp_path / "a.h5") as f:
        assert f["slices"].dtype == np.dtype(dtype) and list(f) == ["slices"]
        np.testing.assert_array_equal(f["slices"][()], want)
    assert write("b.h5", [(0, 5)], finish=False)  # interrupted: resumed below
    assert (tmp_path / "b.h5.partial").exists() and not (tmp_path / "b.h5").exists()
    assert write("b.h5", [(5, 12)], resume=True)
    with h5py.File(tmp_path / "b.h5") as f:
        np.testing.assert_array_equal(f["slices"][()], want)
    with monkeypatch.context() as patch:
        patch.setattr(output_hdf5, "slice_offsets", lambda data: None)
        assert not write("c.h5", [(0, 6), (6, 12)])
    assert "/slices" in written
    with h5py.File(tmp_path / "c.h5") as f:
        np.testing.assert_array_equal(f["slices"][()], want)


PHASE_ARGS = ["--phase", "paganin", "--delta-beta", "300", "--energy", "20", "--distance",
              "0.5", "--pixel-size", "2e-6"]


def test_rings_and_phase_from_the_command_line(scan, tmp_path, cl_device, capsys):
    """``--rings``, ``--ring-options`` and ``--phase paganin`` give the volume of
    ``pybp.reconstruct`` with the same options, store them, and --resume must repeat them."""
    argv = make_input("dxchange", scan, tmp_path) + ["--center", str(scan["center"]),
                                                     "--device", cl_device.name]
    out = tmp_path / "slices"
    code, printed = run(argv + ["-o", str(out), "--rings", "fw", "--ring-options",
                                "level=3,sigma=1.5"] + PHASE_ARGS, capsys)
    assert code == 0, printed.err
    phase = dict(delta_beta=300, energy=20, distance=0.5, pixel_size=2e-6)
    want = pybp.reconstruct(scan["projections"], np.deg2rad(scan["degrees"]), scan["flats"],
                            scan["darks"], center=scan["center"], device=cl_device,
                            progress=False, rings="fw", ring_options=dict(level=3, sigma=1.5),
                            phase=phase)
    got = read_tiff_folder(out)
    np.testing.assert_array_equal(got, want)
    # Both steps act: the volume is not the plain FBP's.
    plain = pybp.reconstruct(scan["projections"], np.deg2rad(scan["degrees"]), scan["flats"],
                             scan["darks"], center=scan["center"], device=cl_device,
                             progress=False, phase=phase)
    assert np.abs(got - plain).max() > 1e-3 * np.abs(plain).max()
    stored = json.loads((out / "pybp.json").read_text())
    assert (stored["rings"], stored["ring_options"]) == ("fw", dict(level=3, sigma=1.5))
    assert stored["phase"] == phase
    code, printed = run(argv + ["-o", str(out), "--resume", "--rings", "sort"] + PHASE_ARGS,
                        capsys)
    assert code == 2 and "rings='fw'" in printed.err
