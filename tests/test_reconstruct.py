"""``pybp.reconstruct`` (pybp/api/volumes.py, pybp/parallel/volumes.py, pybp/stream/): detector
projections with flats and darks to a volume, streamed through the device.

The reference is the same FBP (``Backprojector``) of sinograms normalised on the host in
float64: the device's normalisation, transpose and chunking add at most
``PIPELINE_RTOL`` of relative RMS error."""

import errno
import io
import re
import threading
import time
import warnings

import h5py
import numpy as np
import pytest

import pybp
from pybp import phantoms
from pybp.parallel.centre import normalised_rows
from pybp.stages.normalize import line_integrals_numpy
from pybp.stream import executor, sources
from pybp.geometry.parallel import ParallelGeometry
from pybp.stream.progress import Progress
from pybp.stream.sources import RowBlocks

PIPELINE_RTOL = 1e-6  # float32 normalisation and -log on the device


def make_scan(n_bins, n_angles, n_rows, seed=0, dtype=np.uint16):
    """Projections of the Shepp-Logan phantom's sinogram, row by row more attenuating,
    between noisy darks (~100 counts) and flats (~20000), with Poisson-like noise."""
    rng = np.random.default_rng(seed)
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    sinogram = phantoms.shepp_logan_radon(ParallelGeometry.create(n_bins, angles)) * (4.0 / n_bins)
    flats = rng.normal(20000, 140, (5, n_rows, n_bins))
    darks = rng.normal(100, 10, (4, n_rows, n_bins))
    dark, flat = darks.mean(0), flats.mean(0)
    attenuation = sinogram[:, None, :] * (0.5 + np.arange(n_rows) / n_rows)[None, :, None]
    counts = dark + (flat - dark) * np.exp(-attenuation)
    counts = counts + rng.normal(0, 1, counts.shape) * np.sqrt(counts)
    as_type = (lambda a: np.round(a).astype(dtype)) if np.dtype(dtype).kind in "iu" else \
        (lambda a: a.astype(dtype))
    return angles, as_type(counts), as_type(flats), as_type(darks)


def host_fbp(projections, angles, flats, darks, cl_device, **options):
    """The reference: normalised on the host (float64), then ``Backprojector`` FBP."""
    dark = np.asarray(darks, np.float64).mean(0)
    flat = np.asarray(flats, np.float64).mean(0)
    normalised = -np.log((np.asarray(projections, np.float64) - dark) / (flat - dark))
    sinograms = np.ascontiguousarray(normalised.transpose(1, 0, 2), np.float32)
    bp = pybp.Backprojector(projections.shape[2], angles, device=cl_device, filter="ramp",
                            **options)
    return bp(sinograms)


def relative_rms(got, want):
    return float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want.astype(np.float64) ** 2)))


@pytest.mark.parametrize("n_bins, n_angles, n_rows", [(1024, 64, 5), (130, 90, 9)])
def test_reconstruct_equals_fbp_of_normalised_sinograms(cl_device, n_bins, n_angles, n_rows):
    angles, projections, flats, darks = make_scan(n_bins, n_angles, n_rows)
    got = pybp.reconstruct(projections, angles, flats, darks, device=cl_device, progress=False)
    want = host_fbp(projections, angles, flats, darks, cl_device)
    assert got.shape == (n_rows, n_bins, n_bins) and got.dtype == np.float32
    assert relative_rms(got, want) < PIPELINE_RTOL


def test_one_chunk_equals_many(cl_device):
    """Chunks of one pass and one chunk of all rows give the same volume, bit for bit:
    no seams at chunk boundaries, whatever the number of slots in flight."""
    angles, projections, flats, darks = make_scan(96, 60, 11)
    whole = pybp.reconstruct(projections, angles, flats, darks, device=cl_device,
                             progress=False, slices_per_pass=2)
    stats = {}
    chunked = pybp.reconstruct(projections, angles, flats, darks, device=cl_device,
                               progress=False, slices_per_pass=2, chunk_slices=2, stats=stats)
    assert stats["chunk_slices"] == 2 and stats["slots"] == 3
    np.testing.assert_array_equal(chunked, whole)
    part = pybp.reconstruct(projections, angles, flats, darks, rows=(3, 9), device=cl_device,
                            progress=False, slices_per_pass=2, chunk_slices=4)
    np.testing.assert_array_equal(part, whole[3:9])


