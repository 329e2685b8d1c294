"""Cone beam through the stream (pybp/cone/corrections.py, pybp/cone/run.py): with
rings or phase, the rows corrected by the stages both geometries share into line
integrals, then FDK's passes of those. Bit for bit equal to the passes of
pybp.ConeBackprojector, in slabs, on two pipelines and on two PoCL devices; ring
removal and Paganin phase retrieval against float64 NumPy references of the same
formulas; the command's --devices, --rings and --phase."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import two_pocl_devices
from test_cone_files import assert_caught_within_2_s
from test_first_hour import cpu_sized

import pybp
from pybp import phantoms
from pybp.cl.device import describe
from pybp.cli import commands as cli
from pybp.cone import reference, run
from pybp.cone import slabs as slices
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry
from pybp.stages import rings, wavelets
from pybp.stages.normalize import line_integrals_numpy
from pybp.stages.phase import Paganin, paganin_numpy

EXACT = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=8, group=(16, 8))
TEXTURE = ConeParams(family="texture", voxels_per_item=4, projections_per_pass=8, group=(16, 8))
FDK_RTOL = 1e-5  # relative RMS, the exact family against float64 (tests/test_fdk.py)
# Ring removal or Paganin's filter on the device in float32, then FDK's filter and
# back-projection, against float64 NumPy: tests/test_rings.py's and test_phase.py's
# bound (measured on PoCL: sort 1.9e-7, fw 3.1e-7, Paganin 6.2e-7).
STEPS_RTOL = 1e-5
PHASE = dict(delta_beta=200.0, energy=25.0, distance=0.3, pixel_size=3e-6)  # 77 rows of margin


def geometry(n_angles=60, detector=(33, 72), volume=(24, 40, 40)):
    """An odd number of detector rows: the last row's filter pairs it with zeros."""
    return ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_angles, endpoint=False), detector,
                                 pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                                 volume_shape=volume, voxel_size=1.0)


def counts_of(line_integrals, seed=0):
    """Detector counts of ``line_integrals``, with flats and darks (frames) and noise."""
    rng = np.random.default_rng(seed)
    shape = line_integrals.shape[1:]
    flat = 3000 + 200 * rng.random(shape)
    dark = 100 + 10 * rng.random(shape)
    counts = rng.poisson(dark + (flat - dark) * np.exp(-line_integrals)).astype(np.uint16)
    flats = rng.poisson(np.repeat(flat[None], 3, 0)).astype(np.uint16)
    darks = rng.poisson(np.repeat(dark[None], 2, 0)).astype(np.uint16)
    return counts, flats, darks


def normalised(counts, flats, darks):
    dark = darks.mean(0, dtype=np.float64)
    return (counts - dark) / (flats.mean(0, dtype=np.float64) - dark)


def relative_rms(got, want):
    return float(np.sqrt(np.mean((np.asarray(got, np.float64) - want) ** 2) / np.mean(want ** 2)))


@pytest.fixture(scope="module")
def scan():
    g = geometry()
    line_integrals = phantoms.shepp_logan_cone(g)
    return g, line_integrals.astype(np.float32), counts_of(line_integrals)


def test_rings_go_through_the_line_integrals_and_the_same_passes(cl_device, scan):
    """With ring removal, FDK is the passes' FDK of the corrected line integrals
    (pybp/cone/run.py): the same bits as run.line_integrals then pybp.fdk, and for
    planes whose rows start below the detector's first (the line integrals of their
    rows alone, from an even row). (Ring removal's scratch takes 0.25 GiB: no limit
    here cuts the volume into slabs; the passes' slabs are tested below.)"""
    g, _, (counts, flats, darks) = scan
    options = dict(params=EXACT, progress=False)
    with pytest.warns(RuntimeWarning):
        integrals, _ = run.line_integrals(counts, g, [dict(device=cl_device)], flats=flats,
                                          darks=darks, rings="sort", progress=False)
        want = pybp.fdk(integrals, g, device=cl_device, **options)
        got = pybp.fdk(counts, g, flats=flats, darks=darks, rings="sort", device=cl_device,
                       **options)
        part = pybp.fdk(counts, g, flats=flats, darks=darks, rings="sort", planes=(16, 24),
                        device=cl_device, **options)
    assert np.array_equal(got, want)
    assert np.array_equal(part, want[16:24])
    assert slices.window(g, range(16, 24), range(g.n_angles))[0] > 0  # a window of rows


