"""Several pipelines and Dask workers (pybp/distributed.py): the volume of one device,
bit for bit, every slice once.

Two pipelines on one PoCL device stand in for two GPUs (each has a context of its
own, as two GPUs would). The clusters are real Dask clusters: workers as threads of
this process sharing its arrays, and worker processes reading a file and writing TIFF
slices, one of them killed mid-run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile

import pybp
from pybp.cli import commands as cli, scans
from pybp.stream import sources
from pybp.bench.volume import make_scan
from pybp.cl.device import device_list
from pybp.distributed import slabs
from pybp.parallel.prepare import ROWS_ALIGN

distributed = pytest.importorskip("distributed")

N_BINS, N_ANGLES, N_ROWS = 1024, 48, 12  # float32 effects show from 1024 bins
KILL_BINS, KILL_ANGLES, KILL_ROWS = 256, 192, 48  # long enough on PoCL to kill a worker in it


@pytest.fixture(scope="module")
def scan():
    angles, projections, flats, darks = make_scan(N_BINS, N_ANGLES, N_ROWS, 3, seed=5)
    return dict(projections=projections, angles=angles, flats=flats, darks=darks)


@pytest.fixture(scope="module")
def one_device(scan, cl_device):
    return pybp.reconstruct(**scan, device=cl_device, chunk_slices=4, progress=False)


def test_two_pipelines_equal_one(scan, one_device, cl_device):
    stats = {}
    two = pybp.reconstruct(**scan, devices=[cl_device, cl_device], chunk_slices=4,
                           progress=False, stats=stats)
    np.testing.assert_array_equal(two, one_device)
    taken = [d["slices"] for d in stats["devices"]]
    assert sum(taken) == N_ROWS, taken  # no row twice (which device takes what is a race)


def test_flat_field_means_in_blocks_shared_by_pipelines(scan, one_device, cl_device,
                                                       monkeypatch):
    """Means averaged per block of 3 rows, chunks of 4 rows spanning two blocks, two
    pipelines asking for them: the volume is still one device's; the means of a chunk
    are those of its rows."""
    per_row = 2 * 3 * 2 * N_BINS  # darks and flats, 3 frames each, of uint16
    monkeypatch.setattr(sources, "REFERENCE_BYTES", 3 * per_row)
    two = pybp.reconstruct(**scan, devices=[cl_device, cl_device], chunk_slices=4,
                           progress=False)
    np.testing.assert_array_equal(two, one_device)

    flats, darks = scan["flats"], scan["darks"]
    field = sources.FlatField(flats, darks, 2, 11, first_rows=2)
    try:
        assert field.blocks == [(2, 4), (4, 7), (7, 10), (10, 11)]
        for start, count in ((2, 4), (6, 4), (10, 1)):
            dark, flat = field.rows(start, count)
            np.testing.assert_array_equal(dark, darks[:, start:start + count].mean(0))
            np.testing.assert_array_equal(flat, flats[:, start:start + count].mean(0))
        assert not field.loaded and not field.left  # each block dropped once its rows are out
    finally:
        field.close()


def test_two_pipelines_into_a_file_with_rows(scan, one_device, cl_device, tmp_path):
    """An h5py dataset written by two pipelines, slices landing at their own row."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "v.h5", "w") as f:
        out = f.create_dataset("v", (N_ROWS, N_BINS, N_BINS), np.float32)
        pybp.reconstruct(**scan, rows=(4, 12), out=out, devices=[cl_device, cl_device],
                         chunk_slices=4, progress=False)
        np.testing.assert_array_equal(out[4:], one_device[4:])
        assert not out[:4].any()