@pytest.mark.parametrize("phase", [None, dict(delta_beta=50, energy=20, distance=0.2,
                                                pixel_size=2e-6)], ids=["plain", "phase"])
def test_transfers_in_pieces_give_the_same_volume(cl_device, monkeypatch, phase):
    """Chunks go up and come down through page-locked pieces smaller than a chunk
    (pybp.stream.executor.Pieces), the last piece shorter: the volume is the same,
    bit for bit, with phase retrieval's margins, and clipped values are counted."""
    angles, projections, flats, darks = make_scan(96, 60, 11)
    if phase is None:
        projections[7, 4, 30] = 0  # below the dark: one value clipped
    options = dict(device=cl_device, progress=False, chunk_slices=4, phase=phase)
    with warnings.catch_warnings(record=True) as whole_warned:
        warnings.simplefilter("always")
        whole = pybp.reconstruct(projections, angles, flats, darks, **options)
    # 7 angles of an input piece, 1 slice of an output piece: several of each per chunk.
    monkeypatch.setattr(executor, "PIECE_BYTES", 7 * 96 * 2 * (4 + 2 * 11))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        pieces = pybp.reconstruct(projections, angles, flats, darks, **options)
    np.testing.assert_array_equal(pieces, whole)
    clipped, whole_clipped = ([str(w.message) for w in found if "projections:" in str(w.message)]
                              for found in (warned, whole_warned))
    assert clipped == whole_clipped and len(clipped) == (phase is None)
    assert phase or clipped[0].startswith("projections: 1 of")


class SlowOutput:
    """An output that takes its time over each piece, reading the slices only after a
    sleep, and counts the pieces it is given at once; ``fail_row``: the piece holding
    that row fails as a full disk does."""

    def __init__(self, shape, fail_row=None, seconds=0.02):
        self.shape, self.dtype, self.data = shape, np.dtype(np.float32), np.zeros(shape, np.float32)
        self.fail_row, self.seconds = fail_row, seconds
        self.lock, self.active, self.most, self.threads = threading.Lock(), 0, 0, set()

    def __setitem__(self, key, slices):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.threads.add(threading.get_ident())
        try:
            time.sleep(self.seconds)
            if self.fail_row is not None and key.start <= self.fail_row < key.stop:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.data[key] = slices
        finally:
            with self.lock:
                self.active -= 1


def test_pieces_are_written_on_several_threads_once_down(cl_device, monkeypatch):
    """Downloaded pieces go to the output several at once, each on a thread of its own
    (pybp.stream.executor.WRITES), and a piece's staging takes the next download only
    once its write has ended: an output that reads the slices only after a sleep gets
    the same volume, bit for bit. A write that fails is raised by reconstruct, after
    every other write has ended."""
    angles, projections, flats, darks = make_scan(96, 60, 12)
    options = dict(device=cl_device, progress=False, chunk_slices=4)
    whole = pybp.reconstruct(projections, angles, flats, darks, **options)
    monkeypatch.setattr(executor, "PIECE_BYTES", 96 * 96 * 4)  # a slice per piece
    slow = SlowOutput(whole.shape)
    pybp.reconstruct(projections, angles, flats, darks, out=slow, **options)
    np.testing.assert_array_equal(slow.data, whole)
    assert slow.most == executor.WRITES and len(slow.threads) >= 2
    with pybp.Reconstructor(96, angles, device=cl_device) as kept:  # into an array: one
        kept.reconstruct(projections, flats, darks, out=np.empty_like(whole), progress=False,
                         chunk_slices=4)
        assert kept._pipelines.members[0].executor.writes == 1
        assert len(kept._pipelines.members[0].executor.pieces_out.arrays) == 2
    failing = SlowOutput(whole.shape, fail_row=6)
    with pytest.raises(OSError, match="No space left"):
        pybp.reconstruct(projections, angles, flats, darks, out=failing, **options)
    assert failing.active == 0
    np.testing.assert_array_equal(failing.data[:4], whole[:4])


