"""Jobs on pipelines, one per device: a geometry's recipe (pybp/stream/recipe.py) prepared on each
device, kept for any number of jobs (:class:`Job`: rows of a scan
into an output) of one scan geometry, every device streaming its chunks of rows from
one shared schedule (:class:`Pipelines`). :func:`pybp.reconstruct` and
:class:`pybp.Reconstructor` run one in this process; Dask workers run one each
(pybp/distributed.py).

A recipe is what the pipelines ask of a geometry: ``prepare(n_slices, dtype, log,
chunk_slices, writes, preferred)`` returns its executor with stages and slots reserved,
``chunk_grid(dtype, log, chunk_slices, preferred)`` the rows of a chunk grid fixed by the
detector (or None), ``updates_per_slice()`` counts GU/s, ``device`` names it,
``close()`` frees it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np

from pybp.cl.device import keep_ctrl_c
from pybp.stages.normalize import NonFinite, located
from pybp.stream import numa, pipeline, sources
from pybp.stream.executor import WRITES
from pybp.stream.memory import CHUNK_SLICES, FILE_CHUNK_SLICES
from pybp.stream.progress import Progress

# Each piece being written holds a page-locked piece of the staging
# (executor.PIECE_BYTES, 64 MiB), so a disk's kept count is followed up to here: 16
# make 1.1 GB of staging (made at about 2 GB/s). 2048^3 to .npy on the H200 (32 kept),
# in one call: 3 at once 21.5 s, 8 20.3 s, 16 17.4 and 22.0 s, 32 18.6 and 20.6 s; in
# another, 3 at once 25.3 and 23.5 s, 16 19.2 s (docs/benchmarks.md's history, issue 53's sixth step).
MOST_WRITES = 16


@dataclass
class Job:
    """Rows ``[first, stop)`` of ``projections`` ``(n_angles, n_rows, n_bins)`` (with
    ``flats`` and ``darks``, or None for normalised data) into ``out[offset + i]``, and
    how: ``log``, rows per chunk (None: from the device's memory), the progress line,
    and ``stats`` (a dict to fill, or None)."""

    projections: object
    flats: object
    darks: object
    first: int
    stop: int
    out: object
    offset: int = 0
    log: bool = True
    chunk_slices: int | None = None
    progress: bool = True
    stats: dict | None = None
    keep: tuple | None = None  # rows [a, b) of [first, stop) written and counted (None: all)


def _check_flats_above_darks(flats, darks, first, stop):
    """Refuse flats and darks that look swapped (no pixel of the first flat frame above
    the first dark frame, in the rows reconstructed): one frame of each is read."""
    flat, dark = (np.asarray(f[first:stop] if len(f.shape) == 2 else f[0, first:stop])
                  for f in (flats, darks))
    for name, frame in (("flats", flat), ("darks", dark)):
        if frame.dtype.kind == "f" and not np.isfinite(frame).all():  # not a swap
            raise ValueError(f"{name}: the first frame holds NaN or Inf in the rows "
                             "reconstructed; replace them (numpy.nan_to_num) or drop the frame")
    if not (flat > dark).any():
        raise ValueError("flats: no pixel of the first flat frame is above the first dark "
                         "frame in the rows reconstructed (flats and darks swapped?)")


def file_writes(out) -> int:
    """Downloaded pieces written into the file output ``out`` at once: where a piece
    is one write (``.npy``, HDF5), as many as the writer threads ``pybp bench --io``
    kept for its disk (``out.writers``), at most :data:`MOST_WRITES`; else
    :data:`pybp.stream.executor.WRITES`. A folder of TIFF files writes each piece's
    slices on threads of its own (its ``writers``): more pieces at once gave it
    nothing (2048^3 on the H200: 3, 8 or 16 pieces, 20.0-20.7 s)."""
    kept = getattr(out, "writers", None)
    if not kept or getattr(out, "kind", None) == "tiff":
        return WRITES
    return max(1, min(int(kept), MOST_WRITES))


class Pipelines:
    """One recipe per device, made by ``make(target)`` for each of ``targets`` (dicts of
    ``device``, ``context`` or ``queue``), kept for any number of :meth:`run` calls over
    slabs of one scan geometry; ``close()`` (or leaving a ``with`` block) releases them.
    Chunks of rows start at multiples of ``align`` (the widest pass of the geometry's
    kernels), so that every device groups slices as one device would.

    With several devices nothing waits for all: they are made one after the other on a
    thread, and in :meth:`run` each device pins its staging and starts streaming as
    soon as it is ready, the first while the next is still being made (on the H200
    machine, making, pinning and releasing ran one device after the other however
    many threads asked: about 0.12 s, 0.13 s and 0.1 s each)."""

    def __init__(self, make, targets, align=1):
        self._pool, self.align = None, align
        if len(targets) == 1:  # errors now, before the caller's output is touched
            self._builds = [_done(make(targets[0]))]
        else:
            # One at a time, in order: they ran no faster at once, and the first device
            # streams the sooner while the next is made.
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="pybp-build")
            self._builds = [self._pool.submit(make, t) for t in targets]

    @property
    def members(self):
        """The recipes (waits for those still being made)."""
        return [future.result() for future in self._builds]

    def run(self, job: Job) -> int:
        """Reconstruct ``job``; return how many values normalisation replaced. With
        several devices each streams on a thread of its own from one
        :class:`pybp.stream.pipeline.Rows`."""
        if job.flats is not None:
            _check_flats_above_darks(job.flats, job.darks, job.first, job.stop)

        # Inputs read from files take larger chunks, and outputs that are files
        # several writes at once (memory.FILE_CHUNK_SLICES, file_writes).
        from_arrays = isinstance(job.projections, np.ndarray)
        preferred = CHUNK_SLICES if from_arrays else FILE_CHUNK_SLICES
        writes = 1 if isinstance(job.out, np.ndarray) else file_writes(job.out)
        grid = self._grid(job, preferred)
        if grid is not None:  # every device's chunks are those of the grid
            job = dataclasses.replace(job, chunk_slices=grid)
        job = self._aligned(job)

        # each device's chunks at most its share of the rows, so that every device takes
        # some (16 slices of SIRT went in one chunk to the first of two devices)
        share = -(-(job.stop - job.first) // len(self._builds))

        def prepare(recipe):
            """On the device's own thread: its stages, memory plan and staging (on a
            grid, for whole grid chunks, however few rows the job has)."""
            return recipe.prepare(max(share, grid or 0), job.projections.dtype,
                                  job.log, job.chunk_slices, writes, preferred)

        return _Stream(self._builds, prepare, job, self.align, grid).run()

    def _aligned(self, job: Job) -> Job:
        """``job`` grown to rows at multiples of ``align`` of the detector, the rows
        grown by computed but not written (nor counted): a slice is back-projected in
        the pass of the slices beside it in a whole run, whatever rows a run takes (one
        slice alone runs another parameter set, 1.3e-7 from the same slice in a pass
        of four on PoCL)."""
        a = self.align
        first = job.first // a * a
        stop = min(job.projections.shape[1], -(-job.stop // a) * a)
        if (first, stop) == (job.first, job.stop):
            return job
        keep = (job.first - first + (job.keep or (0,))[0],
                job.first - first + (job.keep or (0, job.stop - job.first))[1])
        return dataclasses.replace(job, first=first, stop=stop,
                                   offset=job.offset - (job.first - first), keep=keep)

    def _grid(self, job: Job, preferred):
        """Rows per chunk of a grid fixed by the detector's rows, where a stage reaches
        across rows (``recipe.chunk_grid``: phase retrieval, whose values depend on where
        a chunk starts and ends): the least any device's memory fits, so that several
        devices cut the same chunks, and a run of any rows, resumed or not, cuts the
        chunks of the whole run. None where no stage does."""
        def grid(recipe):
            return recipe.chunk_grid(job.projections.dtype, job.log, job.chunk_slices,
                                   preferred)

        if grid(self._builds[0].result()) is None:  # (every recipe has the same stages)
            return None
        return min(grid(recipe) for recipe in self.members)

    def close(self, wait=True):
        """Release every device's memory and staging (at once, on threads); with
        ``wait=False`` on a thread of its own, after the caller goes on (unpinning
        took 0.1 s per device on the H200 machine, one device after the other)."""
        builds, self._builds = self._builds, []
        if not wait:
            threading.Thread(target=self._close, args=(builds,), name="pybp-release").start()
        else:
            self._close(builds)

    def _close(self, builds):
        for future in builds:
            future.cancel()
        made = [f.result() for f in builds if not f.cancelled() and f.exception() is None]
        _on_threads([bp.close for bp in made])
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _done(value):
    future = Future()
    future.set_result(value)
    return future


def _on_threads(calls):
    """The results of ``calls``, run at once on threads (the first error is raised
    once all have ended)."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    for future in futures:
        future.result()
    return [f.result() for f in futures]


