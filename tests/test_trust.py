"""The findings of issue 36's hostile test (resume, interrupted outputs, silently wrong
results, tracebacks, errors that do not say what is wrong), each re-run as written at
small sizes on the test device: every one ends in a correct result or one clear line,
with nothing lost. Faults that a test cannot make for real are injected where they
happen: a short write, a kill just after a partial file was made, slow writes."""

import _thread
import errno
import json
import signal
import subprocess
import sys
import threading
import time
import warnings

import h5py
import numpy as np
import pytest
import tifffile
from test_files import make_input, run, scan  # noqa: F401
from test_files_errors import assert_one_line

import pybp
from pybp.cli import writing
from pybp.cli.commands import main
from pybp.cl import codegen, pacing
from pybp.io import writers
from pybp.io.output import disk
from pybp.io.demo import cone_scan, write_dxchange
from pybp.stages import rings, wavelets

PHASE = ["--phase", "paganin", "--delta-beta", "200", "--energy", "25", "--distance", "0.3",
         "--pixel-size", "3e-6"]


@pytest.fixture(scope="module")
def cone(tmp_path_factory):
    """A DXchange cone-beam scan of 24^3 and its geometry file."""
    folder = tmp_path_factory.mktemp("cone")
    geometry, degrees, projections, flats, darks, _ = cone_scan(24, 32, n_frames=4)
    write_dxchange(folder / "cone.h5", projections, flats, darks, degrees)
    spec = {"circular": {"source_origin": 72.0, "origin_detector": 36.0, "pixel_size": 1.5},
            "volume_shape": [24, 24, 24], "voxel_size": 1.0}
    (folder / "cone.json").write_text(json.dumps(spec))
    return folder, spec


def cone_args(folder, out, geometry="cone.json", *more):
    return [str(folder / "cone.h5"), "-o", str(out), "--geometry", str(folder / geometry),
            "--quiet", *more]


# ---- 1. resume is bit for bit or refused ----------------------------------------------

@pytest.mark.parametrize("kind", ["vol", "vol.h5", "vol.npy"])
@pytest.mark.parametrize("change", [dict(voxel_size=1.1), dict(volume_offset=[0, 0, 1.0])])
def test_cone_resume_refuses_another_volume_grid(cone, tmp_path, capsys, kind, change):
    folder, spec = cone
    out = tmp_path / kind
    assert run(cone_args(folder, out), capsys)[0] == 0
    (tmp_path / "other.json").write_text(json.dumps(dict(spec, **change)))
    argv = [str(folder / "cone.h5"), "-o", str(out), "--geometry", str(tmp_path / "other.json"),
            "--quiet", "--resume"]
    assert_one_line(capsys, run(argv)[0], "resume:", next(iter(change)))


def test_phase_rows_and_resume_are_bit_for_bit(scan, tmp_path, cl_device):  # noqa: F811
    """Phase retrieval's frames are cut on a grid of the detector's rows: any rows of
    a run, resumed or not, equal those of the whole run (they differed by up to 1.3e-8,
    6.4e-6 with --rings sort)."""
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--device", cl_device.name, "--quiet",
        "--chunk-slices", "2", "--rings", "sort"] + PHASE
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run(argv + ["-o", str(whole)])[0] == 0
    assert run(argv + ["-o", str(part), "--rows", "3:5"])[0] == 0
    for row in (3, 4):
        np.testing.assert_array_equal(tifffile.imread(part / f"slice_{row:05d}.tif"),
                                      tifffile.imread(whole / f"slice_{row:05d}.tif"))
    resumed = tmp_path / "resumed"
    assert run(argv + ["-o", str(resumed)])[0] == 0
    for row in (1, 4):  # as an interrupted run leaves it: some slices missing
        (resumed / f"slice_{row:05d}.tif").unlink()
    assert run(argv + ["-o", str(resumed), "--resume"])[0] == 0
    for f in sorted(whole.glob("slice_*.tif")):
        np.testing.assert_array_equal(tifffile.imread(resumed / f.name), tifffile.imread(f))


