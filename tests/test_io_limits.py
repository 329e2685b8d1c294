"""pybp bench --io (pybp/bench/io.py): the limits a run's data meets, measured on this
machine, and the lower bound they set on a case."""

import json
import os
import re
import threading
import time

import numpy as np
import pytest

from pybp.cli.commands import main
from pybp.bench import io
from pybp.io.output import disks
from pybp.io.writers import open_output

LIMITS = {  # GB/s, as measure() gives them (JSON keys are strings)
    "host_copies": {"1": 10.0, "8": 40.0},
    "transfers": {"devices": [dict(name="a", up=50.0, down=40.0),
                              dict(name="b", up=50.0, down=40.0)],
                  "all_up": 80.0, "all_down": 80.0},
    "files": {"read_cache": 20.0, "read_disk": 2.0, "write_disk_npy": 4.0,
              "write_disk_tiff": None},
}


def test_a_cases_bound_is_its_slowest_limit():
    """Seconds of each limit from the case's bytes, against float64 by hand: the
    largest is the bound; several devices share the bus at the rate of all at once (or
    the sum of each's, the lower) and the kernels; a format without its library has no
    write limit."""
    case = io.Traffic("c", read=40 * 10 ** 9, written=8 * 10 ** 9, copied=80 * 10 ** 9,
                   up=40 * 10 ** 9, down=8 * 10 ** 9, kernel_seconds=3.0)
    got = io.bounds(case, LIMITS)
    want = {"read": 2.0, "write": 2.0, "host copies": 2.0, "up": 0.8, "down": 0.2,
            "kernels": 3.0}
    for name, seconds in want.items():
        assert got[name] == pytest.approx(seconds), name
    assert got["bound"] == pytest.approx(3.0) and got["held_by"] == "kernels"
    cold = io.bounds(case, LIMITS, cached=False)  # the disk reads, then writes
    assert cold["read"] == pytest.approx(20.0) and cold["disk"] == pytest.approx(22.0)
    assert cold["held_by"] == "disk" and "disk" not in got
    two = io.bounds(io.Traffic("c", 0, 0, 0, up=160 * 10 ** 9, down=0, devices=2,
                            kernel_seconds=3.0), LIMITS)
    assert two["up"] == pytest.approx(2.0) and two["kernels"] == pytest.approx(1.5)
    tiff = io.bounds(io.Traffic("t", 10 ** 9, 10 ** 9, 0, 0, 0, format="tiff"), LIMITS)
    assert tiff["write"] is None and tiff["held_by"] == "read"


def test_the_standard_cases_count_their_bytes():
    cases = io.standard_cases(16, devices=2)
    assert len(cases) == 2 * len(io.FORMATS)
    for case in cases:
        assert case.read == case.up == 2 * 16 ** 3  # uint16 counts in, as they are
        assert case.written == case.down == 4 * 16 ** 3  # float32 out
        assert case.copied == case.read + case.written and case.devices == 2


def test_the_limits_are_measured_and_the_files_removed(cl_device, tmp_path):
    """Every limit is a positive speed on this machine; the files go, the folder stays."""
    copies = io.host_copies(1 << 20, repeats=1, threads=(1, 2))
    assert set(copies) == {1, 2} and all(rate > 0 for rate in copies.values())
    moves = io.transfers([cl_device, cl_device], 1 << 20, repeats=1)
    assert len(moves["devices"]) == 2 and moves["all_up"] > 0 and moves["all_down"] > 0
    assert all(d["up"] > 0 and d["down"] > 0 for d in moves["devices"])
    speeds = io.files(tmp_path, (4, 32, 32), repeats=1)
    assert speeds["bytes"] == 4 * 4 * 32 * 32 and speeds["filesystem"] != ""
    for name in ("read_cache", "read_disk", "write_cache_npy", "write_disk_npy"):
        assert speeds[name] > 0, name
    cores = os.cpu_count() or 1
    assert speeds["write_disk_npy_threads"] in {1, min(4, cores), cores, 2 * cores}
    each = speeds["write_disk_npy_by_threads"]  # every count measured, the best kept
    assert set(each) == {1, min(4, cores), cores, 2 * cores} and all(r > 0 for r in each.values())
    assert each[speeds["write_disk_npy_threads"]] == speeds["write_disk_npy"] == max(each.values())
    assert os.listdir(tmp_path) == []