class _Stream:
    """One job on every device of the pipelines: each device (``builds``: futures of recipes)
    prepares (``prepare(recipe)`` returns its executor, slots reserved) and streams on
    a thread of its own, taking rows of one shared schedule as soon as it is ready;
    ``grid``: chunks of the detector's rows (see :meth:`Pipelines._grid`). The
    devices' host times go into one dict each (``members``)."""

    def __init__(self, builds, prepare, job: Job, align: int, grid=None):
        self.builds, self.prepare, self.job, self.grid = builds, prepare, job, grid
        self.n = job.stop - job.first
        self.n_rows = job.projections.shape[1]  # margins may read the rows around the job
        self.rows = pipeline.Rows(self.n, align=align, before=job.first,
                                  after=self.n_rows - job.stop, origin=job.first, grid=grid,
                                  keep=job.keep)
        self.kept = job.keep or (0, self.n)
        self.stop = threading.Event()
        self.members = [dict(read=0.0, write=0.0, wait_device=0.0, slices=0, clipped=0,
                             wall=0.0, built=0.0, prepare=0.0, executor=None) for _ in builds]
        # Made on first use, the first block a chunk for each device, to start early: a
        # sources.RowBlocks for inputs that are not arrays, a sources.FlatField.
        self.blocks, self.field, self.bar = [], [], None
        self.bar_lock, self.prepare_lock = threading.Lock(), threading.Lock()
        self.tick = time.perf_counter()

    def run(self) -> int:
        """Stream the job on every device; the values normalisation replaced."""
        try:
            runs = [partial(self.member, build, host)
                    for build, host in zip(self.builds, self.members)]
            if len(runs) == 1:
                runs[0]()
            else:
                join_all(runs, self.stop)
        except NonFinite as exc:  # where the first one is, in one line
            if exc.rows is None:
                raise
            raise located(exc, self.job.projections, self.job.first) from None
        finally:
            for reader in self.blocks + self.field:
                reader.close()
        if self.job.stats is not None:
            _add_stats(self.job.stats, self.members, time.perf_counter() - self.tick)
        return sum(h["clipped"] for h in self.members)

    def read(self, host, span):
        """The rows of ``span`` and the flat-field means beside them (a reader thread)."""
        job, began = self.job, time.perf_counter()
        at, count = job.first + span.first, span.rows
        own = (job.first + span.start, span.count)
        with self.bar_lock:
            # A chunk of the grid reads its grid chunk's rows beyond its own too.
            margin = host["executor"].margin + (self.grid or 0)
            if not self.blocks and not isinstance(job.projections, np.ndarray):
                self.blocks.append(sources.RowBlocks(
                    job.projections, job.first, job.stop, count * len(self.builds),
                    margin=margin, n_rows=self.n_rows))
            if not self.field and job.flats is not None:
                self.field.append(sources.FlatField(job.flats, job.darks, job.first, job.stop,
                                                    count * len(self.builds), margin))
        means = self.field[0].rows(at, count, own) if self.field else None
        extras = None if means is None else dict(dark=means[0], flat=means[1])
        block = self.blocks[0].rows(at, count, own) if self.blocks else \
            job.projections[:, at:at + count]
        host["read"] += time.perf_counter() - began
        return block, extras

    @staticmethod
    def copy(host, reading, staging, block):
        began = time.perf_counter()
        sources.copy_blocks(reading, staging, block)
        host["read"] += time.perf_counter() - began

    def write(self, host, writing, start, count, slices) -> int:
        """Slices into the output (on several threads at once); returns how many were
        written, which the progress line counts."""
        began = time.perf_counter()
        a, b = max(start, self.kept[0]), min(start + count, self.kept[1])
        if a < b:  # rows grown by to whole passes are not written (Pipelines._aligned)
            sources.put_rows(writing, self.job.out, self.job.offset + a,
                             slices[a - start:b - start])
        with self.bar_lock:
            host["write"] += time.perf_counter() - began
        return max(0, b - a)

    def member(self, build, host):
        """One device's part, on its thread: its recipe built and prepared, then its
        stream."""
        recipe = build.result()
        host["built"] = time.perf_counter() - self.tick
        with self.bar_lock:
            if self.bar is None:
                self.bar = Progress(self.kept[1] - self.kept[0], recipe.updates_per_slice(),
                                    self.job.progress,
                                    **recipe.progress_labels)
        # On the CPUs of the device's NUMA node: its staging, copies and writes (and the
        # threads that do them) in that node's memory (stream/numa.py).
        with numa.near(recipe.device):
            with self.prepare_lock:  # pinning ran one device at a time anyway: first come
                executor = host["executor"] = self.prepare(recipe)  # first served
            executor.stage_seconds.clear()
            began = time.perf_counter()
            host["prepare"] = began - self.tick
            if not self.stop.is_set():
                with sources.copy_pools() as (reading, writing):
                    host["clipped"] = pipeline.stream(
                        executor, self.rows, partial(self.read, host),
                        partial(self.write, host, writing), self.bar, host, self.stop,
                        partial(self.copy, host, reading))
        host["wall"] = time.perf_counter() - began


