"""Iterative methods through the stream and from files: ``pybp.reconstruct(method=...)``
and ``pybp reconstruct --method`` for both geometries. Parallel beam's slices are each
their own problem, so any chunks, two pipelines, Dask workers, a file and ``--resume``
give the bits of one call of the method (pybp.sirt and the others); cone beam's command
gives those of the method on the float64-normalised line integrals."""

import dataclasses
import json
import signal

import h5py
import numpy as np
import pytest
import tifffile
from test_files import make_input, read_tiff_folder, run, scan  # noqa: F401
from test_files_errors import assert_one_line, stop_in_the_middle

import pybp
from pybp.parallel.centre import normalised_rows
from pybp.cli import commands as cli
from pybp.io import open_scan
from pybp.cone import run as cone_run
from pybp.registry import read_geometry

CASES = {"sirt": dict(nonnegative=True), "sart": dict(subsets=8), "cgls": {},
         "tv": dict(weight=0.02, nonnegative=True)}
ITERATIONS = 3
LINE_INTEGRALS_RTOL = 1e-5  # the device's float32 -log against float64's, carried through


def line_integrals(scan):  # noqa: F811
    """The scan's line integrals normalised in float64 on the host, as float32."""
    return normalised_rows(scan["projections"], scan["flats"], scan["darks"], 0,
                           scan["projections"].shape[1]).astype(np.float32)


def options(method):
    return [f"--{name}" if value is True else f"--{name}={value}"
            for name, value in CASES[method].items()]


@pytest.mark.parametrize("method", CASES)
def test_the_stream_and_the_command_give_the_method(method, scan, tmp_path,  # noqa: F811
                                                    cl_device):
    """In memory in chunks of 4, and from a file in chunks of 2, the volume is the same
    bits; against the method on the host-normalised line integrals, within float32's
    -log."""
    angles = np.deg2rad(scan["degrees"])
    streamed = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                                center=scan["center"], method=method, iterations=ITERATIONS,
                                device=cl_device, progress=False, **CASES[method])
    geometry = pybp.ParallelGeometry(angles, scan["projections"].shape[2],
                                     center=scan["center"])
    want = getattr(pybp, method)(line_integrals(scan), geometry, ITERATIONS, device=cl_device,
                                 **CASES[method])
    error = np.linalg.norm(streamed - want) / np.linalg.norm(want)
    assert error < LINE_INTEGRALS_RTOL, error
    out = tmp_path / "slices"
    code, _ = run(make_input("dxchange", scan, tmp_path) + [
        "-o", str(out), "--center", repr(scan["center"]), "--method", method, "--iterations",
        str(ITERATIONS), "--chunk-slices", "2", "--device", cl_device.name, "--quiet"]
        + options(method))
    assert code == 0
    np.testing.assert_array_equal(read_tiff_folder(out), streamed)
    stored = json.loads((out / "pybp.json").read_text())
    assert stored["method"] == method and stored["iterations"] == ITERATIONS
    assert "filter" not in stored


def test_two_pipelines_and_rows_give_the_same_bits(scan, cl_device):  # noqa: F811
    angles = np.deg2rad(scan["degrees"])
    common = dict(center=scan["center"], method="cgls", iterations=ITERATIONS,
                  progress=False)
    one = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                           device=cl_device, chunk_slices=6, **common)
    two = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                           devices=[cl_device, cl_device], chunk_slices=1, **common)
    part = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                            device=cl_device, rows=(2, 5), **common)
    np.testing.assert_array_equal(two, one)
    np.testing.assert_array_equal(part, one[2:5])


def test_dask_workers_give_the_same_bits(scan, cl_device):  # noqa: F811
    distributed = pytest.importorskip("distributed")
    from pybp.distributed import local_cluster

    angles = np.deg2rad(scan["degrees"])
    common = dict(center=scan["center"], method="sirt", iterations=ITERATIONS,
                  progress=False)
    one = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                           device=cl_device, **common)
    with local_cluster([cl_device, cl_device]) as cluster, distributed.Client(cluster) as client:
        spread = pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                                  client=client, chunk_slices=2, **common)
    np.testing.assert_array_equal(spread, one)


