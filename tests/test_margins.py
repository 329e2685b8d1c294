"""Row margins (``Stage.margin``, pybp/stages/base.py): a stage that needs rows beyond a
chunk's own gets them from the schedule, the stages before it work on them too, and it
leaves them out, so that chunked results equal one pass over all rows. Checked
against a float64 NumPy reference with a test stage (a mean over neighbouring rows,
the edge row replicated), through the bare stream and through the parallel-beam chain
of ``pybp.reconstruct`` (slabs, files, two pipelines)."""

import dataclasses

import numpy as np
import pyopencl as cl
import pytest

import pybp
from pybp.cl import codegen
from pybp.cl.device import describe
from pybp.cl.kernel import Arg, signature
from pybp.parallel.prepare import ParallelRecipe
from pybp.stages.base import Need, Stage
from pybp.stream import pipeline, sources
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import MEMORY_SHARE, MemoryPlan
from test_reconstruct import PIPELINE_RTOL, CountedReads, host_fbp, make_scan, relative_rms

ITEMS = 64  # work-items along a row
STREAM_RTOL = 2e-6  # float32 sums of at most 7 rows, against float64

MEAN_ARGS = (Arg("rows_in", "__global const float *", "count x width"),
             Arg("count", "const int"),
             Arg("width", "const int"),
             Arg("radius", "const int"),
             Arg("before", "const int", "first rows left out"),
             Arg("rows_out", "__global float *", "(count - crop) x width"))
MEAN = f"""
__kernel void mean_rows(
{signature(MEAN_ARGS)}
{{
    const int x = get_global_id(0), y = get_global_id(1);  /* y: a row written */
    if (x >= width) return;
    float sum = 0.0f;
    for (int k = -radius; k <= radius; ++k)  /* rows beyond the first or last: the edge */
        sum += rows_in[clamp(y + before + k, 0, count - 1) * width + x];
    rows_out[y * width + x] = sum / (2 * radius + 1);
}}
"""
AFFINE_ARGS = (Arg("values_in", "__global const float *"),
               Arg("n", "const int"),
               Arg("scale", "const float"),
               Arg("offset", "const float"),
               Arg("values_out", "__global float *"))
AFFINE = f"""
__kernel void affine(
{signature(AFFINE_ARGS)}
{{
    const int i = get_global_id(0);
    if (i < n) values_out[i] = scale * values_in[i] + offset;
}}
"""


