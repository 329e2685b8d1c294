"""What goes wrong with files: every mistake gives one line naming what to change and a
non-zero exit, nothing a user has is replaced, and an interrupted run (killed, Ctrl-C,
disk full) leaves only whole slices that ``--resume`` completes to the same volume."""

import errno
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import tifffile
from test_files import make_input, read_tiff_folder, run, scan, write_nxtomo  # noqa: F401

import pybp
from pybp.io import open_output
from pybp.io.demo import phantom_scan, write_dxchange
from pybp.io.writers import TiffSlices

LONG_ROWS = 48  # a run of one slice per chunk, long enough on PoCL to stop in the middle


def assert_one_line(capsys, code, *words):
    printed = capsys.readouterr()
    assert code == 2
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybp "), printed.err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_reader_errors_name_what_is_there(scan, tmp_path, capsys):  # noqa: F811
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["entry/images"] = np.zeros((3, 4, 5), np.uint16)
    assert_one_line(capsys, run([str(tmp_path / "other.h5"), "-o", str(tmp_path / "o")])[0],
                    "/exchange/data", "/entry/images (3, 4, 5) uint16")
    write_nxtomo(tmp_path / "two.nxs", scan, entries=2)
    assert_one_line(capsys, run([str(tmp_path / "two.nxs"), "-o", str(tmp_path / "o")])[0],
                    "2 NXtomo entries", "/scan0", "/scan1")
    argv = make_input("tiff", scan, tmp_path)
    no_angles = argv[:5]
    assert_one_line(capsys, run(no_angles + ["-o", str(tmp_path / "o")])[0], "--angles")
    np.savetxt(tmp_path / "short.txt", scan["degrees"][:-1])
    assert_one_line(capsys, run(no_angles + ["--angles", str(tmp_path / "short.txt"), "-o",
                                             str(tmp_path / "o")])[0], "119 angles", "120")
    # darks without flats (flats alone are counts above a dark of zero)
    assert_one_line(capsys, run(argv[:1] + argv[3:] + ["-o", str(tmp_path / "o")])[0],
                    "flats", "--flats")
    assert_one_line(capsys, run([str(tmp_path / "none.h5"), "-o", str(tmp_path / "o")])[0],
                    "does not exist")
    assert_one_line(capsys, run([str(tmp_path / "empty"), "-o", str(tmp_path / "o")])[0],
                    "does not exist")
    assert not (tmp_path / "o").exists()


def test_output_errors_before_any_work(scan, tmp_path, capsys):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + ["--center", str(scan["center"])]
    (tmp_path / "old").mkdir()
    tifffile.imwrite(tmp_path / "old" / "slice_00000.tif", np.ones((2, 2), np.float32))
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "old")])[0], "--overwrite",
                    "--resume")
    assert tifffile.imread(tmp_path / "old" / "slice_00000.tif").sum() == 4  # untouched
    (tmp_path / "rec.h5").write_bytes(b"precious")
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "rec.h5")])[0], "exists")
    assert (tmp_path / "rec.h5").read_bytes() == b"precious"
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "x"), "--overwrite",
                                        "--resume"])[0], "exclude")
    (tmp_path / "file").write_text("")
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "file" / "slices")])[0],
                    "is a file")
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "file")])[0], "is a file")
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "missing" / "r.h5")])[0],
                    "does not exist")
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "a.tif")])[0], "folder")
    with pytest.raises(OSError, match="free"):
        open_output(tmp_path / "huge", (10 ** 6, 10 ** 4, 10 ** 4))


def test_debug_shows_the_traceback(scan, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="does not exist"):
        run([str(tmp_path / "none.h5"), "-o", str(tmp_path / "o"), "--debug"])


def test_resume_must_match(scan, tmp_path, cl_device, capsys):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + ["-o", str(tmp_path / "s"), "--device",
                                                     cl_device.name, "--rows", "0:2"]
    assert run(argv + ["--center", "51.8"], capsys)[0] == 0
    assert_one_line(capsys, run(argv + ["--center", "50", "--resume"])[0], "center=51.8",
                    "--overwrite")
    code, printed = run(argv + ["--center", "51.8", "--resume"], capsys)
    assert code == 0 and "2 of 2 slices are already in" in printed.out
    assert "nothing to reconstruct: all 2 slices are in" in printed.out
    assert "GU/s" not in printed.out