def test_resume_with_phase_refuses_another_memory_limit(scan, tmp_path, cl_device,  # noqa: F811
                                                        capsys):
    """With phase retrieval the memory limit sets the chunks' grid, so their values'
    last bits: --resume with another --memory-limit is refused, naming both."""
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--device", cl_device.name, "--quiet"] + PHASE
    out = tmp_path / "r"
    assert run(argv + ["-o", str(out), "--memory-limit", "512M"])[0] == 0
    line = assert_one_line(capsys, run(argv + ["-o", str(out), "--memory-limit", "400M",
                                               "--resume"])[0], "memory_limit=536870912")
    assert "419430400" in line


def test_resume_refuses_other_kernels_and_devices(scan, tmp_path, cl_device, capsys):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--device", cl_device.name, "--quiet"]
    out = tmp_path / "r"
    assert run(argv + ["-o", str(out), "--slices-per-pass", "4"])[0] == 0
    assert_one_line(capsys, run(argv + ["-o", str(out), "--slices-per-pass", "1", "--resume"])[0],
                    "slices_per_pass=4")
    stored = json.loads((out / "pybp.json").read_text())
    stored["devices"][0]["device"] = "another device | driver 1.0"
    stored["devices"][0]["name"] = "another device"
    (out / "pybp.json").write_text(json.dumps(stored))
    line = assert_one_line(capsys, run(argv + ["-o", str(out), "--slices-per-pass", "4",
                                              "--resume"])[0], "made on another device")
    assert "--device" in line


# ---- 2. interrupted outputs are never stuck -------------------------------------------

def test_ctrl_c_waits_for_writes_in_flight_and_keeps_the_metadata(tmp_path, monkeypatch, capsys):
    """Ctrl-C while TIFF planes are being written: the writes in flight end, the count
    is what is on the disk, the metadata stays, and --resume takes the folder (it said
    "nothing was written", removed pybp.json, and then refused the folder)."""
    write = writers.TiffSlices.write

    def slow(self, index, image):
        time.sleep(0.3)
        write(self, index, image)

    monkeypatch.setattr(writers.TiffSlices, "write", slow)
    out = tmp_path / "planes"
    output = writers.open_output(out, (6, 8, 8), metadata={"command": "test"})

    def work():
        threading.Timer(0.1, _thread.interrupt_main).start()
        output.view(0, 6)[0:6] = np.ones((6, 8, 8), np.float32)  # 6 writes at once

    try:
        result, code = writing.into(output, 6, "plane", work)
    finally:
        writing._noted.count = 0
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert code == writing.EXIT_INTERRUPTED
    assert "interrupted after 6 of 6 planes" in capsys.readouterr().err
    assert len(list(out.glob("slice_*.tif"))) == 6 and (out / "pybp.json").exists()
    writers.check_output_path(out, resume=True)  # pybp's, and resumable


def test_settle_waits_for_writes_the_pool_does_not_know_of(tmp_path, monkeypatch):
    """A Ctrl-C inside ``Thread.start`` leaves a pool worker the pool does not know of
    (1 in 6 aimed tries: "interrupted after 6 of 128 planes", 7 on the disk): settle
    waits for every write it counted, and refuses any that comes after it."""
    slices = writers.TiffSlices(tmp_path, 0, 4, np.float32, "")
    started, write = threading.Event(), disk.atomic_write

    def slow(path, data):
        started.set()
        time.sleep(0.3)
        write(path, data)

    monkeypatch.setattr(disk, "atomic_write", slow)
    orphan = threading.Thread(target=slices._counted, args=(0, np.ones((4, 4), np.float32)))
    orphan.start()
    started.wait()
    slices.settle()
    assert (tmp_path / "slice_00000.tif").exists()  # the write in flight ended first
    with pytest.raises(RuntimeError, match="was closed"):
        slices[1:2] = np.ones((1, 4, 4), np.float32)
    orphan.join()
    assert not (tmp_path / "slice_00001.tif").exists()


