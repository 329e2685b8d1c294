"""Cone beam's slabs written behind (pybp/stream/sources.py's WriteBehind, used by
pybp/cone/backproject.py's SlabRun): into an output that is not in host memory, a
slab comes down into host memory and is written on threads of its own while the
device goes on. The volume is the one-piece volume bit for bit, with the store or
without; the held arrays are taken in turn and wait for their writes; a failed write
stops the run and is raised; Ctrl-C ends within a second, leaving each piece written
whole or not at all; and the command's ``.npy`` resumes after a full disk to the
same bits."""

import _thread
import errno
import threading
import time

import numpy as np
import pytest
from test_cone_files import run

import pybp
from pybp import checks
from pybp.cone import backproject
from pybp.cone import slabs as cone_slabs
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry
from pybp.io.output import disk
from pybp.io import open_scan
from pybp.registry import read_geometry
from pybp.io.output.npy import NpyFile
from pybp.stream import pipeline, sources
from pybp.stream.sources import WriteBehind

EXACT = ConeParams("exact", 4, 2, (8, 4))


class Recorded:
    """An output that is not a NumPy array: ``out[a:b] = planes`` into ``array``, each
    piece recorded with the thread that wrote it; ``gate`` (an Event) holds writes
    back until set; ``fail_at``: the piece (counted from 1) that raises ENOSPC;
    ``seconds``: how long each write takes."""

    def __init__(self, shape, gate=None, fail_at=None, seconds=0.0):
        self.array = np.full(shape, np.nan, np.float32)
        self.shape, self.dtype = self.array.shape, self.array.dtype
        self.gate, self.fail_at, self.seconds = gate, fail_at, seconds
        self.pieces, self.begun, self._lock = [], 0, threading.Lock()

    def __setitem__(self, key, planes):
        with self._lock:
            self.begun += 1
            number = self.begun
        if self.gate is not None:
            self.gate.wait(10)
        if number == self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        time.sleep(self.seconds)
        self.array[key] = planes
        with self._lock:
            self.pieces.append((key.start, key.stop, threading.current_thread().name))


def test_parts_follow_the_host_memory(monkeypatch):
    """Two parts where two of every member's fit the host's share, one where one does,
    none where none does (each part then written as it comes down)."""
    part = (64, 256, 256)  # 16 MiB, of a share of 512 MiB
    monkeypatch.setattr(checks, "host_memory", lambda: 1 << 30)
    assert WriteBehind.parts(part) == 2 and WriteBehind.parts(part, members=16) == 2
    assert WriteBehind.parts(part, members=17) == 1 and WriteBehind.parts(part, 32) == 1
    assert WriteBehind.parts(part, 33) == 0


def test_held_arrays_go_in_turn_and_wait_for_their_writes(monkeypatch):
    """With two parts, the second hold is other memory and does not wait; the third is
    the first's memory and waits until its writes have ended; every piece lands with
    the values handed over, from the writers' threads."""
    monkeypatch.setattr(sources, "WRITE_PIECE_BYTES", 4 * 8 * 8 * 2)  # two planes a piece
    gate = threading.Event()
    out = Recorded((24, 8, 8), gate=gate)
    behind = WriteBehind(parts=2)
    try:
        first = behind.hold((8, 8, 8))
        first[:] = 1
        behind.write(out, 0, first, None)
        second = behind.hold((8, 8, 8))
        assert not np.shares_memory(first, second)
        second[:] = 2
        behind.write(out, 8, second, None)
        held = []
        third = threading.Thread(target=lambda: held.append(behind.hold((8, 8, 8))))
        third.start()
        third.join(0.5)
        assert third.is_alive() and not held  # the first part's writes are held back
        gate.set()
        third.join(10)
        assert held and np.shares_memory(held[0], first)
        held[0][:] = 3
        behind.write(out, 16, held[0], None)
        behind.settle()
    finally:
        behind.close()
    want = np.repeat(np.arange(1, 4, dtype=np.float32), 8)[:, None, None] * np.ones((8, 8))
    assert np.array_equal(out.array, want)
    assert len(out.pieces) == 12  # 3 parts of 4 pieces
    assert {name.split("_")[0] for _, _, name in out.pieces} == {"pybp-write-behind"}


class Gated(np.ndarray):
    """An array whose writes are recorded, the third held back until ``gate`` is set."""

    def __setitem__(self, key, value):
        self.writes.append(time.perf_counter())
        if len(self.writes) == 3:
            self.gate.wait(10)
        super().__setitem__(key, value)