def test_disk_full_leaves_whole_slices(scan, tmp_path, cl_device, capsys, monkeypatch):  # noqa: F811
    """A write that fails for want of space (injected after 3 slices) stops the run with
    one line; the slices before it are whole, and --resume completes the volume."""
    written, real_write = [], TiffSlices.write

    def write(self, index, image):
        if len(written) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(index)
        real_write(self, index, image)

    argv = make_input("dxchange", scan, tmp_path) + [
        "-o", str(tmp_path / "s"), "--device", cl_device.name, "--center", str(scan["center"]),
        "--chunk-slices", "1"]
    with monkeypatch.context() as patch:
        patch.setattr(TiffSlices, "write", write)
        line = assert_one_line(capsys, run(argv)[0], "disk is full", "--resume")
    assert "3 of 6 slices are complete" in line
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == \
        ["pybp.json", "slice_00000.tif", "slice_00001.tif", "slice_00002.tif"]
    assert run(argv + ["--resume"], capsys)[0] == 0
    want = pybp.reconstruct(scan["projections"], np.deg2rad(scan["degrees"]), scan["flats"],
                            scan["darks"], center=scan["center"], device=cl_device,
                            progress=False)
    np.testing.assert_array_equal(read_tiff_folder(tmp_path / "s"), want)


@pytest.fixture(scope="module")
def long_scan(tmp_path_factory, cl_device):
    """A DXchange file of LONG_ROWS rows and its volume reconstructed in one go."""
    degrees, projections, flats, darks, center, _ = phantom_scan(
        128, LONG_ROWS, 180, axis_offset=-3.1, seed=5)
    path = tmp_path_factory.mktemp("long") / "scan.h5"
    write_dxchange(path, projections, flats, darks, degrees)
    volume = pybp.reconstruct(projections, np.deg2rad(degrees), flats, darks, center=center,
                              device=cl_device, progress=False)
    return path, center, volume


def stop_in_the_middle(argv, folder, sig, total):
    """Start ``pybp reconstruct ARGV``, send ``sig`` once 2 of its ``total`` slices are on
    disk; return its exit code, its standard error and how many slices were there when
    the signal went. A run that ended before a look found 2, or whose look found all
    ``total`` (this process was not scheduled while the run wrote them), is started
    again from nothing, twice at most, since the signal must come in the middle; a run
    that was sent it in time and still wrote them all fails the caller's test, naming
    how many slices were there when the signal went."""
    for _ in range(3):
        shutil.rmtree(folder, ignore_errors=True)
        process = subprocess.Popen([sys.executable, "-m", "pybp", "reconstruct"] + argv,
                                   stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        deadline, seen = time.monotonic() + 120, None
        while time.monotonic() < deadline and process.poll() is None:
            found = len(list(folder.glob("slice_*.tif"))) if folder.is_dir() else 0
            if found >= 2:
                process.send_signal(sig)
                seen = found
                break
            time.sleep(0.002)
        _, err = process.communicate(timeout=60)
        if seen is not None and seen < total:
            return process.returncode, err, seen
    raise AssertionError(f"none of 3 runs was stopped in the middle of its {total} slices")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM],
                         ids=["killed", "ctrl-c", "sigterm"])