@pytest.mark.parametrize("name", ["r.h5", "r.npy"])
def test_a_kill_just_after_the_partial_file_is_made_is_restartable(tmp_path, name):
    """SIGKILL just after NAME.partial was made leaves it empty and unmarked, with
    pybp's lock file beside it (no process holds it): --resume and --overwrite start
    it again (both refused it as not pybp's)."""
    out = tmp_path / name
    for flag in ("resume", "overwrite"):
        (tmp_path / f"{name}.partial").write_bytes(b"")
        (tmp_path / f".{name}{writers.LOCK}").write_text("process 1 on host")
        assert writers.check_output_path(out, **{flag: True}) in ("hdf5", "npy")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "cannot be read; starting it again"
            output = writers.open_output(out, (2, 4, 4), metadata={"command": "test"},
                                         **{flag: True})
        output[0:2] = np.ones((2, 4, 4), np.float32)
        output.finish()
        output.close()
        assert out.exists() and not (tmp_path / f"{name}.partial").exists()
        out.unlink()
        out.with_suffix(".json").unlink(missing_ok=True)  # a .npy output's metadata
    (tmp_path / f"{name}.partial").write_bytes(b"someone else's")  # no lock: not pybp's
    with pytest.raises(FileExistsError, match="pybp did not write it"):
        writers.check_output_path(out, resume=True)


def test_a_short_write_says_the_disk_is_full(tmp_path):
    """NumPy's tofile reports a full disk as "4096 requested and 952 written", with no
    error number ("[Errno None]"): it is a full disk."""
    with pytest.raises(writers.WriteError) as caught:
        with disk.writing(tmp_path / "slice.tif"):
            raise OSError("4096 requested and 952 written")
    assert caught.value.errno == errno.ENOSPC
    output = writers.open_output(tmp_path / "out", (2, 4, 4), metadata={"command": "test"})
    try:
        assert "the disk is full" in output.failure(caught.value)
    finally:
        output.close()


# ---- 3. Ctrl-C within a second --------------------------------------------------------

class _Event:
    """A finished launch whose profiling timestamps say it took ``seconds``."""

    command_execution_status = 0

    def __init__(self, seconds):
        self.profile = type("Profile", (), {"start": 0, "end": int(seconds * 1e9)})()


def test_pacing_on_a_cpu_trusts_the_wall_clock_not_the_timestamps():
    """PoCL's timestamps said a launch of seconds took microseconds: the rate then let
    one launch take a whole chunk (13-19 s to stop). On a CPU the wall clock bounds it."""
    for device_type, rate in (("cpu", 1e6 / 0.2), ("gpu", 1e6 / 1e-6)):
        pacer = pacing.Pacer(device_type, timers=True)
        pacer.launched(_Event(1e-6), "backproject", 1e6)
        time.sleep(0.2)
        pacer.clear()
        assert pacer.rate("backproject") == pytest.approx(rate, rel=0.3)