def test_kept_reconstructor_reuses_its_staging(scan, one_device, cl_device):
    """A Reconstructor keeps each device's buffers and page-locked staging between
    calls (the second call pins nothing a device pinned in the first: pieces are pinned
    when a device first takes a chunk) and gives the one-shot volume each time."""
    projections, angles = scan["projections"], scan["angles"]
    with pybp.Reconstructor(N_BINS, angles, devices=[cl_device, cl_device]) as rec:
        first = rec.reconstruct(projections, scan["flats"], scan["darks"], chunk_slices=4,
                                progress=False)
        staging = [list(bp.executor.pieces_in.arrays) for bp in rec._pipelines.members]
        part = rec.reconstruct(projections, scan["flats"], scan["darks"], rows=(4, 12),
                               chunk_slices=4, progress=False)
        again = [bp.executor.pieces_in.arrays for bp in rec._pipelines.members]
        with pytest.raises(ValueError, match=f"^projections: expected {N_ANGLES} angles x rows "
                                             f"x {N_BINS} bins"):
            rec.reconstruct(projections[:-1], progress=False)
    np.testing.assert_array_equal(first, one_device)
    np.testing.assert_array_equal(part, one_device[4:])
    assert any(staging)
    for first, second in zip(staging, again):  # a device's pinned pieces, kept
        assert not first or (len(first) == len(second) and
                             all(a is b for a, b in zip(first, second)))
    with pytest.raises(ValueError, match="^Reconstructor: closed"):
        rec.reconstruct(projections, progress=False)


def test_devices_errors(scan, cl_device):
    with pytest.raises(ValueError, match="^devices: no device matches 'no-such'"):
        pybp.reconstruct(**scan, devices="no-such", progress=False)
    with pytest.raises(ValueError, match="^devices: give one of device, devices"):
        pybp.reconstruct(**scan, device=cl_device, devices="all", progress=False)
    with pytest.raises(TypeError, match="^client: expected a dask.distributed.Client"):
        pybp.reconstruct(**scan, client="tcp://nowhere:8786", progress=False)
    with pytest.raises(ValueError, match="^devices: expected 'all' or at least one"):
        device_list([])
    assert device_list("all") and all(isinstance(d, type(cl_device)) for d in device_list("all"))


def test_slabs_cover_every_row_once():
    for first, stop, workers in ((0, 2048, 2), (3, 50, 4), (0, 5, 3), (10, 11, 8)):
        parts = slabs(first, stop, workers, ROWS_ALIGN)
        rows = [r for a, b in parts for r in range(a, b)]
        assert rows == list(range(first, stop))
        assert all((a - first) % ROWS_ALIGN == 0 for a, _ in parts)


def test_dask_workers_in_this_process(scan, one_device, cl_device):
    from pybp.distributed import local_cluster

    with local_cluster([cl_device, cl_device]) as cluster, distributed.Client(cluster) as client:
        stats = {}
        volume = pybp.reconstruct(**scan, client=client, chunk_slices=4, progress=False,
                                  stats=stats)
        workers = {s["worker"] for s in stats["slabs"]}
        with pybp.Reconstructor(N_BINS, scan["angles"], client=client) as rec:
            part = rec.reconstruct(scan["projections"], scan["flats"], scan["darks"],
                                   rows=(4, 12), chunk_slices=4, progress=False)
            kept = client.run(_team_of)
            rec.reconstruct(scan["projections"], scan["flats"], scan["darks"], chunk_slices=4,
                            progress=False)
            after = client.run(_team_of)  # kept between calls by the workers that ran a slab
            assert any(kept.values()) and all(after[w] == t for w, t in kept.items() if t)
        assert not any(client.run(_team_of).values())  # freed by close()
    np.testing.assert_array_equal(volume, one_device)
    np.testing.assert_array_equal(part, one_device[4:])
    assert len(workers) == 2
    assert [r for s in stats["slabs"] for r in range(s["first"], s["stop"])] == list(range(N_ROWS))


def _team_of(dask_worker):
    team = getattr(dask_worker, "pybp_kept", None)
    return None if team is None else id(team[1])


def test_dask_client_of_worker_processes_refuses_arrays(scan):
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with pytest.raises(ValueError, match="^client: its workers run in other processes"):
            pybp.reconstruct(**scan, client=client, progress=False)