def test_interrupted_run_resumes_to_the_same_volume(long_scan, tmp_path, cl_device, sig):
    """SIGTERM as Ctrl-C, with status 143 (it ended with no message)."""
    path, center, volume = long_scan
    out = tmp_path / "slices"
    argv = [str(path), "-o", str(out), "--center", repr(center), "--chunk-slices", "1",
            "--device", cl_device.name, "--quiet"]
    code, err, seen = stop_in_the_middle(argv, out, sig, LONG_ROWS)
    done = sorted(out.glob("slice_*.tif"))
    assert 2 <= len(done) < LONG_ROWS, f"{len(done)} slices after a signal at {seen}: {err}"
    if sig in (signal.SIGINT, signal.SIGTERM):
        assert code == (130 if sig == signal.SIGINT else 143), err
        assert err.strip().splitlines()[-1].startswith(
            f"pybp reconstruct: interrupted after {len(done)} of {LONG_ROWS} slices")
        assert not list(out.glob(".*.partial"))
    else:
        assert code == -signal.SIGKILL
    for f in done:  # whole files: each one reads, and is the slice it names
        row = int(f.stem.split("_")[1])
        np.testing.assert_array_equal(tifffile.imread(f), volume[row])
    result = subprocess.run([sys.executable, "-m", "pybp", "reconstruct"] + argv + ["--resume"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not list(out.glob(".*.partial"))
    np.testing.assert_array_equal(read_tiff_folder(out, 0, LONG_ROWS), volume)


def slices_done(partial):
    """Slices a running pybp has recorded as written in its partial HDF5 file (0 while
    it cannot be read)."""
    try:
        with h5py.File(partial, "r", locking=False) as f:
            return int(f["pybp_done"][()].sum())
    except (OSError, KeyError):
        return 0


def test_interrupted_hdf5_resumes(long_scan, tmp_path, cl_device):
    path, center, volume = long_scan
    out = tmp_path / "rec.h5"
    argv = [str(path), "-o", str(out), "--center", repr(center), "--chunk-slices", "1",
            "--device", cl_device.name, "--quiet"]
    process = subprocess.Popen([sys.executable, "-m", "pybp", "reconstruct"] + argv,
                               stderr=subprocess.PIPE, text=True)
    partial = tmp_path / "rec.h5.partial"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if slices_done(partial) >= 2:  # its space is reserved at the start: ask the record
            process.send_signal(signal.SIGINT)
            break
        time.sleep(0.002)
    process.communicate(timeout=60)
    assert process.returncode == 130 and not out.exists() and partial.exists()
    with h5py.File(partial) as f:
        done = f["pybp_done"][()].astype(bool)
        assert 0 < done.sum() < LONG_ROWS
        np.testing.assert_array_equal(f["slices"][np.flatnonzero(done)], volume[done])
    result = subprocess.run([sys.executable, "-m", "pybp", "reconstruct"] + argv + ["--resume"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not partial.exists()
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["slices"][()], volume)


@pytest.mark.parametrize("options, words", [
    (["--rings", "sort", "--ring-options", "size=97"], ["--ring-options", "size 97", "96"]),
    (["--rings", "sort", "--ring-options", "size=4"], ["--ring-options", "odd"]),
    (["--rings", "fw", "--ring-options", "sigma=-1"], ["--ring-options", "sigma"]),
    (["--rings", "fw", "--ring-options", "levels=3"], ["--ring-options", "levels"]),
    (["--rings", "fw", "--ring-options", "level"], ["--ring-options", "KEY=VALUE"]),
    (["--ring-options", "size=5"], ["--ring-options", "--rings"]),
    (["--phase", "paganin", "--delta-beta", "0", "--energy", "20", "--distance", "0.5",
      "--pixel-size", "2e-6"], ["--delta-beta", "positive"]),
    (["--phase", "paganin", "--delta-beta", "100", "--energy", "20", "--distance", "-0.5",
      "--pixel-size", "2e-6"], ["--distance", "positive", "-0.5"]),
    (["--phase", "paganin", "--delta-beta", "100", "--energy", "20", "--distance", "0.5"],
     ["--pixel-size", "needed"]),
    (["--energy", "20"], ["--energy", "--phase paganin"]),
    (["--phase", "paganin", "--delta-beta", "100", "--energy", "20", "--distance", "0.5",
      "--pixel-size", "2e-6", "--no-log"], ["--phase", "--no-log"]),
], ids=["size-wider", "size-even", "sigma", "unknown", "no-value", "no-rings", "delta-beta",
        "distance", "missing", "stray", "no-log"])
def test_preprocessing_errors_name_the_option(options, words, scan, tmp_path, capsys):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + ["--center", str(scan["center"]), "-o",
                                                     str(tmp_path / "o")]
    assert_one_line(capsys, run(argv + options)[0], *words)
    assert not (tmp_path / "o").exists()