def _add_stats(stats: dict, members: list, wall: float):
    """A run's timings into ``stats``: the setup before the first device streamed, the
    wall time after it, the host's copies and waits summed over the devices, each
    stage's device time; with several devices, each one's."""
    ready = min(h["prepare"] for h in members)
    executors = [h["executor"] for h in members]
    total = {}
    for executor in executors:
        for k, v in executor.stage_seconds.items():
            total[f"device_{k}"] = total.get(f"device_{k}", 0.0) + v
    stats.update(setup_staging=ready, setup_stream=wall - ready,
                 wall=wall - ready, chunk_slices=executors[0].memory.chunk_slices,
                 slots=len(executors[0].slots),
                 **{f"host_{k}": sum(h[k] for h in members)
                    for k in ("read", "write", "wait_device")}, **total)
    if len(executors) > 1:
        stats["devices"] = [dict(name=h["executor"].device.name, slices=h["slices"],
                                 built=h["built"], prepare=h["prepare"], wall=h["wall"],
                                 **{f"device_{k}": v for k, v in
                                    h["executor"].stage_seconds.items()})
                            for h in members]


def join_all(runs, stop):
    """Run ``runs`` on threads of their own until all end; the first error (or Ctrl-C
    here) sets ``stop``, which ends the others within a fraction of a second, and is
    raised once they have."""
    errors = []

    def guarded(run):
        try:
            run()
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(run,), name=f"pybp-device-{i}", daemon=True)
               for i, run in enumerate(runs)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)  # short joins: Ctrl-C reaches this thread ...
                keep_ctrl_c()  # ... where a device thread's context took it (Intel's runtime)
    except BaseException:
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]