@pytest.mark.parametrize("params", [EXACT, TEXTURE], ids=["exact", "texture"])
def test_the_stream_equals_the_passes_bit_for_bit(cl_device, scan, params):
    """Line integrals and counts: one device, two pipelines, slabs under a limit,
    planes from a multiple of 16, all equal to ConeBackprojector's passes."""
    if params.family == "texture" and not describe(cl_device).image_support:
        pytest.skip("no images on this device")  # (PoCL and the H100 have them)
    g, line_integrals, (counts, flats, darks) = scan
    options = dict(params=params, progress=False)
    want = pybp.fdk(line_integrals, g, device=cl_device, **options)
    assert relative_rms(want, reference.fdk(line_integrals, g)) < (
        FDK_RTOL if params.family == "exact" else 1e-2)
    for devices, limit in (([cl_device], None), ([cl_device, cl_device], 1 << 20)):
        got = pybp.fdk(line_integrals, g, devices=devices, memory_limit=limit, **options)
        assert np.array_equal(got, want), (len(devices), limit)
    part = pybp.fdk(line_integrals, g, devices=[cl_device], planes=(16, 24), **options)
    assert np.array_equal(part, want[16:24])
    with pytest.warns(RuntimeWarning, match="normalised values had no transmission") as warned:
        want = pybp.fdk(counts, g, flats=flats, darks=darks, device=cl_device, **options)
        got = pybp.fdk(counts, g, flats=flats, darks=darks, devices=[cl_device, cl_device],
                       memory_limit=1 << 20, **options)
    assert np.array_equal(got, want)
    counted = {str(w.message) for w in warned if "normalised values" in str(w.message)}
    assert len(counted) == 1  # the same count either way (a first build may warn too)