class RowMean(Stage):
    """Buffer ``target`` = the mean of ``2 * radius + 1`` rows of ``source`` around each
    row (rows of ``width`` floats): a margin of ``radius`` rows."""

    name = "row mean"

    def __init__(self, context, device, width, radius, source, target):
        self.width, self.margin, self.source, self.target = width, radius, source, target
        self.needs = (Need(source, width * 4), Need(target, width * 4))
        self.kernel = codegen.declared(context, device, MEAN, "mean_rows", MEAN_ARGS)

    def enqueue(self, chunk):
        b = chunk.buffers
        return [(self.name, self.kernel(
            chunk.queue, (-(-self.width // ITEMS) * ITEMS, chunk.rows_out), (ITEMS, 1),
            rows_in=b[self.source], count=chunk.count, width=self.width, radius=self.margin,
            before=chunk.crop[0], rows_out=b[self.target]))]


class Affine(Stage):
    """Buffer ``target`` = ``scale * source + offset``, row for row (no margin)."""

    name = "affine"

    def __init__(self, context, device, width, scale, offset, source, target):
        self.width, self.scale, self.offset = width, scale, offset
        self.source, self.target = source, target
        self.needs = (Need(source, width * 4), Need(target, width * 4))
        self.kernel = codegen.declared(context, device, AFFINE, "affine", AFFINE_ARGS)

    def enqueue(self, chunk):
        n, b = chunk.count * self.width, chunk.buffers
        return [(self.name, self.kernel(
            chunk.queue, (-(-n // ITEMS) * ITEMS,), (ITEMS,), values_in=b[self.source], n=n,
            scale=self.scale, offset=self.offset, values_out=b[self.target]))]


def row_mean(values, radius):
    """The float64 reference of :class:`RowMean` over all rows (axis 0)."""
    padded = np.pad(np.asarray(values, np.float64), [(radius, radius)] + [(0, 0)] *
                    (values.ndim - 1), mode="edge")
    return sum(padded[k:k + len(values)] for k in range(2 * radius + 1)) / (2 * radius + 1)


def chain(context, device, width):
    """An affine map, means over 5 and over 7 rows, another affine map: margins of 2 and
    3 rows, one after the other, between stages without."""
    return [Affine(context, device, width, 2.0, 1.0, "a", "b"),
            RowMean(context, device, width, 2, "b", "c"),
            RowMean(context, device, width, 3, "c", "d"),
            Affine(context, device, width, 0.5, -1.0, "d", "e")]


def chain_reference(values):
    return 0.5 * row_mean(row_mean(2.0 * np.asarray(values, np.float64) + 1.0, 2), 3) - 1.0


@pytest.mark.parametrize("chunk, threads, rows, share", [
    (1, True, None, True), (4, True, None, True), (4, False, None, True), (23, True, None, True),
    (4, True, None, False),
    (2, True, (5, 17), True),   # a slab: margins read the rows around it
    (3, True, (0, 2), True),    # fewer rows than the margins
])
def test_chunked_margins_equal_one_pass(cl_device, rng, chunk, threads, rows, share):
    n_rows, width = 23, 50
    data = rng.uniform(-1, 1, (n_rows, width)).astype(np.float32)
    first, stop = rows or (0, n_rows)
    device, context = describe(cl_device), cl.Context([cl_device])
    stages = chain(context, device, width)
    memory = MemoryPlan.create(stages, device, stop - first, chunk_slices=chunk,
                               own=("a", "e") if share else None)
    assert memory.chunk_slices == min(chunk, stop - first) and memory.margin == 5
    layout = Layout("a", np.dtype(np.float32), (width,), 0, "e", (width,))
    executor = Executor(device, context)
    executor.threads = threads  # False: the serial path of one-thread implementations
    executor.reserve(stages, layout, memory)
    # Each buffer holds the rows its stages see: 'd' is read by a stage without margin
    # after a margin of 3, 'e' holds a chunk's own rows.
    assert [memory.rows(k) for k in "abcde"] == [memory.chunk_slices + r for r in (10, 10, 10, 6, 0)]
    assert executor.slots[0].buffers["d"].size == (memory.chunk_slices + 6) * width * 4
    # The slots share the buffers between the first stage's input and the last's output.
    assert memory.work == (("b", "c", "d") if share else ())
    if len(executor.slots) > 1:
        first_slot, second_slot = executor.slots[:2]
        assert [first_slot.buffers[k] == second_slot.buffers[k] for k in "abcde"] == [
            False, share, share, share, False]

    spans, out = [], np.full((stop - first, width), np.nan, np.float32)

    def read(span):
        spans.append(span)
        return data[first + span.first:first + span.first + span.rows], None

    def write(start, count, slices):
        out[start:start + count] = slices

    schedule = pipeline.Rows(stop - first, before=first, after=n_rows - stop)
    pipeline.stream(executor, schedule, read, write)
    executor.close()

    want = chain_reference(data)[first:stop]
    assert np.abs(out - want).max() < STREAM_RTOL * np.abs(want).max()
    assert sum(s.count for s in spans) == stop - first
    assert all(s.before == min(5, first + s.start) and s.after == min(5, n_rows - first - s.start - s.count)
               for s in spans)
    if len(spans) > 1:  # the test can fail: chunks without their margins would differ
        seams = np.concatenate([chain_reference(data[first + s.start:first + s.start + s.count])
                                for s in sorted(spans, key=lambda s: s.start)])
        assert np.abs(seams - want).max() > 100 * STREAM_RTOL * np.abs(want).max()


def test_released_memory_is_made_again_and_the_staging_kept(cl_device, rng):
    """``release_memory`` frees the slots' device buffers between runs (another phase
    may use the memory) and keeps the page-locked staging; the next reserve makes
    new buffers, in the pieces pinned before, and streams the same values."""
    n_rows, width = 23, 50
    data = rng.uniform(-1, 1, (n_rows, width)).astype(np.float32)
    device, context = describe(cl_device), cl.Context([cl_device])
    stages = chain(context, device, width)
    memory = MemoryPlan.create(stages, device, n_rows, chunk_slices=4, own=("a", "e"))
    layout = Layout("a", np.dtype(np.float32), (width,), 0, "e", (width,))
    runs = []
    with Executor(device, context) as executor:
        for _ in range(2):
            executor.reserve(stages, layout, memory)
            slots, out = executor.slots, np.empty_like(data)

            def write(start, count, slices):
                out[start:start + count] = slices
            pipeline.stream(executor, n_rows, lambda span: (
                data[span.first:span.first + span.rows], None), write)
            runs.append((slots, executor.pieces_in.arrays, out))  # (pinned when first used)
            executor.release_memory()
            assert executor.slots == [] and executor.memory is None
    (slots, pieces, first), (slots_again, pieces_again, second) = runs
    assert slots_again is not slots and pieces_again is pieces and len(pieces) == 2
    assert np.array_equal(first, second)
    assert np.abs(first - chain_reference(data)).max() < STREAM_RTOL


@pytest.mark.parametrize("piece_rows", [3, 1])
def test_stages_in_place_stream_each_chunk_before_the_next_overwrites_it(
        cl_device, rng, monkeypatch, piece_rows):
    """A layout whose output is its input buffer (cone beam's store fill): the next
    chunk of a slot goes up only once the last one is down, whether it was copied into
    staging ahead (two pieces of 3 rows hold a chunk of 4) or piece by piece as it goes
    up (four pieces of 1 row do not). Without that wait, chunks come down overwritten."""
    from pybp.stream import executor as executor_module

    n_rows, width = 23, 50
    monkeypatch.setattr(executor_module, "PIECE_BYTES", piece_rows * width * 4)
    data = rng.uniform(-1, 1, (n_rows, width)).astype(np.float32)
    device, context = describe(cl_device), cl.Context([cl_device])
    stages = [Affine(context, device, width, 2.0, 1.0, "a", "a")]
    memory = MemoryPlan.create(stages, device, n_rows, chunk_slices=4, slots=2, own=("a",))
    layout = Layout("a", np.dtype(np.float32), (width,), 0, "a", (width,))
    out = np.full_like(data, np.nan)

    def write(start, count, slices):
        out[start:start + count] = slices
    with Executor(device, context) as executor:
        executor.reserve(stages, layout, memory)
        assert len(executor.slots) == 2 and memory.chunk_slices == 4
        pipeline.stream(executor, n_rows, lambda span: (
            data[span.first:span.first + span.rows], None), write)
        assert len(executor.pieces_in.spans((4, width))) == -(-4 // piece_rows)
    want = 2.0 * data.astype(np.float64) + 1.0
    assert np.abs(out - want).max() < STREAM_RTOL * np.abs(want).max()


def test_shared_work_buffers_make_chunks_larger(cl_device):
    """With margins, every chunk pays for its margin rows: the slots sharing the
    buffers only the stages touch leaves room for larger chunks, within the same
    share of device memory."""
    width = 4096
    device, context = describe(cl_device), cl.Context([cl_device])
    stages = chain(context, device, width)
    for stage in stages:
        stage.chunk_rows = 10 ** 6
    small = dataclasses.replace(device, global_memory=64 << 20, max_allocation=1 << 30)
    alone, shared = (MemoryPlan.create(stages, small, 10 ** 6, own=own)
                     for own in (None, ("a", "e")))
    assert alone.work == () and shared.work == ("b", "c", "d")
    assert shared.chunk_slices > 1.5 * alone.chunk_slices, (alone, shared)
    for plan in (alone, shared):
        assert plan.slots * plan.slot_bytes + plan.work_bytes <= MEMORY_SHARE * small.global_memory


def test_one_memory_limit_for_both_geometries(cl_device):
    """``memory_limit`` is one rule for both geometries (pybp.stream.memory.Budget):
    parallel beam's chunks are cut to fit it, with the same slices bit for bit, and a
    limit that holds no slice is one error naming it; bad values are refused alike."""
    rng = np.random.default_rng(3)
    angles = np.linspace(0, np.pi, 96, endpoint=False)
    sinograms = rng.standard_normal((8, 96, 128)).astype(np.float32)

    def kept(bp):  # device bytes of the run: the slots, the work buffers, what stages share
        m = bp.executor.memory
        return m.slots * m.slot_bytes + m.work_bytes + sum(
            stage.shared_bytes for stage in bp.executor.stages)

    with pybp.Backprojector(128, angles, filter="ramp", device=cl_device) as bp:
        whole = bp(sinograms)
        default, plan = kept(bp), bp.executor.memory
    # Room for one slot of the same chunks (narrower chunks would take narrower kernel
    # passes, whose values differ in their last bits on a GPU).
    limit = default - (plan.slots - 1) * plan.slot_bytes
    with pybp.Backprojector(128, angles, filter="ramp", device=cl_device,
                            memory_limit=limit) as bp:
        assert np.array_equal(bp(sinograms), whole)
        assert kept(bp) <= limit < default and bp.executor.memory.slots < plan.slots
    with pytest.raises(ValueError, match=r"^memory_limit: 1.0 KiB hold no chunk of one 128x128"):
        pybp.Backprojector(128, angles, device=cl_device, memory_limit=1024)
    small = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), (8, 8),
                                       1.0, volume_shape=(8, 8, 8), voxel_size=0.5,
                                       source_origin=50.0, origin_detector=50.0)
    for bad in (True, -1, 0.5, float("inf"), "2G"):
        for make in (lambda: pybp.Backprojector(128, angles, memory_limit=bad,
                                                device=cl_device),
                     lambda: pybp.ConeBackprojector(small, memory_limit=bad, device=cl_device)):
            with pytest.raises(ValueError, match="^memory_limit: expected a positive, finite"):
                make()


def test_row_blocks_with_margins_drop_each_block_once_read():
    """Files are read a block of rows at a time (sources.RowBlocks); with margins a
    chunk reads rows of its neighbours' blocks, and a block is dropped only once every
    chunk that could read it has."""
    data = np.arange(3 * 30 * 2).reshape(3, 30, 2)
    blocks = sources.RowBlocks(data, 10, 20, 3, block_bytes=4 * 3 * 2 * data.itemsize,
                               margin=2, n_rows=30)
    try:
        assert blocks.blocks == [(8, 11), (11, 15), (15, 19), (19, 22)]
        for start in range(10, 20, 2):
            first, stop = max(8, start - 2), min(22, start + 4)
            got = blocks.rows(first, stop - first, own=(start, 2))
            np.testing.assert_array_equal(got, data[:, first:stop])
            # Blocks no chunk to come reads are gone; the others are still there.
            assert all(b + 2 > start + 2 for a, b in (blocks.blocks[k] for k in blocks.left))
        assert not blocks.left and not blocks.loaded
    finally:
        blocks.close()


class MeanThenFilter(RowMean):
    """The mean over detector rows of the normalised sinograms, written back to them
    (through a buffer of its own) before the FBP filter: what phase retrieval will do."""

    def __init__(self, context, device, n_angles, n_bins, radius):
        super().__init__(context, device, n_angles * n_bins, radius, "sinograms", "averaged")

    def enqueue(self, chunk):
        events = super().enqueue(chunk)
        width_bytes = self.width * 4
        events.append((self.name, cl.enqueue_copy(
            chunk.queue, chunk.buffers["sinograms"], chunk.buffers["averaged"],
            byte_count=chunk.rows_out * width_bytes)))
        return events


@pytest.fixture
def row_mean_after_normalise(monkeypatch):
    """Reconstructions of projections run :class:`MeanThenFilter` after normalisation;
    the stages made are listed in the list returned."""
    made, plain = [], ParallelRecipe.stages_for

    def stages_for(recipe, dtype=None, log=True):
        if dtype is None:  # sinograms: the references' Backprojector
            return plain(recipe, dtype, log)
        g = recipe.geometry
        stage = MeanThenFilter(recipe.context, recipe.device, g.n_angles, g.n_bins, RADIUS)
        made.append(stage)
        normalize, *rest = plain(recipe, dtype, log)
        return (normalize, stage, *rest)

    monkeypatch.setattr(ParallelRecipe, "stages_for", stages_for)
    return made


RADIUS = 1


def test_a_margin_stage_in_the_parallel_chain(cl_device, monkeypatch, row_mean_after_normalise):
    """A stage with a margin after normalisation, in reconstruct's chain: slabs of a
    file read by two pipelines in chunks of 2 rows give the FBP of the normalised
    projections averaged over 3 detector rows of the whole detector."""
    n_bins, n_angles, n_rows = 48, 40, 21
    angles, projections, flats, darks = make_scan(n_bins, n_angles, n_rows)
    # Blocks of 3 rows of the file and of the flat-field means: chunks read across them.
    monkeypatch.setattr(sources, "ROW_BLOCK_BYTES", 3 * n_angles * n_bins * projections.itemsize)
    monkeypatch.setattr(sources, "REFERENCE_BYTES", 3 * (len(flats) + len(darks)) * n_bins *
                        flats.itemsize)
    first, stop = 3, 19
    source = CountedReads(projections)
    got = pybp.reconstruct(source, angles, flats, darks, rows=(first, stop), chunk_slices=2,
                           devices=[cl_device, cl_device], progress=False)
    made = row_mean_after_normalise
    assert made and all(stage.margin == RADIUS for stage in made)
    # The rows around the slab: those of its passes of 4 and their margins, at least.
    low, high = min(r.start for r in source.reads), max(r.stop for r in source.reads)
    assert low <= max(0, first // 4 * 4 - RADIUS)
    assert high >= min(n_rows, -(-stop // 4) * 4 + RADIUS)
    assert len(source.reads) >= 2  # each row read once, in blocks
    assert sum(r.stop - r.start for r in source.reads) == high - low

    dark = np.asarray(darks, np.float64).mean(0)
    flat = np.asarray(flats, np.float64).mean(0)
    normalised = -np.log((np.asarray(projections, np.float64) - dark) / (flat - dark))
    averaged = row_mean(normalised.transpose(1, 0, 2), RADIUS)  # along detector rows
    bp = pybp.Backprojector(n_bins, angles, device=cl_device, filter="ramp")
    want = bp(np.ascontiguousarray(averaged[first:stop], np.float32))
    assert relative_rms(got, want) < PIPELINE_RTOL
    # ... and the mean made a difference the check can see.
    plain_fbp = host_fbp(projections, angles, flats, darks, cl_device)[first:stop]
    assert relative_rms(plain_fbp, want) > 100 * PIPELINE_RTOL


def test_values_replaced_are_counted_in_their_own_chunk(cl_device, row_mean_after_normalise):
    """Normalisation also runs on margin rows; values it replaces there are counted by
    the chunk they belong to, once: the warning gives the count of the rows asked for."""
    angles, projections, flats, darks = make_scan(32, 24, 12)
    zeroed = (1, 2, 5, 6)  # outside the slab (a margin), its first row, both sides of a seam
    projections[:, zeroed, 7] = 0
    with pytest.warns(RuntimeWarning, match=rf"projections: {3 * 24} of "):
        pybp.reconstruct(projections, angles, flats, darks, rows=(2, 10), chunk_slices=4,
                         device=cl_device, progress=False)