def test_bench_io_reports_the_bounds_and_writes_the_limits(cl_device, tmp_path, capsys):
    """pybp bench --io: the limits, each standard case's bound and the limit holding
    it, the JSON a tuning script reads; a folder that is not one is refused by name."""
    limits = tmp_path / "limits.json"
    assert main(["bench", "--io", "--devices", cl_device.name, "--gib", "0.002",
                     "--size", "32", "--repeats", "1", "--folder", str(tmp_path),
                     "--json", str(limits)]) == 0
    out = capsys.readouterr().out
    assert "host copies (NumPy, GB/s by threads)" in out and "page-locked transfers" in out
    assert "parallel 32^3 to npy on 1 device(s): at least" in out and "held by" in out
    assert re.search(r"write npy: .* GB/s to the disk \(fsync, from \d+ threads; "
                     r"\d+: [0-9.]+(, \d+: [0-9.]+)*\)", out)
    kept = json.loads(limits.read_text())
    assert kept["files"]["read_cache"] > 0 and kept["transfers"]["devices"]
    case = io.standard_cases(32)[0]
    assert io.bounds(case, kept)["bound"] > 0
    assert main(["bench", "--io", "--folder", str(tmp_path / "none")]) == 2
    assert "--folder: " in capsys.readouterr().err
    assert np.isfinite(io.bounds(case, kept)["read"])


def test_writer_threads_are_kept_per_disk(tmp_path, monkeypatch):
    """What pybp bench --io found best is kept per mount point and file system type:
    read back for a path on that disk, merged with the other formats, and not taken for
    another file system mounted there or from a file that is not pybp's record."""
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    assert disks.writers(tmp_path / "v.npy", "npy") is None
    point, kind = disks.mount(tmp_path)
    assert point and tmp_path.resolve().as_posix().startswith(point.rstrip("/"))
    disks.record(tmp_path, {"npy": 3, "tiff": 5})
    disks.record(tmp_path / "any", {"hdf5": 2})
    assert [disks.writers(tmp_path / "new" / "v", form) for form in ("npy", "hdf5", "tiff")] \
        == [3, 2, 5]
    monkeypatch.setattr(disks, "mount", lambda path: (point, kind + "-other"))
    assert disks.writers(tmp_path / "v.npy", "npy") is None
    monkeypatch.undo()
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / disks.FILE).write_text('{"format": 1, "disks": {"%s": '
                                                 '{"filesystem": "%s", "writers": {"npy": 0}}}}'
                                                 % (point, kind))
    assert disks.writers(tmp_path / "v.npy", "npy") is None
    (tmp_path / "cache" / disks.FILE).write_text("not json")
    assert disks.writers(tmp_path / "v.npy", "npy") is None


def test_outputs_are_written_by_the_kept_writers(tmp_path, monkeypatch):
    """An output on a measured disk carries the kept count (a view of it too), and a
    folder of TIFF slices writes that many files at once; elsewhere, the defaults."""
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    shape = (6, 8, 8)
    plain = open_output(tmp_path / "plain.npy", shape)
    try:
        assert plain.writers is None
    finally:
        plain.close()
    disks.record(tmp_path, {"npy": 3, "tiff": 2})
    npy_out = open_output(tmp_path / "v.npy", shape)
    tiffs = open_output(tmp_path / "slices", shape)
    try:
        assert npy_out.writers == 3 and npy_out.view(2, 4).writers == 3
        assert tiffs.writers == 2 and tiffs.slices.writers == 2
        seen = set()
        write = tiffs.slices.write
        def recorded(index, image):
            seen.add(threading.current_thread().name)
            time.sleep(0.02)
            write(index, image)
        monkeypatch.setattr(tiffs.slices, "write", recorded)
        tiffs[0:6] = np.ones(shape, np.float32)
        assert len(seen) == 2
    finally:
        npy_out.close()
        tiffs.close()