def test_a_kernel_build_is_interrupted_at_once():
    """A build cannot be stopped: it runs on a thread of its own while the caller waits
    in short steps (first builds took 2.4-6.2 s to answer Ctrl-C)."""
    started = time.perf_counter()
    threading.Timer(0.2, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        codegen.interruptible(lambda: time.sleep(3), type("D", (), {"name": "test"})())
    assert time.perf_counter() - started < 1.0


def test_the_exit_waits_for_builds_and_passes_over_one_never_started(monkeypatch):
    """Ctrl-C between a build thread's registration and its start left a thread that
    never ran, and the exit's wait for builds raised on it ("cannot join thread before it
    is started": a traceback after `pybp reconstruct: interrupted`, seen in CI). The wait
    joins the builds under way and passes over one never started."""
    finished = threading.Event()
    running = threading.Thread(target=lambda: (time.sleep(0.2), finished.set()))
    never = threading.Thread(target=lambda: None)
    monkeypatch.setattr(codegen, "_BUILDING", {running, never})
    running.start()
    codegen._wait_for_builds()
    assert finished.is_set()


def test_a_long_build_is_said_in_a_log_too(monkeypatch, capsys):
    """The notice of a long build goes to standard error where it is a pipe or a file, not
    on a terminal only: piped to a log, a first run was 12.6 s of silence."""
    monkeypatch.delenv("PYBP_BUILD_NOTICE", raising=False)
    monkeypatch.setattr(codegen, "BUILD_NOTICE_SECONDS", 0.05)
    monkeypatch.setattr(codegen, "_NOTICED", threading.Event())
    codegen.interruptible(lambda: time.sleep(0.3), type("D", (), {"name": "test"})())
    assert "pybp: building the OpenCL kernels for test (kept in" in capsys.readouterr().err
    monkeypatch.setenv("PYBP_BUILD_NOTICE", "0")
    monkeypatch.setattr(codegen, "_NOTICED", threading.Event())
    codegen.interruptible(lambda: time.sleep(0.3), type("D", (), {"name": "test"})())
    assert capsys.readouterr().err == ""


def test_a_script_interrupted_in_a_build_ends_at_once(tmp_path):
    """A script (the Python API, not the command) whose Ctrl-C comes during a kernel
    build ends within a second, killed by SIGINT as Python ends an interrupted script,
    its output flushed: it waited 2.2 to 7.4 s for the build, which cannot be stopped,
    to end."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, time\n"
        "from pybp.cl import codegen\n"
        "print('before')  # a pipe: buffered until the end flushes it\n"
        "def build():\n"
        "    print('building', file=sys.stderr, flush=True)\n"
        "    time.sleep(20)\n"
        "codegen.interruptible(build, type('D', (), {'name': 'test'})())\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr.readline() == "building\n"
    started = time.perf_counter()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert time.perf_counter() - started < 1.0
    assert process.returncode == -signal.SIGINT, err
    assert out == "before\n" and "KeyboardInterrupt" in err


# ---- 4. silently wrong results become errors ------------------------------------------

def test_an_underflowing_sigma_gives_the_limit_not_nan(cl_device):
    """sigma=1e-200: its square underflows; the volume was NaN with exit 0."""
    data = np.random.default_rng(3).standard_normal((40, 32))
    want = wavelets.fw_numpy(data, 3, sigma=1e-200)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(want, wavelets.fw_numpy(data, 3, sigma=1e-30), atol=1e-12)
    angles = np.linspace(0, np.pi, 40, endpoint=False)
    got = pybp.reconstruct(data[:, None].astype(np.float32), angles, log=False,
                           rings="fw", ring_options=dict(level=3, sigma=1e-200),
                           device=cl_device, progress=False)
    assert np.isfinite(got).all()


def test_out_that_is_the_input_is_refused(cl_device):
    angles = np.linspace(0, np.pi, 16, endpoint=False)
    data = np.random.default_rng(4).random((16, 16, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="out: holds the same memory as projections"):
        pybp.reconstruct(data, angles, out=data, log=False, device=cl_device)
    with pytest.raises(ValueError, match="out: holds the same memory as sinograms"):
        pybp.Backprojector(16, angles, device=cl_device)(data, out=data)
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (16, 16), 1.0,
                                   40.0, 20.0, (16, 16, 16), 0.5)
    with pytest.raises(ValueError, match="out: holds the same memory as projections"):
        pybp.fdk(data, g, out=data, device=cl_device, memory_limit=1 << 20)
    with pytest.raises(ValueError, match="out: holds the same memory as projections"):
        pybp.fdk(data, g, out=data[::-1], device=cl_device)  # a view of it, reversed


def test_one_cone_backprojector_from_three_threads(cl_device):
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 24, endpoint=False), (16, 20), 1.0,
                                   40.0, 20.0, (12, 12, 12), 1.0)
    data = [np.random.default_rng(k).random((24, 16, 20)).astype(np.float32) for k in range(3)]
    with pybp.ConeBackprojector(g, device=cl_device) as bp:
        want = [bp(d) for d in data]
        got = [None] * 3
        threads = [threading.Thread(target=lambda k=k: got.__setitem__(k, bp(data[k])))
                   for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_nan_in_line_integrals_is_refused_at_every_entry_point(cl_device):
    """One rule: NaN or Inf among line integrals is an error naming the argument
    (cone_backproject passed them into the volume, fdk zeroed them with a warning)."""
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (8, 8, 8), 1.0)
    data = np.ones((16, 12, 12), np.float32)
    data[3, 6, 6] = np.nan
    for call in (pybp.cone_backproject, pybp.fdk):
        with pytest.raises(ValueError, match="projections: 1 values are NaN or Inf"):
            call(data, g, device=cl_device)
    angles = np.linspace(0, np.pi, 16, endpoint=False)
    with pytest.raises(ValueError, match="NaN or Inf"):
        pybp.reconstruct(data, angles, log=False, device=cl_device, progress=False)
    with pytest.raises(ValueError, match="sinograms: contains NaN or Inf"):
        pybp.fbp(data[:, 6], angles, device=cl_device)


# ---- 5. no tracebacks; 6. errors that say what is wrong -------------------------------

@pytest.mark.parametrize("options, words", [
    (["--rings", "fw", "--ring-options", "sigma=inf"], ["sigma", "finite"]),
    (PHASE[:-1] + ["1e-300"], ["phase:", "strength", "units"]),
])
def test_preprocessing_values_beyond_range_are_one_line(scan, tmp_path, capsys, options,  # noqa: F811
                                                        words):
    argv = make_input("dxchange", scan, tmp_path) + ["-o", str(tmp_path / "o"), "--quiet"]
    assert_one_line(capsys, run(argv + options)[0], *words)
    assert not (tmp_path / "o").exists()


def test_huge_sigma_and_pixel_give_the_filters_limits(scan, tmp_path, cl_device):  # noqa: F811
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--device", cl_device.name, "--quiet"]
    assert run(argv + ["-o", str(tmp_path / "a"), "--rings", "fw", "--ring-options",
                       "sigma=1e308"])[0] == 0
    assert run(argv + ["-o", str(tmp_path / "b")] + PHASE[:-1] + ["1e300"])[0] == 0
    for folder in ("a", "b"):
        assert all(np.isfinite(tifffile.imread(f)).all()
                   for f in (tmp_path / folder).glob("slice_*.tif"))


@pytest.mark.parametrize("change, words", [
    (dict(volume_shape=[2 ** 62] * 3, voxel_size=2.0 ** -62), ["volume_shape", "2^31 - 1"]),
    (dict(volume_shape=[64, 2 ** 30, 2 ** 30], voxel_size=2.0 ** -30),
     ["--memory-limit", "volume_shape (in the geometry file)"]),
    (dict(vectors=5), ["vectors: expected the name of a .npy or text file"]),
    (dict(vectors="folder"), ["is a folder"]),
    (dict(circular={"source_origin": 1e308, "origin_detector": 36.0, "pixel_size": 1.5}),
     ["source_origin", "1e+308", "unit"]),
])
def test_geometry_files_beyond_reason_are_one_line(cone, tmp_path, capsys, change, words):
    folder, spec = cone
    made = dict(spec, **change)
    if "vectors" in change:
        del made["circular"]
        (tmp_path / "folder").mkdir()
    (tmp_path / "bad.json").write_text(json.dumps(made))
    for out in ("v", "v.npy"):
        argv = [str(folder / "cone.h5"), "-o", str(tmp_path / out), "--geometry",
                str(tmp_path / "bad.json"), "--quiet"]
        assert_one_line(capsys, run(argv)[0], *words)
        assert not (tmp_path / out).exists()


def test_a_deeply_nested_geometry_file_is_one_line(cone, tmp_path, capsys):
    folder, _ = cone
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    argv = [str(folder / "cone.h5"), "-o", str(tmp_path / "v"), "--geometry",
            str(tmp_path / "deep.json"), "--quiet"]
    assert_one_line(capsys, run(argv)[0], "nests its values too deeply")


def test_a_demo_too_large_for_memory_is_one_line(tmp_path, capsys):
    for argv in (["demo", "--cone", "--write-scan", str(tmp_path / "s.h5"), "--size", "100000"],
                 ["demo", "--size", "1000000", "--output", str(tmp_path / "d.png")]):
        assert_one_line(capsys, main(argv), "--size:", "memory")
    assert not list(tmp_path.iterdir())


def write_layout(path, scan, layout):  # noqa: F811
    """The scan as DXchange with ``/exchange/data`` stored ``layout``; no flats or darks
    where ``counts`` is in its name (raw counts, which the command refuses)."""
    options = {"contiguous": {}, "frames": dict(chunks=(1,) + scan["projections"].shape[1:]),
               "rows": dict(chunks=(1, 2, scan["projections"].shape[2])),
               "compressed": dict(chunks=(4, 2, 32), compression="gzip")}[layout]
    with h5py.File(path, "w") as f:
        f.create_dataset("exchange/data", data=scan["projections"], **options)
        f.create_dataset("exchange/data_white", data=scan["flats"])
        f.create_dataset("exchange/data_dark", data=scan["darks"])
        f.create_dataset("exchange/theta", data=scan["degrees"])


_LAYOUT_SLICES = {}  # device name -> the slices of the first layout run


@pytest.mark.parametrize("layout", ["contiguous", "frames", "rows", "compressed"])
def test_every_hdf5_layout_reads_alike(scan, tmp_path, cl_device, capsys, layout):  # noqa: F811
    """Each way HDF5 stores /exchange/data (read straight at its offsets where it is
    unfiltered, by h5py where compressed) gives the same slices; raw counts with no
    flats and darks are one line on each (a contiguous file gave an IndexError)."""
    path = tmp_path / f"{layout}.h5"
    write_layout(path, scan, layout)
    argv = [str(path), "--center", repr(scan["center"]), "--device", cl_device.name, "--quiet"]
    assert run(argv + ["-o", str(tmp_path / "o.npy")])[0] == 0
    got = np.load(tmp_path / "o.npy")
    first = _LAYOUT_SLICES.setdefault(cl_device.name, got)
    np.testing.assert_array_equal(got, first)  # every layout alike, to the bit
    want = pybp.reconstruct(scan["projections"], np.radians(scan["degrees"]), scan["flats"],
                            scan["darks"], center=scan["center"], device=cl_device,
                            progress=False)
    # The API from arrays: equal on PoCL, within rounding on Intel's runtime (which
    # vectorises the two paths' kernels differently: 1.2e-6 of the peak here)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    with h5py.File(path, "a") as f:
        del f["exchange/data_white"], f["exchange/data_dark"]
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "counts")])[0], "raw counts")


def test_api_values_that_were_refused_or_unnamed(cl_device):
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (16, 8, 8), 1.0)
    with pytest.raises(ValueError, match="memory_limit: expected a positive, finite"):
        pybp.ConeBackprojector(g, memory_limit=float("inf"), device=cl_device)
    with pytest.raises(TypeError, match="planes: expected .* two integers"):
        pybp.ConeBackprojector(g, planes=(0.5, 3.7), device=cl_device)
    angles = np.linspace(0, np.pi, 16, endpoint=False)
    data = np.ones((16, 4, 12), np.float32)
    for bad in (0, -4, 2.5):
        with pytest.raises((ValueError, TypeError), match="chunk_slices"):
            pybp.reconstruct(data, angles, log=False, chunk_slices=bad, device=cl_device)
    phase = dict(delta_beta=np.int64(200), energy=np.float32(25), distance=0.3, pixel_size=3e-6)
    pybp.reconstruct(data, angles, np.ones((1, 4, 12)) * 2, np.zeros((1, 4, 12)), phase=phase,
                     device=cl_device, progress=False)
    assert "importlib" not in dir(pybp) and "fdk" in dir(pybp)
    assert len(repr(g).splitlines()) == 1 and "16 projections" in repr(g)


def test_cli_paths_that_were_wrong_or_silent(scan, tmp_path, capsys):  # noqa: F811
    assert_one_line(capsys, run(["preview", str(tmp_path / "nosuch")])[0], "does not exist")
    argv = make_input("dxchange", scan, tmp_path)
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "no" / "such" / "out")])[0],
                    "does not exist")
    assert not (tmp_path / "no").exists()
    # --memory-limit is both geometries' (it was cone beam's alone): too little is one
    # line naming it, nothing made; enough for chunks of one slice gives the same slices.
    assert_one_line(capsys, run(argv + ["-o", str(tmp_path / "o"), "--memory-limit", "8K"])[0],
                    "memory_limit: 8.0 KiB hold no chunk")
    assert not (tmp_path / "o").exists()
    assert run(argv + ["-o", str(tmp_path / "a.npy"), "--quiet"])[0] == 0
    assert run(argv + ["-o", str(tmp_path / "b.npy"), "--quiet", "--memory-limit", "3M"])[0] == 0
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def test_fdk_shows_progress_and_previews_show_three_sections(cone, tmp_path, capsys,
                                                             cl_device):
    folder, _ = cone
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (8, 8, 8), 1.0)
    pybp.fdk(np.zeros((16, 12, 12), np.float32), g, progress=True, device=cl_device)
    for name in ("v.h5", "v.npy"):
        assert run(cone_args(folder, tmp_path / name), capsys)[0] == 0
        assert run(["preview", str(tmp_path / name)], capsys)[0] == 0
        picture = tmp_path / f"{name}-preview.png"  # rec.h5 and rec.npy: two names
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        width = int.from_bytes(picture.read_bytes()[16:20], "big")
        assert width == 3 * 24 + 2 * 4  # three 24-voxel sections side by side


def test_ring_sort_medians_go_in_paced_launches(cl_device):
    """size=255 took 17.7 s to stop on PoCL: a sinogram's medians were one launch."""
    from pybp.cl.device import describe
    import pyopencl as cl

    context, device = cl.Context([cl_device]), describe(cl_device)
    queue = cl.CommandQueue(context)
    data = np.random.default_rng(5).random((1, 30, 40)).astype(np.float32)
    stage = rings.SortRings(context, device, 30, 40, 7)
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)
    pacer = pacing.Pacer(device.type, device.timers)
    pacer.first_rate = 2 * 30 * 49 * 3 / pacing.LAUNCH_SECONDS  # 3 pairs of columns a launch
    events = stage(queue, buffer, 0, 1, pacer)
    assert len(events) >= 3  # the sort, then the medians in launches of pairs of columns
    got = np.empty_like(data)
    cl.enqueue_copy(queue, got, buffer)
    np.testing.assert_allclose(got, rings.sort_numpy(data, 7), rtol=1e-6)


