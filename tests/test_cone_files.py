"""Cone beam from files: ``pybp demo --cone --write-scan`` and ``pybp reconstruct
--geometry`` (pybp/cli/cone.py, pybp/io/geometry_file.py, the kinds' readers): the volume against FDK of the
float64-normalised projections, resume bit for bit, the three kinds of geometry
file, and bad files and options named."""

import json
import sys
import textwrap

import numpy as np
import pytest
import tifffile
from test_first_hour import cpu_sized, interrupt

import pybp
from pybp.cl.device import describe
from pybp.cli import commands as cli
from pybp.cone import reference
from pybp.cone.params import ConeParams
from pybp.cone.profiler import default_params
from pybp.geometry.astra import parallel_vectors as astra_parallel_vectors
from pybp.io import open_scan
from pybp.registry import read_geometry
from pybp.io.demo import cone_circular
from pybp.parallel.verify import TOLERANCES

N = 32


def run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr()


def volume(folder, n=N):
    return np.stack([tifffile.imread(folder / f"slice_{k:05d}.tif") for k in range(n)])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone")
    assert cli.main(["demo", "--cone", "--size", str(N), "--write-scan",
                     str(folder / "scan.h5")]) == 0
    return folder


def test_reconstruct_with_a_geometry_file_and_resume(written, tmp_path, cl_device, capsys):
    """The demo's scan and cone.json give the float64 FDK of its float64-normalised
    line integrals, within the rule of the device's default family (exact 1e-5,
    texture 1e-2); planes deleted and --resume give the same volume bit for bit."""
    scan, geometry_path = written / "scan.h5", written / "scan-cone.json"
    out = tmp_path / "volume"
    device = ["--device", str(cl_device.name)]
    code, _ = run(["reconstruct", str(scan), "-o", str(out), "--geometry", str(geometry_path),
                   "--quiet"] + device, capsys)
    assert code == 0
    got = volume(out)
    with open_scan(str(scan)) as s:
        flat, dark = s.flats[:].mean(axis=0), s.darks[:].mean(axis=0)
        line_integrals = -np.log((s.projections[:] - dark) / (flat - dark))
        g = read_geometry(geometry_path, s.angles, s.shape[1:])
    want = reference.fdk(line_integrals, g)
    rule = "exact" if default_params(describe(cl_device)).family == "exact" else "texture"
    assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)) < TOLERANCES[rule]
    for k in (3, 17, 31):
        (out / f"slice_{k:05d}.tif").unlink()
    code, captured = run(["reconstruct", str(scan), "-o", str(out), "--geometry",
                          str(geometry_path), "--resume"] + device, capsys)
    assert code == 0 and "resume: 29 of 32 planes" in captured.out
    assert np.array_equal(volume(out), got)
    code, captured = run(["reconstruct", str(scan), "-o", str(out), "--geometry",
                          str(geometry_path), "--resume"] + device, capsys)
    assert code == 0 and "nothing to reconstruct: all 32 planes are in" in captured.out