def test_resume_is_bit_for_bit_and_refuses_other_iterations(scan, tmp_path, cl_device,  # noqa: F811
                                                           capsys):
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--method", "sart", "--iterations", "2",
        "--device", cl_device.name, "--quiet", "-o", str(tmp_path / "out")]
    assert run(argv)[0] == 0
    whole = read_tiff_folder(tmp_path / "out")
    for row in (1, 4):
        (tmp_path / "out" / f"slice_{row:05d}.tif").unlink()
    assert run(argv + ["--resume"])[0] == 0
    np.testing.assert_array_equal(read_tiff_folder(tmp_path / "out"), whole)
    (tmp_path / "out" / "slice_00002.tif").unlink()
    changed = [value if value != "2" else "3" for value in argv]
    assert_one_line(capsys, run(changed + ["--resume"])[0], "resume:", "iterations")
    assert_one_line(capsys, run(argv + ["--resume", "--nonnegative"])[0], "resume:",
                    "nonnegative")


def test_resume_refuses_slices_of_the_bilinear_pair(scan, tmp_path, cl_device,  # noqa: F811
                                                    capsys):
    """Slices an iterative run made before issue 51 (the bilinear pair, whose record
    names its kernels ``sart-pair-rows8``) are not resumed with the distance-driven
    pair: one line, naming the kernels of both."""
    out = tmp_path / "out"
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--method", "sart", "--iterations", "2",
        "--device", cl_device.name, "--quiet", "-o", str(out)]
    assert run(argv)[0] == 0
    record = json.loads((out / "pybp.json").read_text())
    assert record["devices"][0]["kernels"] == ["sart-pair-rows8-footprints2"]
    record["devices"][0]["kernels"] = ["sart-pair-rows8"]
    (out / "pybp.json").write_text(json.dumps(record))
    (out / "slice_00002.tif").unlink()
    assert_one_line(capsys, run(argv + ["--resume"])[0], "resume:", "sart-pair-rows8",
                    "sart-pair-rows8-footprints2")


def test_ctrl_c_mid_run_resumes_to_the_same_volume(scan, tmp_path, cl_device):  # noqa: F811
    """A SIGINT once 2 slices are written: status 130, whole slices only; --resume
    completes the volume one run makes."""
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--method", "sirt", "--iterations", "120",
        "--chunk-slices", "1", "--device", cl_device.name, "--quiet"]
    out = tmp_path / "stopped"
    n_rows = scan["projections"].shape[1]
    code, err, seen = stop_in_the_middle(argv + ["-o", str(out)], out, signal.SIGINT, n_rows)
    done = sorted(out.glob("slice_*.tif"))
    assert code == 130 and 2 <= len(done) < n_rows, \
        f"{len(done)} slices after a signal at {seen}: {err}"
    assert run(argv + ["-o", str(out), "--resume"])[0] == 0
    assert run(argv + ["-o", str(tmp_path / "whole")])[0] == 0
    np.testing.assert_array_equal(read_tiff_folder(out), read_tiff_folder(tmp_path / "whole"))


@pytest.mark.parametrize("extra, words", [
    (["--iterations", "3"], ("--iterations", "--method")),
    (["--method", "sirt"], ("--iterations", "needed")),
    (["--method", "sirt", "--iterations", "3", "--filter", "hann"], ("--filter", "FBP")),
    (["--method", "sirt", "--iterations", "3", "--precision", "half"], ("--precision",)),
    (["--method", "sart", "--iterations", "3", "--weight", "2"], ("--weight", "sart")),
    (["--method", "tv", "--iterations", "3"], ("--weight", "tv needs")),
    (["--method", "tv", "--iterations", "3", "--weight", "-1"], ("--weight", "positive")),
    (["--method", "cgls", "--iterations", "3", "--nonnegative"], ("--nonnegative", "cgls")),
    (["--method", "sirt", "--iterations", "0"], ("--iterations",)),
    (["--method", "sirt", "--iterations", "3", "--relaxation", "2"], ("--relaxation",)),
])
def test_bad_method_options_are_named(scan, tmp_path, capsys, extra, words):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + ["-o", str(tmp_path / "out"), "--center",
                                                     "40"]
    assert_one_line(capsys, run(argv + extra)[0], *words)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def cone_scan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone")
    assert cli.main(["demo", "--cone", "--size", "16", "--angles", "24", "--write-scan",
                     str(folder / "scan.h5")]) == 0
    return folder / "scan.h5", folder / "scan-cone.json"