def test_two_pocl_devices_give_one_devices_volume_bit_for_bit(tmp_path):
    """POCL_DEVICES="pthread pthread": two OpenCL devices of one PoCL platform, sharing
    the slabs out (under a limit; and a volume one device holds, each then taking a
    slab of its share of the planes), and the rows of ring removal's stream."""
    script = textwrap.dedent("""
        import sys
        import numpy as np, pyopencl as cl, pybp
        from pybp import phantoms
        from pybp.geometry.cone import ConeGeometry
        g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 40, endpoint=False), (21, 48),
                                  pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                                  volume_shape=(32, 24, 24), voxel_size=1.6)
        p = phantoms.shepp_logan_cone(g).astype(np.float32)
        platforms = [pl for pl in cl.get_platforms() if "Portable" in pl.name]
        devices = platforms[0].get_devices() if platforms else []
        if len(devices) != 2:
            sys.exit(f"expected two PoCL devices, found {len(devices)}")
        one = pybp.fdk(p, g, device=devices[0], progress=False, memory_limit=1 << 20)
        # (the wavelets' scratch takes more than 1 MiB: one slab, the rows shared out)
        two = pybp.fdk(p, g, devices=devices, progress=False, rings="fw")
        ref = pybp.fdk(p, g, devices=devices[:1], progress=False, rings="fw")
        print(np.array_equal(pybp.fdk(p, g, devices=devices, progress=False,
                                      memory_limit=1 << 20), one), np.array_equal(two, ref),
              np.array_equal(pybp.fdk(p, g, devices=devices, progress=False), one))
    """)
    env = two_pocl_devices(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize("method", rings.METHODS)
def test_rings_on_each_detector_rows_sinogram_against_numpy(cl_device, scan, method):
    """Counts with a stripe in some columns: the float64 flat-field rule, the NumPy
    ring removal of each detector row's sinogram, and the float64 FDK."""
    g, _, (counts, flats, darks) = scan
    counts = counts.copy()
    counts[:, :, 30] = counts[:, :, 30] * 0.9  # a column less sensitive: a ring
    line_integrals = line_integrals_numpy(normalised(counts, flats, darks))
    params = rings.options(method, None, g.n_angles, g.detector_shape[1])
    sinograms = line_integrals.transpose(1, 0, 2)
    removed = (rings.sort_numpy(sinograms, **params) if method == "sort"
               else wavelets.fw_numpy(sinograms, **params))
    want = reference.fdk(removed.transpose(1, 0, 2), g)
    with pytest.warns(RuntimeWarning):
        got = pybp.fdk(counts, g, flats=flats, darks=darks, rings=method, params=EXACT,
                       device=cl_device, progress=False)
    assert relative_rms(got, want) < STEPS_RTOL
    assert relative_rms(reference.fdk(line_integrals, g), want) > 1e-3  # it does something


def test_phase_retrieval_on_projections_against_numpy(cl_device, scan):
    """Paganin's filter of each normalised projection in float64 NumPy, then the float64
    FDK: the stream's phase stage and FDK within STEPS_RTOL; the rows shared out
    between two pipelines give the same bits."""
    g, _, (counts, flats, darks) = scan
    retrieved = paganin_numpy(normalised(counts, flats, darks), Paganin.create(PHASE))
    want = reference.fdk(retrieved, g)
    got = pybp.fdk(counts, g, flats=flats, darks=darks, phase=PHASE, params=EXACT,
                   device=cl_device, progress=False)
    assert relative_rms(got, want) < STEPS_RTOL
    absorption = reference.fdk(line_integrals_numpy(normalised(counts, flats, darks)), g)
    assert relative_rms(absorption, want) > 1e-2  # it does something
    # (Paganin's scratch alone takes 256 MiB: no limit that cuts this volume into slabs)
    shared = pybp.fdk(counts, g, flats=flats, darks=darks, phase=PHASE, params=EXACT,
                      devices=[cl_device, cl_device], progress=False)
    assert np.array_equal(shared, got)


def test_stream_options_are_checked(cl_device, scan):
    g, line_integrals, (counts, flats, darks) = scan
    with pytest.raises(ValueError, match="phase: retrieval works on the transmission"):
        pybp.fdk(line_integrals, g, phase=PHASE, device=cl_device)
    with pytest.raises(ValueError, match="rings: expected one of"):
        pybp.fdk(line_integrals, g, rings="median", device=cl_device)
    with pytest.raises(ValueError, match="devices: give devices, or one of"):
        pybp.fdk(line_integrals, g, rings="sort", devices=[cl_device], device=cl_device)
    with pytest.raises(ValueError, match="projections: expected"):
        pybp.fdk(line_integrals[:, 1:], g, rings="sort", device=cl_device)
    bad = line_integrals.copy()
    bad[3, 4, 5] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        pybp.fdk(bad, g, devices=[cl_device], progress=False)


def test_the_command_runs_cone_beam_through_the_stream(tmp_path, cl_device, capsys):
    """--devices, --rings and --phase with --geometry; --devices equals one device bit
    for bit, and a resumed streamed run equals the whole run."""
    scan, geometry_path = tmp_path / "scan.h5", tmp_path / "scan-cone.json"
    assert cli.main(["demo", "--cone", "--size", "24", "--write-scan", str(scan)]) == 0
    name = str(cl_device.name)
    base = ["reconstruct", str(scan), "--geometry", str(geometry_path), "--quiet"]

    def volume(out, *options):
        assert cli.main(base + ["-o", str(out), *options]) == 0
        return np.load(out)

    one = volume(tmp_path / "one.npy", "--device", name)
    two = volume(tmp_path / "two.npy", "--devices", f"{name},{name}")
    assert np.array_equal(one, two)
    ringed = volume(tmp_path / "rings.npy", "--device", name, "--rings", "fw")
    assert 0 < np.abs(ringed - one).max()
    phase = ["--phase", "paganin", "--delta-beta", "200", "--energy", "25", "--distance",
             "0.3", "--pixel-size", "3e-6"]
    whole = volume(tmp_path / "phase.npy", "--device", name, *phase)
    assert 0 < np.abs(whole - one).max()
    partial = tmp_path / "resumed"
    assert cli.main(base + ["-o", str(partial), "--device", name, *phase]) == 0
    for k in (0, 5, 23):
        (partial / f"slice_{k:05d}.tif").unlink()
    capsys.readouterr()
    loud = [option for option in base if option != "--quiet"]
    assert cli.main(loud + ["-o", str(partial), "--device", name, "--resume", *phase]) == 0
    assert "resume: 21 of 24 planes" in capsys.readouterr().out
    import tifffile
    resumed = np.stack([tifffile.imread(partial / f"slice_{k:05d}.tif") for k in range(24)])
    assert np.array_equal(resumed, whole)
    code = cli.main(base + ["-o", str(partial), "--device", name, "--resume", "--rings", "fw",
                            *phase])
    assert code == 2 and "rings" in capsys.readouterr().err


def test_dask_workers_run_runs_of_planes_bit_for_bit(cl_device, scan):
    """Two workers in this process, each a task of planes at a time (from multiples of
    16), with ring removal: the volume of one device."""
    distributed = pytest.importorskip("distributed")
    from pybp.distributed import local_cluster

    g, _, (counts, flats, darks) = scan
    options = dict(flats=flats, darks=darks, rings="sort", params=EXACT, progress=False)
    with pytest.warns(RuntimeWarning):
        want = pybp.fdk(counts, g, device=cl_device, **options)
    with local_cluster([cl_device, cl_device]) as cluster, distributed.Client(cluster) as client:
        with pytest.warns(RuntimeWarning):
            got = pybp.fdk(counts, g, client=client, **options)
            part = pybp.fdk(counts, g, client=client, planes=(16, 24), **options)
    assert np.array_equal(got, want)
    assert np.array_equal(part, want[16:24])


def test_the_command_runs_cone_beam_on_a_local_scheduler(tmp_path, cl_device, capsys):
    """--scheduler local with --geometry: worker processes read the scan and write the
    planes as TIFF files, the volume of one device bit for bit; planes deleted and
    --resume on workers again give the same volume bit for bit."""
    pytest.importorskip("distributed")
    import tifffile

    scan_path, geometry_path = tmp_path / "scan.h5", tmp_path / "scan-cone.json"
    assert cli.main(["demo", "--cone", "--size", "32", "--write-scan", str(scan_path)]) == 0
    base = ["reconstruct", str(scan_path), "--geometry", str(geometry_path), "--quiet",
            "--rings", "sort"]
    assert cli.main(base + ["-o", str(tmp_path / "one.npy"), "--device", str(cl_device.name)]) == 0
    capsys.readouterr()
    folder = tmp_path / "planes"
    assert cli.main(base + ["-o", str(folder), "--scheduler", "local", "--devices",
                            f"{cl_device.name},{cl_device.name}"]) == 0
    got = np.stack([tifffile.imread(folder / f"slice_{k:05d}.tif") for k in range(32)])
    assert np.array_equal(got, np.load(tmp_path / "one.npy"))
    for k in (0, 15, 16, 31):  # on either side of the runs of planes the workers take
        (folder / f"slice_{k:05d}.tif").unlink()
    capsys.readouterr()
    loud = [a for a in base if a != "--quiet"]
    assert cli.main(loud + ["-o", str(folder), "--resume", "--scheduler", "local",
                                 "--devices", f"{cl_device.name},{cl_device.name}"]) == 0
    assert "resume: 28 of 32 planes" in capsys.readouterr().out
    resumed = np.stack([tifffile.imread(folder / f"slice_{k:05d}.tif") for k in range(32)])
    assert np.array_equal(resumed, got)
    assert cli.main(base + ["-o", str(tmp_path / "v.npy"), "--scheduler", "local"]) == 2
    assert "folder of TIFF files" in capsys.readouterr().err


@cpu_sized
def test_ctrl_c_stops_the_stream_promptly():
    """256^3 through the stream on two pipelines takes tens of seconds on PoCL with 2
    cores: a SIGINT 3 s in raises KeyboardInterrupt within 2 s wherever it lands (the
    rows' stream or the slabs of both devices), and a new call then works."""
    script = textwrap.dedent("""
        import time, numpy as np, pybp
        from pybp.cl.device import select_device
        device = select_device()
        angles = np.linspace(0, 2 * np.pi, 256, endpoint=False)
        g = pybp.ConeGeometry.circular(angles, (64, 96), 1.0, 300.0, 150.0, (256, 256, 256), 0.25)
        print("started", flush=True)
        try:
            pybp.fdk(np.ones((256, 64, 96), np.float32), g, rings="sort",
                     devices=[device, device], progress=False)
        except KeyboardInterrupt:
            print("caught at", time.time(), flush=True)
            small = pybp.ConeGeometry.circular(angles[::32], (8, 16), 1.0, 300.0, 150.0, (4, 8, 8), 1.0)
            print("a new call works:", pybp.fdk(np.ones((8, 8, 16), np.float32), small,
                                                devices=[device]).shape, flush=True)
    """)
    assert_caught_within_2_s(script, delay=3.0)