@pytest.fixture(scope="module")
def kill_scan(tmp_path_factory, cl_device):
    folder = tmp_path_factory.mktemp("cluster")
    angles, projections, flats, darks = make_scan(KILL_BINS, KILL_ANGLES, KILL_ROWS, 3, seed=9)
    for name, array in dict(proj=projections, flats=flats, darks=darks).items():
        np.save(folder / f"{name}.npy", array)
    np.savetxt(folder / "angles.txt", np.degrees(angles))
    expected = pybp.reconstruct(projections, np.radians(np.loadtxt(folder / "angles.txt")),
                                flats, darks, center=KILL_BINS / 2 - 0.5, device=cl_device,
                                progress=False)
    return folder, expected


def _command(folder, output, *extra):
    return ["reconstruct", str(folder / "proj.npy"), "--flats", str(folder / "flats.npy"),
            "--darks", str(folder / "darks.npy"), "--angles", str(folder / "angles.txt"),
            "--center", str(KILL_BINS / 2 - 0.5), "-o", str(output), "--quiet", *extra]


def _assert_whole(output, expected):
    names = sorted(p.name for p in output.iterdir() if p.name != "pybp.json")
    assert names == [f"slice_{i:05d}.tif" for i in range(KILL_ROWS)]  # none missing, no other
    for i, name in enumerate(names):
        np.testing.assert_array_equal(tifffile.imread(output / name), expected[i], err_msg=name)


def test_scheduler_worker_killed_mid_run(kill_scan, tmp_path):
    """``pybp reconstruct --scheduler ADDRESS`` against two worker processes; one is
    killed once slices appear. Dask runs its slabs again elsewhere: every slice is
    there, once, whole, with the values of one device; ``--resume`` then fills in
    slices removed."""
    folder, expected = kill_scan
    output = tmp_path / "slices"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        command = [sys.executable, "-m", "pybp", *_command(folder, output, "--scheduler",
                                                           cluster.scheduler_address)]
        run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        victim = sorted(pids.values())[0]
        deadline = time.monotonic() + 120
        while not list(output.glob("slice_*.tif")) and time.monotonic() < deadline:
            time.sleep(0.02)
        done_before = len(list(output.glob("slice_*.tif")))
        os.kill(victim, signal.SIGKILL)
        _, errors = run.communicate(timeout=300)
        assert run.returncode == 0, errors
        assert done_before < KILL_ROWS, "the worker was killed after the run: make it longer"
        assert victim not in client.run(os.getpid).values()  # it was replaced
    _assert_whole(output, expected)

    for i in (3, 17, 40):
        (output / f"slice_{i:05d}.tif").unlink()
    assert cli.main(_command(folder, output, "--resume", "--scheduler", "local")) == 0
    _assert_whole(output, expected)


def test_a_local_scheduler_takes_the_device_the_environment_names(monkeypatch):
    """``--scheduler local`` without ``--devices`` starts a worker per device that
    ``PYBP_DEVICES`` or ``PYBP_DEVICE`` names, as a worker of any cluster takes, not
    the fastest CPU runtime: resumed there, a volume would mix two runtimes' last bits
    (they differed by 1e-8 on one CI machine)."""
    started = []
    monkeypatch.setattr(pybp.distributed, "local_cluster",
                        lambda devices, processes: started.append(devices) or "cluster")
    monkeypatch.setattr(pybp.distributed, "need_dask",
                        lambda: SimpleNamespace(Client=lambda cluster: cluster))
    args = SimpleNamespace(scheduler="local", devices=None)
    monkeypatch.delenv("PYBP_DEVICES", raising=False)
    monkeypatch.setenv("PYBP_DEVICE", "Portable")
    assert scans.cluster(args) == "cluster" and started == ["Portable"]
    monkeypatch.setenv("PYBP_DEVICES", "0,0")
    scans.cluster(args)
    args.devices = "1"
    scans.cluster(args)
    monkeypatch.delenv("PYBP_DEVICES")
    monkeypatch.delenv("PYBP_DEVICE")
    args.devices = None
    scans.cluster(args)
    assert started == ["Portable", "0,0", "1", "all"]


def test_scheduler_needs_a_folder(kill_scan, tmp_path, capsys):
    folder, _ = kill_scan
    assert cli.main(_command(folder, tmp_path / "v.h5", "--scheduler", "local")) == 2
    assert "output: with --scheduler, workers write slices in parallel" in capsys.readouterr().err
    assert not list(Path(tmp_path).iterdir())