@pytest.mark.parametrize("kind", ["uint16", "float32", "int32", "float64", "memmap"])
def test_input_types(cl_device, tmp_path, kind):
    dtype = np.uint16 if kind == "memmap" else np.dtype(kind)
    angles, projections, flats, darks = make_scan(64, 48, 6, dtype=dtype)
    want = host_fbp(projections, angles, flats, darks, cl_device)
    if kind == "memmap":
        path = tmp_path / "projections.npy"
        np.save(path, projections)
        projections = np.load(path, mmap_mode="r")
    got = pybp.reconstruct(projections, angles, flats, darks, device=cl_device, progress=False,
                           chunk_slices=4)
    assert relative_rms(got, want) < PIPELINE_RTOL


def test_h5py_input_and_output(cl_device, tmp_path):
    angles, projections, flats, darks = make_scan(64, 40, 7)
    want = host_fbp(projections, angles, flats, darks, cl_device)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f["exchange/data"], f["exchange/data_white"], f["exchange/data_dark"] = projections, flats, darks
    with h5py.File(tmp_path / "scan.h5", "r") as scan, h5py.File(tmp_path / "out.h5", "w") as out:
        volume = out.create_dataset("volume", (7, 64, 64), np.float32, chunks=(1, 64, 64))
        result = pybp.reconstruct(scan["exchange/data"], angles, scan["exchange/data_white"],
                                  scan["exchange/data_dark"], out=volume, device=cl_device,
                                  progress=False, chunk_slices=2)
        assert result is volume
        assert relative_rms(volume[...], want) < PIPELINE_RTOL
        # A row range lands at its own rows of a full-height output.
        full = out.create_dataset("full", (7, 64, 64), np.float32, fillvalue=np.nan)
        pybp.reconstruct(scan["exchange/data"], angles, scan["exchange/data_white"],
                         scan["exchange/data_dark"], rows=(2, 5), out=full, device=cl_device,
                         progress=False)
        assert np.isnan(full[:2]).all() and np.isnan(full[5:]).all()
        assert relative_rms(full[2:5], want[2:5]) < PIPELINE_RTOL


def test_normalised_sinograms_without_log(cl_device):
    """Data already normalised: no flats or darks, ``log=False``: the FBP of the values."""
    rng = np.random.default_rng(5)
    angles = np.linspace(0, np.pi, 50, endpoint=False)
    sinograms = rng.random((3, 50, 80)).astype(np.float32)
    got = pybp.reconstruct(sinograms.transpose(1, 0, 2), angles, log=False, device=cl_device,
                           progress=False)
    want = pybp.fbp(sinograms, angles, device=cl_device)
    assert relative_rms(got, want) < PIPELINE_RTOL


def test_values_without_transmission_are_counted_once(cl_device):
    angles, projections, flats, darks = make_scan(64, 40, 4)
    projections[3, 1, :10] = 0       # below the dark: not positive after normalisation
    with pytest.warns(RuntimeWarning, match="projections: 10 of 10240 normalised values"):
        volume = pybp.reconstruct(projections, angles, flats, darks, device=cl_device,
                                  progress=False)
    assert np.isfinite(volume).all()