def test_bench_io_keeps_the_writers_from_files_large_enough(cl_device, tmp_path, monkeypatch,
                                                            capsys):
    """pybp bench --io keeps the counts it found for the folder's disk where its files
    were of KEEP_BYTES or more, and says so; under that, it says it kept none."""
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "disk"
    folder.mkdir()
    args = ["bench", "--io", "--devices", cl_device.name, "--gib", "0.002", "--size", "32",
            "--repeats", "1", "--folder", str(folder), "--json", str(tmp_path / "l.json")]
    assert main(args) == 0
    assert "writer threads not kept for" in capsys.readouterr().out
    assert disks.writers(folder / "v.npy", "npy") is None
    monkeypatch.setattr(io, "KEEP_BYTES", 1)
    assert main(args[:-1] + [str(tmp_path / "l2.json")]) == 0  # --json replaces no file
    assert "writer threads kept for outputs under" in capsys.readouterr().out
    files = json.loads((tmp_path / "l2.json").read_text())["files"]
    assert disks.writers(folder / "v.npy", "npy") == files["write_disk_npy_threads"]


@pytest.mark.parametrize("kept, most, want", [(None, 16, 3), (4, 16, 4), (5, 3, 3)])
def test_pieces_written_at_once_follow_the_kept_writers(cl_device, tmp_path, monkeypatch,
                                                        kept, most, want):
    """Into a ``.npy`` on a disk with a kept writer count, the parallel stream writes
    that many downloaded pieces at once (at most MOST_WRITES; none kept: WRITES), and
    the volume is bit for bit the one made into an array. A folder of TIFF files
    writes its pieces' slices on threads of its own: WRITES pieces, whatever is kept."""
    import pybp
    from pybp.io.output.npy import NpyFile
    from pybp.stream import executor, jobs

    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jobs, "MOST_WRITES", most)
    monkeypatch.setattr(executor, "WRITES", 3)
    monkeypatch.setattr(jobs, "WRITES", 3)
    n, size, rows = 24, 32, 24
    monkeypatch.setattr(executor, "PIECE_BYTES", 4 * size * size)  # a slice a piece
    rng = np.random.default_rng(5)
    projections = rng.uniform(0, 1, (n, rows, size)).astype(np.float32)
    angles = np.linspace(0, np.pi, n, endpoint=False)
    want_volume = pybp.reconstruct(projections, angles, device=cl_device, progress=False,
                                   log=False)
    if kept is not None:
        disks.record(tmp_path, {"npy": kept, "tiff": 40})
    running, most_running, lock = [0], [0], threading.Lock()
    real = NpyFile.__setitem__

    def slow(self, key, slices):
        with lock:
            running[0] += 1
            most_running[0] = max(most_running[0], running[0])
        time.sleep(0.05)  # the disk: the next pieces come down meanwhile
        try:
            real(self, key, slices)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(NpyFile, "__setitem__", slow)
    output = open_output(tmp_path / "v.npy", (rows, size, size))
    try:
        assert jobs.file_writes(output) == want == jobs.file_writes(output.view(2, 6))
        pybp.reconstruct(projections, angles, out=output, device=cl_device, progress=False,
                         log=False)
        output.finish()
    finally:
        output.close()
    assert most_running[0] == want
    assert np.array_equal(np.load(tmp_path / "v.npy"), want_volume)
    tiffs = open_output(tmp_path / "slices", (rows, size, size))
    try:
        assert jobs.file_writes(tiffs) == 3
    finally:
        tiffs.close()
    assert jobs.file_writes(np.zeros(3)) == 3  # not a file output: WRITES (run gives 1)


@pytest.mark.parametrize("direct", [True, False])
def test_the_bench_writes_hdf5_as_the_output_does(tmp_path, monkeypatch, direct):
    """pybp bench --io's HDF5 writes (straight to the chunks' bytes, or through h5py where
    they are not known) leave the volume h5py reads back bit for bit."""
    h5py = pytest.importorskip("h5py")
    from pybp.io.output import hdf5

    if not direct:
        monkeypatch.setattr(hdf5, "slice_offsets", lambda data: None)
    monkeypatch.setattr(io, "WRITE_PIECE_BYTES", 3 * 16 * 20 * 4)  # three slices a piece
    volume = np.random.default_rng(2).random((11, 16, 20), np.float32)
    io._write_hdf5(tmp_path / "v.h5", volume, 4, True)
    with h5py.File(tmp_path / "v.h5") as f:
        assert f["volume"].chunks == (1, 16, 20)
        np.testing.assert_array_equal(f["volume"][()], volume)