def test_the_three_kinds_of_geometry_file(written, tmp_path):
    """circular, ASTRA vectors (text), matrices (.npy) and ASTRA's dicts for one scan: one
    geometry; voxels of other sides as [x, y, z]; an ASTRA dict that does not fit the
    scan is refused by name."""
    with open_scan(str(written / "scan.h5")) as s:
        angles, shape = s.angles, s.shape[1:]
    circular = read_geometry(written / "scan-cone.json", angles, shape)
    options = cone_circular(N)
    t = angles
    so, od, p = options["source_origin"], options["origin_detector"], options["pixel_size"]
    vectors = np.stack([np.sin(t) * so, -np.cos(t) * so, 0 * t, -np.sin(t) * od, np.cos(t) * od,
                        0 * t, np.cos(t) * p, np.sin(t) * p, 0 * t, 0 * t, 0 * t, p + 0 * t], 1)
    np.savetxt(tmp_path / "vectors.txt", vectors)
    np.save(tmp_path / "matrices.npy", circular.matrices * 7.0)
    volume_keys = {"volume_shape": [N] * 3, "voxel_size": 1.0}
    for kind, name in (("vectors", "vectors.txt"), ("matrices", "matrices.npy")):
        (tmp_path / f"{kind}.json").write_text(json.dumps({kind: name, **volume_keys}))
        g = read_geometry(tmp_path / f"{kind}.json", angles, shape)
        np.testing.assert_allclose(g.matrices, circular.matrices, atol=1e-9)
    # voxels of other sides (x, y, z)
    (tmp_path / "boxes.json").write_text(json.dumps(
        {"vectors": "vectors.txt", "volume_shape": [N // 2, N, N], "voxel_size": [1, 1, 2]}))
    boxes = read_geometry(tmp_path / "boxes.json", angles, shape)
    assert boxes.voxel_size == (1.0, 1.0, 2.0) and boxes.volume_shape == (N // 2, N, N)
    # ASTRA's own dicts, as JSON: 'cone' (its angles the scan's) and 'cone_vec'
    vol_geom = {"GridRowCount": N, "GridColCount": N, "GridSliceCount": N}
    cone = {"type": "cone", "DetectorSpacingX": p, "DetectorSpacingY": p,
            "DetectorRowCount": shape[0], "DetectorColCount": shape[1],
            "ProjectionAngles": list(angles), "DistanceOriginSource": so,
            "DistanceOriginDetector": od}
    cone_vec = {"type": "cone_vec", "DetectorRowCount": shape[0],
                "DetectorColCount": shape[1], "Vectors": vectors.tolist()}
    for proj_geom in (cone, cone_vec):
        path = tmp_path / f"astra-{proj_geom['type']}.json"
        path.write_text(json.dumps({"astra": {"proj_geom": proj_geom, "vol_geom": vol_geom}}))
        g = read_geometry(path, angles, shape)
        np.testing.assert_allclose(g.matrices, circular.matrices, atol=1e-9)
    # parallel rays: ASTRA's 'parallel3d' (its angles the scan's) and 'parallel3d_vec'
    # dicts, and parallel_vectors rows, one ParallelVectorGeometry
    parallel = {"type": "parallel3d", "DetectorSpacingX": p, "DetectorSpacingY": p,
                "DetectorRowCount": shape[0], "DetectorColCount": shape[1],
                "ProjectionAngles": list(angles)}
    rows = pybp.ParallelVectorGeometry.from_astra(parallel, vol_geom)
    np.savetxt(tmp_path / "rays.txt", astra_parallel_vectors(parallel)[0])
    (tmp_path / "rays.json").write_text(json.dumps({"parallel_vectors": "rays.txt",
                                                    **volume_keys}))
    parallel_vec = {"type": "parallel3d_vec", "DetectorRowCount": shape[0],
                    "DetectorColCount": shape[1],
                    "Vectors": astra_parallel_vectors(parallel)[0].tolist()}
    for proj_geom in (parallel, parallel_vec, None):
        path = tmp_path / "rays.json"
        if proj_geom is not None:
            path = tmp_path / f"astra-{proj_geom['type']}.json"
            path.write_text(json.dumps({"astra": {"proj_geom": proj_geom, "vol_geom": vol_geom}}))
        g = read_geometry(path, angles, shape)
        assert isinstance(g, pybp.ParallelVectorGeometry), path
        np.testing.assert_allclose(g.matrices, rows.matrices, atol=1e-9)
    bad = [
        ({"astra": {"proj_geom": dict(parallel, ProjectionAngles=list(angles + 0.01)),
                    "vol_geom": vol_geom}}, "its ProjectionAngles differ from the scan's"),
        ({"astra": {"proj_geom": dict(cone, ProjectionAngles=list(angles + 0.01)),
                    "vol_geom": vol_geom}}, "its ProjectionAngles differ from the scan's"),
        ({"astra": {"proj_geom": dict(cone, DetectorColCount=shape[1] + 2),
                    "vol_geom": vol_geom}}, "astra: a detector of"),
        ({"astra": {"proj_geom": cone, "vol_geom": vol_geom}, "voxel_size": 1.0},
         "voxel_size: the volume is the astra vol_geom's"),
        ({"astra": {"proj_geom": cone}}, "astra: expected an object of proj_geom and vol_geom"),
    ]
    for spec, message in bad:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(spec))
        with pytest.raises(ValueError, match=rf"^geometry: {path}: .*{message}"):
            read_geometry(path, angles, shape)


def test_bad_geometry_files_and_options_are_named(written, tmp_path, capsys):
    scan = str(written / "scan.h5")
    cases = [
        ("{", "not JSON"),
        ("[1, 2]", "one JSON object"),
        (json.dumps({"volume_shape": [4] * 3, "voxel_size": 1}), "exactly one of"),
        (json.dumps({"circular": {"source_origin": 10}, "volume_shape": [4] * 3,
                     "voxel_size": 1}), "circular: needs 'origin_detector'"),
        (json.dumps({"circular": {"source_origin": 100, "origin_detector": 50, "pixel_size": 1,
                                  "tilt": 3}, "volume_shape": [4] * 3, "voxel_size": 1}),
         "unknown key 'tilt'"),
        (json.dumps({"vectors": "missing.txt", "volume_shape": [4] * 3, "voxel_size": 1}),
         "does not exist"),
        (json.dumps({"circular": {"source_origin": -1, "origin_detector": 50, "pixel_size": 1},
                     "volume_shape": [4] * 3, "voxel_size": 1}), "source_origin"),
        (json.dumps({"circular": {"source_origin": 100, "origin_detector": 50, "pixel_size": 1},
                     "volume_shape": [4] * 3, "voxel_size": 1, "size": 3}), "unknown key 'size'"),
    ]
    for i, (text, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.json"
        path.write_text(text)
        code, captured = run(["reconstruct", scan, "-o", str(tmp_path / f"out{i}"), "--geometry",
                              str(path)], capsys)
        assert code == 2 and message in captured.err and "geometry" in captured.err
        assert not (tmp_path / f"out{i}").exists()
    code, captured = run(["reconstruct", scan, "-o", str(tmp_path / "o"), "--geometry",
                          str(written / "scan-cone.json"), "--center", "3"], capsys)
    assert code == 2 and "--center" in captured.err


def test_bench_cone_runs_and_verifies(capsys, cl_device):
    """``pybp bench --cone`` at a toy size: every set verified, the table, the end to
    end rows and the split into slabs bit for bit."""
    code, captured = run(["bench", "--cone", "--size", "32", "--projections", "8", "--detector",
                          "24x48", "--repeats", "1", "--device", str(cl_device.name)], capsys)
    assert code == 0, captured.err
    out = captured.out
    assert "| exact | double | 16 | 16 | 32x8 | exact" in out and "FAILED exact" in out  # float
    assert "| float32 |" in out and "| uint16 |" in out
    assert "bit for bit as one piece: yes" in out or "memory limit of 1/4" in out


def test_tune_cone_saves_what_the_profiler_then_uses(capsys, cl_device, tmp_path, monkeypatch):
    from pybp.cone import profiler

    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path))
    d = describe(cl_device)
    assert profiler.tuned(d) is None
    code, captured = run(["tune", "--cone", "--size", "16", "--budget", "1", "--repeats", "1",
                          "--device", str(cl_device.name)], capsys)
    assert code == 0
    best = captured.out.strip().splitlines()[-1].split(": ", 1)[1]
    assert profiler.default_params(d).key() == best
    if "saved" in captured.out:  # a set faster than the current choice, timed in turns
        assert profiler.tuned(d).key() == best
    else:  # the current choice was fastest, or the faster set was not faster in turns
        assert ("stays" in captured.out or "in turns: not kept" in captured.out) and \
            profiler.tuned(d) is None


def test_tune_cone_keeps_only_what_beats_the_current_choice_in_turns(cl_device, tmp_path,
                                                                     monkeypatch):
    """A set that the search timed faster but that, timed again beside the current
    choice in turns, is slower is not saved; one that is faster then is."""
    from pybp.cone import profiler
    from pybp.tune import cone as cone_tuning

    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path))
    d = describe(cl_device)
    current = profiler.default_params(d)
    for again, saved in ((2.0, False), (0.5, True)):
        calls = {"n": 0}

        def seconds(g, params, queue, repeats, distance_weight=True):
            calls["n"] += 1
            if params == current:
                return 1.0
            if params.voxels_per_item == 4 and params.family == current.family:
                return 0.5 if calls["n"] < 40 else again  # fast in the search
            return 3.0

        monkeypatch.setattr(cone_tuning, "kernel_seconds", seconds)
        monkeypatch.setattr(cone_tuning, "verify", lambda p, q: ("exact", 0.0, True))
        chosen = cone_tuning.tune(device=cl_device, size=16, repeats=1, budget=30,
                                  log=lambda *_: None)
        assert (chosen != current) == saved
        assert (profiler.tuned(d) is not None) == saved


@cpu_sized
def test_ctrl_c_stops_a_long_fdk_promptly():
    """256^3 from 256 projections takes tens of seconds on PoCL with 2 cores: a SIGINT
    2 s in raises KeyboardInterrupt within 2 s (launches of about 0.1 s), and the
    kept object's device then serves a new call."""
    script = textwrap.dedent("""
        import time, numpy as np, pybp
        angles = np.linspace(0, 2 * np.pi, 256, endpoint=False)
        g = pybp.ConeGeometry.circular(angles, (64, 96), 1.0, 300.0, 150.0, (256, 256, 256), 0.25)
        bp = pybp.ConeBackprojector(g, filter="ramp")
        print("started", flush=True)
        try:
            bp(np.ones((256, 64, 96), np.float32))
        except KeyboardInterrupt:
            print("caught at", time.time(), flush=True)
            small = pybp.ConeGeometry.circular(angles[::32], (8, 16), 1.0, 300.0, 150.0, (4, 8, 8), 1.0)
            print("a new call works:", pybp.fdk(np.ones((8, 8, 16), np.float32), small).shape,
                  flush=True)
    """)
    assert_caught_within_2_s(script, delay=2.0)


def assert_caught_within_2_s(script, delay):
    """Run ``script`` (it prints "started", then "caught at TIME" on KeyboardInterrupt
    and the shape of a new call), send SIGINT ``delay`` s after it started: caught
    within 2 s, and the new call works."""
    _, code, out, err, sent = interrupt([sys.executable, "-c", script], wait_for="started",
                                        delay=delay)
    assert code == 0, err
    caught = float(out.split("caught at")[1].split()[0])
    assert caught - sent < 2.0
    assert "a new call works: (4, 8, 8)" in out


def test_counts_are_normalised_on_the_device(tmp_path, cl_device):
    """Counts with flats and darks, from an array and from an h5py dataset (read through
    the copy threads block by block: a pass's staging over 8 MB): the FDK of the float64
    line integrals within 1e-5 (exact family), the two sources bit for bit alike, and
    values with no transmission counted in one warning."""
    import h5py

    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 32, endpoint=False), (256, 600),
                                   1.0, 2000.0, 1000.0, (8, 16, 16), 22.0)
    rng = np.random.default_rng(5)
    counts = rng.integers(100, 4000, (32, 256, 600)).astype(np.uint16)
    flats = rng.integers(4900, 5100, (3, 256, 600)).astype(np.uint16)
    darks = rng.integers(40, 60, (3, 256, 600)).astype(np.uint16)
    flat, dark = flats.mean(axis=0), darks.mean(axis=0)
    lines = -np.log((counts - dark) / (flat - dark))
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f["data"] = counts
    params = ConeParams("exact", 4, 16, (16, 8))
    with pybp.ConeBackprojector(g, params, filter="ramp", flats=flats, darks=darks,
                                device=cl_device) as bp:
        assert bp.plan.row_stride * 600 * 4 * 16 > 8 << 20
        got = bp(counts)
        want = reference.fdk(lines, g)
        assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)) < 1e-5
        with h5py.File(tmp_path / "p.h5", "r") as f:
            assert np.array_equal(bp(f["data"]), got)
        dead = counts.copy()
        dead[:, 100, 7] = 10  # below the dark: no transmission
        with pytest.warns(RuntimeWarning, match="^projections: 32 of .* normalised values had no "
                                                "transmission"):
            bp(dead)
    with pytest.raises(ValueError, match="flats"):
        pybp.ConeBackprojector(g, params, flats=flats, device=cl_device)  # no filter
    with pytest.raises(ValueError, match="darks"):
        pybp.ConeBackprojector(g, params, filter="ramp", darks=darks, device=cl_device)
    with pytest.raises(ValueError, match="flats"):
        pybp.ConeBackprojector(g, params, filter="ramp", flats=flats[:, :10], device=cl_device)