def test_compiler_warnings_stay_away_from_the_terminal(cl_device, capfd):
    """A kernel the compiler warns about (a builtin redefined): PoCL printed "1 warning
    generated." to the process's standard error itself, where no Python filter reaches
    (pyopencl's CompilerWarning, which Intel's runtime gives for every build, is
    filtered by pybp/cl/codegen.py); pybp builds with -w."""
    import uuid

    import pyopencl as cl
    from pybp.cl.device import describe

    source = (f"// {uuid.uuid4()}: never built before\n#define mad(a, b, c) ((a) * (b) + (c))\n"
              "__kernel void warned(__global float *x) { x[0] = mad(x[0], 2.0f, 1.0f); }\n")
    codegen.build(cl.Context([cl_device]), source, describe(cl_device))
    assert "warning" not in capfd.readouterr().err


# ---- 8. where skimage_options gives iradon's values -----------------------------------

@pytest.mark.parametrize("n", [128, 255])
def test_skimage_options_give_iradons_values_where_the_readme_says(cl_device, n):
    from skimage import transform
    from skimage import data
    image = np.zeros((n, n))
    phantom = transform.rescale(data.shepp_logan_phantom(), n / 400)[:n, :n]
    image[:phantom.shape[0], :phantom.shape[1]] = phantom
    theta = np.arange(0, 180, 180 / n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # radon: "image must be zero outside the circle"
        sinogram = transform.radon(image, theta)
    y, x = np.mgrid[:n, :n] - n // 2
    inside = np.hypot(x, y) < n // 2 - 1 if n % 2 == 0 else np.ones((n, n), bool)
    for name, bound in (("ramp", 5e-6), ("shepp-logan", 5e-6), ("cosine", 1e-5),
                        ("hamming", 6e-4), ("hann", 6e-4)):
        ours = pybp.fbp(sinogram.T.astype(np.float32), np.radians(theta), filter=name,
                        device=cl_device, **pybp.skimage_options(n))
        theirs = transform.iradon(sinogram, theta, filter_name=name)
        assert np.abs(ours - theirs)[inside].max() < bound * np.abs(theirs).max(), name