def test_cone_command_gives_the_method_and_resumes(cone_scan, tmp_path, cl_device, capsys):
    """SIRT from the file equals pybp.sirt of the line integrals FDK's first phase makes
    (pybp.cone.run.line_integrals), bit for bit, and those of the float64 host rule to
    float32's -log; planes deleted and --resume give the same volume; --rings goes
    through the same phase; two devices give the same volume."""
    path, geometry_path = cone_scan
    out = tmp_path / "volume"
    argv = ["reconstruct", str(path), "-o", str(out), "--geometry", str(geometry_path),
            "--method", "sirt", "--iterations", "2", "--device", cl_device.name, "--quiet"]
    assert cli.main(argv) == 0
    with open_scan(str(path)) as s:
        geometry = read_geometry(geometry_path, s.angles, s.shape[1:])
        data, _ = cone_run.line_integrals(s.projections, geometry, [dict(device=cl_device)],
                                          flats=s.flats, darks=s.darks, progress=False)
        host = normalised_rows(s.projections, s.flats, s.darks, 0, s.shape[1]).astype(np.float32)
        rings = cone_run.line_integrals(s.projections, geometry, [dict(device=cl_device)],
                                        flats=s.flats, darks=s.darks, rings="sort",
                                        ring_options=dict(size=5), progress=False)[0]
    assert np.linalg.norm(data - host) / np.linalg.norm(host) < LINE_INTEGRALS_RTOL
    want = pybp.sirt(data, geometry, 2, device=cl_device)
    got = np.stack([tifffile.imread(out / f"slice_{k:05d}.tif") for k in range(16)])
    np.testing.assert_array_equal(got, want)
    for k in (0, 9):
        (out / f"slice_{k:05d}.tif").unlink()
    assert cli.main(argv + ["--resume"]) == 0
    again = np.stack([tifffile.imread(out / f"slice_{k:05d}.tif") for k in range(16)])
    np.testing.assert_array_equal(again, want)
    ringed = tmp_path / "rings"
    assert cli.main(argv[:3] + [str(ringed)] + argv[4:] + ["--rings", "sort", "--ring-options",
                                                           "size=5"]) == 0
    got = np.stack([tifffile.imread(ringed / f"slice_{k:05d}.tif") for k in range(16)])
    np.testing.assert_array_equal(got, pybp.sirt(rings, geometry, 2, device=cl_device))
    assert not np.array_equal(got, want)
    other = tmp_path / "other"  # two devices share the method: the same bits
    assert cli.main(argv[:3] + [str(other)] + argv[4:-3] + [
        "--devices", f"{cl_device.name},{cl_device.name}", "--quiet"]) == 0
    shared = np.stack([tifffile.imread(other / f"slice_{k:05d}.tif") for k in range(16)])
    np.testing.assert_array_equal(shared, want)


def test_the_command_takes_laminography_by_its_registry_kind(cone_scan, tmp_path, cl_device,
                                                           capsys):
    """A geometry file of ASTRA parallel3d_vec rows (laminography, 30 degrees of tilt) is
    a ParallelVectorGeometry: the command runs the iterative method the registry's kind
    allows, bit for bit pybp.sirt of the same line integrals, and refuses FDK, which the
    kind does not have, in one line naming --method."""
    from pybp.geometry.parallel_vectors import laminography_vectors

    path, _ = cone_scan
    with open_scan(str(path)) as s:
        angles, detector = s.angles, s.shape[1:]
        np.savetxt(tmp_path / "lamino.txt", laminography_vectors(angles, np.radians(30), (1, 1)))
        (tmp_path / "lamino.json").write_text(json.dumps(dict(
            parallel_vectors="lamino.txt", volume_shape=[8, 16, 16], voxel_size=1.0)))
        geometry = read_geometry(tmp_path / "lamino.json", angles, detector)
        assert isinstance(geometry, pybp.ParallelVectorGeometry)
        data, _ = cone_run.line_integrals(s.projections, geometry, [dict(device=cl_device)],
                                          flats=s.flats, darks=s.darks, progress=False)
    out = tmp_path / "volume"
    argv = ["reconstruct", str(path), "-o", str(out), "--geometry",
            str(tmp_path / "lamino.json"), "--device", cl_device.name, "--quiet"]
    assert_one_line(capsys, cli.main(argv), "--method", "ParallelVectorGeometry",
                    "no filtered back-projection")
    assert not out.exists()
    assert cli.main(argv + ["--method", "sirt", "--iterations", "2"]) == 0
    got = np.stack([tifffile.imread(out / f"slice_{k:05d}.tif") for k in range(8)])
    want = pybp.sirt(data, geometry, 2, device=cl_device)
    assert want.shape == (8, 16, 16) and np.abs(want).max() > 0
    np.testing.assert_array_equal(got, want)