def test_arrays_touched_ahead_are_held_as_made():
    """Given the largest part, the arrays are made at once and touched on a thread;
    holds wait for it and hand out those arrays, not new ones."""
    behind = WriteBehind(parts=2, part=(8, 64, 64))
    try:
        made = list(behind.arrays)
        toucher = behind._toucher
        toucher.thread.join(10)
        assert all(done.is_set() for done in toucher.done)
        out = Recorded((13, 64, 64))
        first = behind.hold((8, 64, 64))
        first[:] = 1
        behind.write(out, 0, first, None)
        second = behind.hold((5, 64, 64))
        second[:] = 2
        behind.write(out, 8, second, None)
        behind.settle()
        assert np.shares_memory(first, made[0]) and np.shares_memory(second, made[1])
        assert np.array_equal(out.array[:, 0, 0], [1] * 8 + [2] * 5)
    finally:
        behind.close()


def test_touching_stops_before_an_array_is_handed_out(monkeypatch):
    """A hold that comes while its array is being touched stops the thread and waits
    for it: no page of the array is written once it is handed out, and the arrays
    after it are left to the copy threads."""
    monkeypatch.setattr(sources, "TOUCH_BYTES", 4 * 1024 * 16)  # 16 pages a block
    gate = threading.Event()
    arrays = []
    for _ in range(2):
        a = np.zeros(1024 * 16 * 8, np.float32).view(Gated)
        a.writes, a.gate = [], gate
        arrays.append(a)
    toucher = sources.Toucher(arrays)
    while len(arrays[0].writes) < 3:  # the thread waits in its third block
        time.sleep(0.001)
    threading.Timer(0.3, gate.set).start()
    started = time.perf_counter()
    assert not toucher.touched(0)
    handed = time.perf_counter()
    assert handed - started >= 0.25 and not toucher.thread.is_alive()
    time.sleep(0.05)
    assert len(arrays[0].writes) == 3 and max(arrays[0].writes) < handed
    assert not arrays[1].writes and not any(done.is_set() for done in toucher.done)


def test_a_failed_write_stops_the_run_and_is_raised(monkeypatch):
    """The second piece's ENOSPC sets ``stop``; the pieces not begun are dropped; the
    error is raised by ``settle`` (and by a later ``hold``)."""
    monkeypatch.setattr(sources, "WRITE_PIECE_BYTES", 4 * 8 * 8)  # a plane a piece
    out = Recorded((16, 8, 8), fail_at=2, seconds=0.05)
    stop = threading.Event()
    behind = WriteBehind(parts=1, threads=1)
    try:
        rows = behind.hold((16, 8, 8))
        rows[:] = 5
        behind.write(out, 0, rows, stop)
        with pytest.raises(OSError) as caught:
            behind.settle(stop)
        assert caught.value.errno == errno.ENOSPC and stop.is_set()
        assert len(out.pieces) == 1 and out.begun <= 3  # one thread: the rest dropped
    finally:
        behind.close()


def _slabs_case(rng, nz=48):
    """A volume of ``nz`` planes, its projections, and a quarter of its bytes."""
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 14, endpoint=False), (41, 64),
                              pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                              volume_shape=(nz, 40, 40), voxel_size=0.6)
    return g, rng.standard_normal((14, 41, 64)).astype(np.float32), nz * 40 * 40 * 4 // 4


def _slabs_taken(monkeypatch) -> list:
    """``(first_plane, n_planes)`` of each slab a run takes, in the order taken."""
    taken = []
    begin = backproject.SlabRun.begin
    monkeypatch.setattr(backproject.SlabRun, "begin", lambda self, slab, pool: (
        taken.append((slab.first_plane, slab.n_planes)), begin(self, slab, pool))[1])
    return taken


@pytest.mark.parametrize("store", [True, False], ids=["store", "no-store"])
def test_slabs_written_behind_equal_one_piece_bit_for_bit(cl_device, rng, store, monkeypatch):
    """A quarter-volume limit (4 slabs or more) into an output that is not an array: the
    slabs are written by the write-behind threads, and the volume is one piece's bit
    for bit, from the store of filtered rows or without; where host memory holds no
    slab, they are written as they come down, to the same bits."""
    g, projections, limit = _slabs_case(rng)
    with pytest.raises(TypeError, match="store: expected True or False"):
        pybp.ConeBackprojector(g, EXACT, store="no", device=cl_device)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=limit, store=store,
                                device=cl_device) as bp:
        assert len(bp.plan.slabs) >= 4 and bool(bp.store_bytes) == store
        out = Recorded(g.volume_shape)
        bp(projections, out=out)
        assert np.array_equal(out.array, one)
        assert {name.split("_")[0] for _, _, name in out.pieces} == {"pybp-write-behind"}
        monkeypatch.setattr(checks, "host_memory", lambda: 1 << 10)
        out = Recorded(g.volume_shape)
        bp(projections, out=out)
        assert np.array_equal(out.array, one)
        assert not any(name.startswith("pybp-write-behind") for _, _, name in out.pieces)