def test_bad_inputs_name_the_argument_and_write_nothing(cl_device):
    angles, projections, flats, darks = make_scan(48, 30, 4)
    out = np.full((4, 48, 48), np.nan, np.float32)
    cases = [
        (dict(flats=flats[:, :3]), "flats: frames of 3x48"),
        (dict(flats=None), "darks: given without flats; give both, or flats alone"),
        (dict(angles=angles[:-1]), r"angles: expected one per projection \(30"),
        (dict(rows=(2, 9)), r"rows: expected 0 <= first < stop <= 4"),
        (dict(rows=(3, 3)), "rows:"),
        (dict(flats=darks, darks=flats), "flats: no pixel of the first flat frame is above"),
        (dict(filter=None), "filter:"),
        (dict(out=np.zeros((4, 48, 47), np.float32)), "out: expected shape"),
    ]
    for change, message in cases:
        arguments = dict(projections=projections, angles=angles, flats=flats, darks=darks,
                         out=out, device=cl_device, progress=False)
        arguments.update(change)
        with pytest.raises(ValueError, match=message):
            pybp.reconstruct(**arguments)
        assert np.isnan(out).all(), change
    with pytest.raises(TypeError, match="projections: expected an array"):
        pybp.reconstruct([[[1.0]]], angles)


def test_flats_alone_are_counts_above_a_dark_of_zero(cl_device):
    """One rule of missing frames for both geometries (pybp.checks.flat_field_frames):
    flats without darks normalise against a dark of zero, as cone beam's FDK always
    did: reconstruct, find_center and fdk give the bits of darks of zeros given."""
    angles, projections, flats, darks = make_scan(48, 30, 4)
    zeros = np.zeros_like(darks)
    alone = pybp.reconstruct(projections, angles, flats, device=cl_device, progress=False)
    given = pybp.reconstruct(projections, angles, flats, zeros, device=cl_device, progress=False)
    assert np.array_equal(alone, given) and np.isfinite(alone).all()
    assert pybp.find_center(projections, angles, flats) == \
        pybp.find_center(projections, angles, flats, zeros)
    with pytest.raises(ValueError, match="^darks: given without flats"):
        pybp.find_center(projections, angles, None, darks)
    with pytest.raises(ValueError, match="projections: expected 3-D"):
        pybp.reconstruct(projections[0], angles)


def test_caller_queue_and_closing(cl_device):
    """A caller's queue is used as the compute queue; ``with`` releases device memory,
    and a closed back-projector's executor holds no slots."""
    import pyopencl as cl
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    angles = np.linspace(0, np.pi, 40, endpoint=False)
    data = np.random.default_rng(2).random((3, 40, 64)).astype(np.float32)
    with pybp.Backprojector(64, angles, queue=queue, filter="ramp") as bp:
        assert bp.queue is queue and bp.context == context
        first = bp(data)
        assert bp.executor.slots
    assert not bp.executor.slots
    np.testing.assert_array_equal(pybp.fbp(data, angles, context=context), first)


def test_progress_shows_rows_speed_and_time_left():
    text = io.StringIO()
    progress = Progress(10, 1e9, delay=0.0, stream=text)
    progress.update(4)
    progress.update(6)
    lines = text.getvalue()
    assert "10/10 slices" in lines and "GU/s" in lines and "s left" in lines
    quiet = io.StringIO()
    Progress(10, 1e9, enabled=False, delay=0.0, stream=quiet).update(10)
    assert quiet.getvalue() == ""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Progress(10, 1e9, delay=3600.0, stream=quiet).update(10)  # short work: silent
    assert quiet.getvalue() == ""