def test_bench_prints_the_pair_and_iterations_beside_the_ceiling(capsys):
    assert cli.main(["bench", "--iterative", "--size", "48", "--rows", "2", "--angles", "24",
                     "--repeats", "1", "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert "load ceiling:" in out
    for what in ("forward A", "transpose A^T", "SIRT iteration", "CGLS iteration"):
        line = next(line for line in out.splitlines() if line.startswith(f"| {what}"))
        assert line.endswith("% |"), line


def test_cone_bench_takes_a_pitch_and_laminography(capsys):
    """--pitch sets a voxel's side in pixels at the isocentre (the case's heading gives
    it), --laminography takes the laminography kind's pair (ParallelVectorGeometry); each
    is refused where it means nothing (FDK's bench, parallel beam, both scans at once)."""
    from pybp.tune import cone as cone_tuning

    g = cone_tuning.geometry(16, 8, (12, 20), pitch=0.5)
    iso = cone_tuning.PIXEL * cone_tuning.SOURCE_ORIGIN / cone_tuning.SOURCE_DETECTOR
    assert g.voxel_size == pytest.approx(0.5 * iso)
    assert cone_tuning.geometry(512).voxel_size / iso == pytest.approx(2.6667, rel=1e-4)
    small = ["--size", "16", "--projections", "8", "--detector", "12x20", "--repeats", "1",
             "--iterations", "2"]
    for scan, heading in ((["--cone", "--pitch", "1"], "ConeGeometry, 16 x 16 x 16"),
                          (["--laminography"], "ParallelVectorGeometry, 16 x 16 x 16")):
        assert cli.main(["bench", "--iterative", *scan, *small]) == 0
        out = capsys.readouterr().out
        assert heading in out and "(a voxel's side 1 pixels at the centre)" in out, out[:400]
        for row in ("forward A", "transpose A^T", "SIRT iteration", "CGLS iteration"):
            assert any(line.startswith(f"| {row}") for line in out.splitlines()), row
    for argv, says in ((["--cone", "--pitch", "1"], "--pitch: with --forward"),
                       (["--laminography"], "--laminography: with --forward"),
                       (["--forward", "--pitch", "1"], "--pitch: with --cone")):
        code = cli.main(["bench", *argv, "--size", "16"])
        err = capsys.readouterr().err
        assert code == 2 and says in err, (argv, err)
    for argv, says in ((["--cone", "--forward", "--pitch", "0"], "--pitch: expected a positive"),
                       (["--cone", "--laminography", "--forward"], "not allowed with")):
        with pytest.raises(SystemExit) as exited:
            cli.main(["bench", *argv])
        assert exited.value.code == 2 and says in capsys.readouterr().err, argv


@pytest.mark.parametrize("method", CASES)
def test_the_working_set_the_plan_counts_holds_what_a_chunk_allocates(method, scan,  # noqa: F811
                                                                    cl_device, monkeypatch):
    """The memory plan sizes chunks by the method table's working set and the chunk's
    data (pybp/iterative/table.py, iterate.DATA_SETS; the stage allocates the arrays
    itself): the arrays a chunk holds at once take no more than it counts, and no less
    than its method's and data's."""
    from pybp.iterative import table
    from pybp.parallel import iterate, project
    from test_iterative import PeakAllocator

    angles = np.deg2rad(scan["degrees"])
    n_angles, _, n_bins = scan["projections"].shape
    volumes, sets = table.TABLE[method].working_set(2)
    sets += iterate.DATA_SETS
    peaks, chunks = [], []
    counter = PeakAllocator(monkeypatch)
    real_enqueue = iterate.Iterate.enqueue

    def enqueue(self, chunk):
        chunks.append(chunk.count)
        counter.peak = counter.live
        try:
            return real_enqueue(self, chunk)
        finally:
            peaks.append(counter.peak - counter.live)

    monkeypatch.setattr(iterate.Iterate, "enqueue", enqueue)
    pybp.reconstruct(scan["projections"], angles, scan["flats"], scan["darks"],
                     center=scan["center"], method=method, iterations=1, chunk_slices=2,
                     device=cl_device, progress=False, **CASES[method])
    assert chunks
    for count, used in zip(chunks, peaks):
        # the pair's copies: two stacked volumes and stacked projections, whole groups
        copies = 4 * project.stacked_rows(count) * (2 * n_bins * n_bins + n_angles * n_bins)
        # (SART's subsets of 8: a subset's ones and residual are an eighth of a set each)
        own = sets - 2 if method == "sart" else sets
        least = count * 4 * (volumes * n_bins * n_bins + own * n_angles * n_bins)
        most = count * 4 * (volumes * n_bins * n_bins + sets * n_angles * n_bins) + copies
        assert least <= used <= most, (method, count, used, least, most)


def test_iterative_chunks_are_sized_by_time(cl_device):
    """An iterative chunk is one long call: its rows are bounded by about CHUNK_SECONDS
    of the device's work (never fewer than a work-item's rows). Before, 64 slices of 256^2 on a 2-core CPU were one chunk of 30 s,
    whose Ctrl-C lost everything and which a second device never shared."""
    from pybp.cl.device import describe
    from pybp.parallel import iterate, project

    n = 128
    angles = np.linspace(0, np.pi, n, endpoint=False)
    data = np.random.default_rng(0).random((n, 16, n)).astype(np.float32)
    stats = {}
    pybp.reconstruct(data, angles, method="sirt", iterations=20, log=False, stats=stats,
                     device=cl_device, progress=False)
    bound = iterate.most_rows(describe(cl_device), pybp.ParallelGeometry(angles, n), "sirt", 20)
    assert stats["chunk_slices"] == min(bound, 16)
    if describe(cl_device).type == "cpu":
        assert bound == project.ROWS_PER_ITEM  # one chunk of 16 before
    # a GPU of 132 units: 4096^2 from 4096 angles takes a work-item's 8 rows a chunk,
    # 2048^2 from 2048 angles 24 (about 4 s at the rate guessed; 2.3 s on the H200),
    # 1024^2 the most, 64
    gpu = dataclasses.replace(describe(cl_device), type="gpu", compute_units=132)
    for size, rows in ((4096, 8), (2048, 24), (1024, 64)):
        g = pybp.ParallelGeometry(np.linspace(0, np.pi, size, endpoint=False), size)
        assert iterate.most_rows(gpu, g, "sirt", 10) == rows


def test_an_interrupted_cone_method_resumes_from_its_state(cone_scan, tmp_path, cl_device,
                                                           capsys, monkeypatch):
    """The cone command keeps its method's state beside the output: Ctrl-C after
    iteration 3 of 5, then --resume, continues from the state after iteration 2 (not
    from 0, as before) to the bits of one run; the state is gone at the end; a fresh
    run beside a state left behind is refused, and --overwrite starts again."""
    from pybp.api import iterative as api_iterative
    from pybp.cli.cone import state_path
    from pybp.iterative import checkpoint as kept

    monkeypatch.setattr(kept, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(kept, "WRITE_SHARE", float("inf"))
    path, geometry_path = cone_scan
    argv = ["reconstruct", str(path), "--geometry", str(geometry_path), "--method", "sirt",
            "--iterations", "5", "--device", cl_device.name, "--quiet"]
    whole = tmp_path / "whole.h5"
    assert cli.main(argv[:2] + ["-o", str(whole)] + argv[2:]) == 0
    out = tmp_path / "volume.h5"
    report = api_iterative._Run.report
    started, armed = [], [True]

    def stopping(self, iteration, x):
        started.append(iteration)
        if iteration == 3 and armed:
            armed.clear()
            raise KeyboardInterrupt
        report(self, iteration, x)

    monkeypatch.setattr(api_iterative._Run, "report", stopping)
    assert cli.main(argv[:2] + ["-o", str(out)] + argv[2:]) == 130
    assert state_path(out).exists()
    capsys.readouterr()
    other = tmp_path / "other.h5"
    state_path(other).write_bytes(b"left behind")
    assert_one_line(capsys, cli.main(argv[:2] + ["-o", str(other)] + argv[2:]),
                    "--resume", "holds the state of an interrupted --method run")
    assert not other.exists() and state_path(other).exists()
    assert cli.main(argv[:2] + ["-o", str(other)] + argv[2:] + ["--overwrite"]) == 0
    assert not state_path(other).exists()
    started.clear()
    assert cli.main(argv[:2] + ["-o", str(out)] + argv[2:] + ["--resume"]) == 0
    assert started == [3, 4]  # from the state after iteration 2
    assert not state_path(out).exists()
    with h5py.File(whole) as a, h5py.File(out) as b:
        np.testing.assert_array_equal(b["slices"][()], a["slices"][()])