def test_slabs_are_written_by_the_outputs_writers(cl_device, rng, monkeypatch):
    """An output that names its writers (those pybp bench --io found best on its disk)
    is written by that many threads, to the same bits; one that does not, by
    BEHIND_WRITES of them."""
    monkeypatch.setattr(sources, "WRITE_PIECE_BYTES", 4 * 40 * 40)  # a plane a piece
    g, projections, limit = _slabs_case(rng)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=limit,
                                device=cl_device) as bp:
        for writers, most in ((2, 2), (None, sources.BEHIND_WRITES)):
            out = Recorded(g.volume_shape, seconds=0.02)
            out.writers = writers
            bp(projections, out=out)
            assert np.array_equal(out.array, one)
            names = {name for _, _, name in out.pieces}
            assert 2 <= len(names) <= most and len(out.pieces) == g.volume_shape[0]


def test_ctrl_c_while_slabs_are_written_behind_leaves_whole_pieces(cl_device, rng,
                                                                    monkeypatch):
    """A Ctrl-C (KeyboardInterrupt in the calling thread) while the writers work ends
    the call within a second; every piece is written whole or not at all, and those
    written hold the one-piece volume's values."""
    monkeypatch.setattr(sources, "WRITE_PIECE_BYTES", 4 * 40 * 40)  # a plane a piece
    g, projections, limit = _slabs_case(rng)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    sent = []

    class Interrupting(Recorded):
        def __setitem__(self, key, planes):
            if not sent:
                sent.append(time.monotonic())
                _thread.interrupt_main()
            super().__setitem__(key, planes)

    out = Interrupting(g.volume_shape, seconds=0.05)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=limit, store=False,
                                device=cl_device) as bp:
        with pytest.raises(KeyboardInterrupt):
            bp(projections, out=out)
        assert time.monotonic() - sent[0] < 1.0
    written = np.zeros(g.volume_shape[0], bool)
    for a, b, _ in out.pieces:
        written[a:b] = True
    assert written.any() and not written.all()
    assert np.array_equal(out.array[written], one[written])
    assert np.isnan(out.array[~written]).all()  # none begun and left half-written


@pytest.fixture(scope="module")
def scan64(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone64")
    from pybp.cli import commands as cli
    assert cli.main(["demo", "--cone", "--size", "64", "--write-scan",
                     str(folder / "scan.h5")]) == 0
    return folder


def _limit_for_slabs(folder, device, at_least=3) -> str:
    """The command's ``--memory-limit`` that gives the scan's volume in ``at_least``
    slabs on ``device`` (its kernels' passes take more memory on some devices)."""
    with open_scan(str(folder / "scan.h5")) as scan:
        g = read_geometry(folder / "scan-cone.json", scan.angles, scan.shape[1:])
        flats, darks = scan.flats[:], scan.darks[:]
    for kib in range(100, 8000, 20):
        try:
            with pybp.ConeBackprojector(g, filter="ramp", memory_limit=kib << 10, flats=flats,
                                        darks=darks, device=device, store=False) as bp:
                assert len(bp.plan.slabs) >= at_least
                return f"{kib}K"
        except ValueError:  # no slab fits
            continue
    raise AssertionError("no memory limit gives slabs")


def test_the_commands_npy_resumes_after_a_full_disk_to_the_same_bits(scan64, tmp_path,
                                                                       cl_device, capsys,
                                                                       monkeypatch):
    """``pybp reconstruct --geometry`` into a ``.npy`` in 3 slabs or more, written behind: the
    volume of one piece bit for bit; ENOSPC at its third piece: one line naming the
    disk and --resume, and --resume then gives the same bits."""
    monkeypatch.setattr(sources, "WRITE_PIECE_BYTES", 4 * 64 * 64 * 8)  # 8 planes a piece
    argv = ["reconstruct", str(scan64 / "scan.h5"), "--geometry", str(scan64 / "scan-cone.json"),
            "--device", cl_device.name, "--quiet"]
    whole = tmp_path / "whole.npy"
    assert run(argv + ["-o", str(whole)], capsys)[0] == 0
    real, pieces = disk.write_all, []

    def failing(fd, data, offset=None):
        if fd == failing.fd:  # the volume's pieces (the header went before)
            pieces.append(offset)
            if len(pieces) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    failing.fd = None
    real_create = NpyFile._create

    def create(self):
        real_create(self)
        failing.fd = self.fd

    slabs = tmp_path / "slabs.npy"
    limited = argv + ["-o", str(slabs), "--memory-limit", _limit_for_slabs(scan64, cl_device)]
    with monkeypatch.context() as patch:
        patch.setattr(NpyFile, "_create", create)
        patch.setattr(disk, "write_all", failing)
        code, printed = run(limited, capsys)
    assert code != 0 and "disk is full" in printed.err and "--resume" in printed.err
    assert run(limited + ["--resume"], capsys)[0] == 0
    assert np.array_equal(np.load(slabs), np.load(whole))


def test_tapered_slabs_cut_the_last_full_slab_and_come_last():
    """The last slab of the full height is cut into a half, a quarter and the rest (the
    larger first, multiples of the step), taken after every other slab; every plane
    once, each cut slab's windows those of its planes; plans of one slab, or of slabs
    under four steps, stay as they are."""
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 12, endpoint=False), (90, 64),
                              pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                              volume_shape=(200, 40, 40), voxel_size=0.6)
    passes = tuple((a, 4) for a in range(0, 12, 4))
    plan = cone_slabs.SlabPlan(passes, cone_slabs._slabs(g, passes, 64, range(200)), 90, 64)
    assert [s.n_planes for s in plan.slabs] == [64, 64, 64, 8]
    cut = cone_slabs.tapered(g, plan, 8)
    assert [(s.first_plane, s.n_planes) for s in cut] == [
        (0, 64), (64, 64), (192, 8), (128, 32), (160, 16), (176, 16)]
    for s in cut[-3:]:
        assert s.windows == tuple(cone_slabs.window(g, range(s.first_plane, s.first_plane
                                                             + s.n_planes), range(a, a + n))
                                  for a, n in passes)
    assert cone_slabs.tapered(g, plan, 4)[-3:] == cut[-3:]
    odd = cone_slabs.SlabPlan(passes, cone_slabs._slabs(g, passes, 56, range(200)), 90, 56)
    assert [s.n_planes for s in cone_slabs.tapered(g, odd, 8)[-3:]] == [24, 16, 16]
    assert cone_slabs.tapered(g, odd, 16) == odd.slabs  # 56 planes: under 4 x 16
    one = cone_slabs.SlabPlan(passes, cone_slabs._slabs(g, passes, 200, range(200)), 90, 200)
    assert cone_slabs.tapered(g, one, 8) == one.slabs