def test_progress_of_parts_of_other_sizes_ends_whole():
    """Parts that differ in size move the line by their share (Progress.scaled): after
    each part, the line stands at the share of the planes done, and it ends at its total,
    on a line of its own, whatever the weights' rounding."""
    sizes = [448, 448, 448, 256, 224, 112, 112]  # the tapered slabs of 2048 planes
    total = len(sizes) * 2048
    text = io.StringIO()
    progress = Progress(total, 1e9, delay=0.0, stream=text, what="projections")
    done = 0
    for size in sizes:
        part = progress.scaled(size * len(sizes) / sum(sizes))
        for _ in range(2048 // 16):
            part.update(16)
        done += size
        assert progress.done == pytest.approx(total * done / sum(sizes), rel=1e-12)
    assert progress.done == total
    line = rf"pybp: {total}/{total} projections, [^,]+ GU/s, 0 s left \n$"
    assert re.search(line, text.getvalue())


def test_half_storage_scales_on_the_device(cl_device):
    """Half texels are scaled per slice from their largest value, found on the device
    after filtering: any data scale keeps half's precision (rule ``half``)."""
    from pybp.parallel import verify
    angles, projections, flats, darks = make_scan(128, 64, 4)
    results = {}
    for precision in ("float", "half"):
        results[precision] = pybp.reconstruct(projections, angles, flats, darks,
                                              device=cl_device, progress=False,
                                              precision=precision, slices_per_pass=4)
    for half, full in zip(results["half"], results["float"]):
        verdict = verify.judge_half(half, full)
        assert verdict.passed, verdict


class CountedReads:
    """An input that is not a NumPy array and counts the reads made of it."""

    def __init__(self, data):
        self.data, self.shape, self.dtype, self.reads = data, data.shape, data.dtype, []

    def __getitem__(self, key):
        self.reads.append(key[1])
        return self.data[key]


def test_files_are_read_in_large_row_blocks(cl_device):
    """Inputs that are not arrays are read a block of rows at a time, ahead of the
    device (sources.RowBlocks): few reads, the same volume as from the array."""
    angles, projections, flats, darks = make_scan(64, 40, 13)
    want = pybp.reconstruct(projections, angles, flats, darks, device=cl_device,
                            progress=False, chunk_slices=2, rows=(1, 12))
    source, stats = CountedReads(projections), {}
    got = pybp.reconstruct(source, angles, flats, darks, device=cl_device, progress=False,
                           chunk_slices=2, rows=(1, 12), stats=stats)
    np.testing.assert_array_equal(got, want)
    chunk = stats["chunk_slices"]  # the first block is one chunk, so the device starts early
    # (rows 1..11 are computed in the passes of 4 of the whole volume: from row 0)
    assert [(r.start, r.stop) for r in source.reads] == [(0, chunk), (chunk, 12)]
    blocks = RowBlocks(projections, 2, 13, 2, block_bytes=3 * 40 * 64 * 2)
    assert blocks.blocks == [(2, 4), (4, 7), (7, 10), (10, 13)]
    np.testing.assert_array_equal(blocks.rows(3, 6), projections[:, 3:9])  # spans blocks
    np.testing.assert_array_equal(blocks.rows(9, 4), projections[:, 9:13])
    blocks.close()


def test_copy_blocks_over_threads():
    """Large copies go over the pool in blocks of the first axis, a chunk of few slices
    as well as many projections; every value arrives, cast."""
    rng = np.random.default_rng(3)
    with sources.copy_pools() as (pool, _):
        for shape in ((4, 1100, 2048), (600, 4, 2048)):
            source = rng.random(shape)
            destination = np.zeros(shape, np.float32)
            sources.copy_blocks(pool, destination, source)
            np.testing.assert_array_equal(destination, source.astype(np.float32))


def test_copies_ahead_go_in_order_and_are_waited_for_by_block():
    """``sources.Ahead`` runs its blocks on threads of their own; ``wait(a, b)`` returns
    once every block that covers ``[a, b)`` is done, raises a block's error, and a set
    stop ends a wait for a block that does not finish (Ctrl-C stays prompt)."""
    from pybp.cl.pacing import Stopped

    done, gate = [], threading.Event()

    def work(a, b):
        if a >= 8:
            gate.wait(5)
        if a == 10:
            raise ValueError("block 10")
        done.append((a, b))

    with sources.Ahead(work, [0, 3, 6, 8, 10, 12], threads=2) as ahead:
        ahead.wait(2, 7)  # the blocks [0, 3), [3, 6) and [6, 8)
        assert {(0, 3), (3, 6), (6, 8)} <= set(done)
        stop = threading.Event()
        stop.set()
        started = time.perf_counter()
        with pytest.raises(Stopped):
            ahead.wait(8, 9, stop)
        assert time.perf_counter() - started < 1.0
        gate.set()
        ahead.wait(8, 10)
        with pytest.raises(ValueError, match="block 10"):
            ahead.wait(9, 12)


def test_inputs_from_files_take_larger_chunks(cl_device):
    """Chunks hold at most memory.CHUNK_SLICES slices from arrays, FILE_CHUNK_SLICES
    from inputs read from files (anything not an array), unless chunk_slices or a stage
    (phase retrieval's chunk_rows) says more."""
    from pybp.stream import memory

    angles, projections, flats, darks = make_scan(32, 20, 40)
    sizes = {}
    for name, source, chunk in (("array", projections, None), ("file", CountedReads(projections), None),
                                ("asked", CountedReads(projections), 8)):
        stats = {}
        pybp.reconstruct(source, angles, flats, darks, device=cl_device, progress=False,
                         chunk_slices=chunk, stats=stats)
        sizes[name] = stats["chunk_slices"]
    assert sizes == dict(array=memory.CHUNK_SLICES, file=memory.FILE_CHUNK_SLICES, asked=8)
    # A stage that prefers more rows (phase retrieval, for its margins) still gets them.
    phase = dict(delta_beta=50, energy=20, distance=0.2, pixel_size=2e-6)
    for source in (projections, CountedReads(projections)):
        stats = {}
        pybp.reconstruct(source, angles, flats, darks, device=cl_device, progress=False,
                         phase=phase, stats=stats)
        assert stats["chunk_slices"] > memory.FILE_CHUNK_SLICES


def test_every_path_takes_one_flat_field_rule(cl_device):
    """Parallel beam's normalisation, cone beam's pre-weighting and the centre finder
    make counts the same line integrals (templates/stages/flat_field.cl.mako and its
    float64 twin): a pixel whose flat equals its dark is transparent (0), one below its
    dark takes the floor (-log 1e-6), each counted in one warning."""
    rng = np.random.default_rng(11)
    n_angles, n_rows, n_bins = 24, 6, 32
    flats = rng.uniform(900, 1100, (2, n_rows, n_bins)).astype(np.float32)
    darks = rng.uniform(90, 110, (2, n_rows, n_bins)).astype(np.float32)
    counts = rng.uniform(300, 900, (n_angles, n_rows, n_bins)).astype(np.float32)
    flats[:, 2, 5] = darks[:, 2, 5] = 100.0  # flat equals dark: not a number
    counts[3, 4, 7] = 10.0                   # below the dark: not positive
    with np.errstate(divide="ignore", invalid="ignore"):
        dark, flat = darks.mean(0, np.float64), flats.mean(0, np.float64)
        t = (counts.astype(np.float64) - dark) / (flat - dark)
    want = line_integrals_numpy(t)
    assert want[0, 2, 5] == 0 and want[3, 4, 7] == pytest.approx(-np.log(1e-6))
    np.testing.assert_array_equal(normalised_rows(counts, flats, darks, 0, n_rows), want)

    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    with pytest.warns(RuntimeWarning, match="^projections: 25 of 4608 normalised values"):
        got = pybp.reconstruct(counts, angles, flats, darks, device=cl_device, progress=False)
    given = pybp.reconstruct(want.astype(np.float32), angles, log=False, device=cl_device,
                             progress=False)
    assert np.abs(got - given).max() <= 1e-6 * np.abs(given).max()

    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_angles, endpoint=False),
                                   (n_rows, n_bins), 1.0, 200.0, 100.0, (4, 16, 16), 1.0)
    with pytest.warns(RuntimeWarning, match="1e-6"):
        got = pybp.fdk(counts, g, flats=flats, darks=darks, device=cl_device, progress=False)
    given = pybp.fdk(want.astype(np.float32), g, device=cl_device, progress=False)
    assert np.abs(got - given).max() <= 1e-6 * np.abs(given).max()