def test_slabs_written_behind_are_tapered_and_equal_one_piece(cl_device, rng, monkeypatch):
    """Into an output that is not an array, the slabs are taken in the tapered order (the
    last full one cut, thinnest last), and the volume is one piece's bit for bit; into
    an array, in the plan's order."""
    g, projections, quarter = _slabs_case(rng, nz=72)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    taken = _slabs_taken(monkeypatch)
    weights, bars, stream = [], [], pipeline.stream
    def spied(executor, rows, read, write, progress, *rest):
        weights.append(getattr(progress, "weight", 1.0))
        bars.append(getattr(progress, "bar", progress))
        return stream(executor, rows, read, write, progress, *rest)
    monkeypatch.setattr(pipeline, "stream", spied)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=2 * quarter,
                                store=False, device=cl_device) as bp:
        plan = [(s.first_plane, s.n_planes) for s in bp.plan.slabs]
        assert len(plan) >= 2 and bp.plan.slab_planes >= 16
        out = Recorded(g.volume_shape)
        bp(projections, out=out)
        assert np.array_equal(out.array, one)
        want = [(s.first_plane, s.n_planes) for s in cone_slabs.tapered(g, bp.plan, 4)]
        assert taken == want and len(want) == len(plan) + 2
        assert [n for _, n in want[-3:]] == sorted((n for _, n in want[-3:]), reverse=True)
        # the progress line moves by each slab's share of the planes, not a slab's count
        assert weights == [n * len(want) / g.volume_shape[0] for _, n in want]
        assert bars[0].done == bars[0].total == len(want) * g.n_angles
        weights.clear()
        taken.clear()
        array = bp(projections)
        assert taken == plan and np.array_equal(array, one)
        assert weights == [n * len(plan) / g.volume_shape[0] for _, n in plan]


def test_tapered_slabs_shared_by_two_devices_equal_one_piece(cl_device, rng, monkeypatch):
    """Two devices taking the tapered slabs as they are free, into an output that is not
    an array: every plane once, the volume one piece's bit for bit."""
    g, projections, quarter = _slabs_case(rng, nz=96)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    taken = _slabs_taken(monkeypatch)
    out = Recorded(g.volume_shape)
    pybp.fdk(projections, g, params=EXACT, devices=[cl_device, cl_device], out=out,
             memory_limit=quarter, progress=False)
    assert len(taken) >= 5 and min(n for _, n in taken) < max(n for _, n in taken)
    assert sorted(p for a, n in taken for p in range(a, a + n)) == list(range(96))
    assert np.array_equal(out.array, one)
