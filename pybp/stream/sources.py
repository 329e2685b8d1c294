"""Moving rows between the caller's arrays or files and the pipeline's page-locked
staging: copies split over threads (NumPy releases the GIL while copying: one thread
copies pageable memory at a fraction of what the device's DMA and the host's memory
can do), and inputs that are not arrays, or flats and darks, read ahead in large
blocks of rows."""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures

import numpy as np

from pybp import checks
from pybp.cl.pacing import Stopped

COPY_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))  # per direction
PARALLEL_COPY_BYTES = 8 << 20  # smaller copies are not worth the threads
REFERENCE_BYTES = 64 << 20  # flats and darks averaged per block of rows
WAIT_SECONDS = 0.1  # between two looks at a stop while waiting for copies


def in_blocks(pool, count: int, n_bytes: int, work):
    """``work(a, b)`` for blocks ``[a, b)`` of ``range(count)`` on ``pool`` where
    ``n_bytes`` are worth the threads (:data:`PARALLEL_COPY_BYTES`), else one call."""
    if pool is None or n_bytes < PARALLEL_COPY_BYTES or count < 2:
        work(0, count)
        return
    edges = np.linspace(0, count, min(count, 4 * COPY_THREADS) + 1).astype(int)
    futures = [pool.submit(work, a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    for future in futures:
        future.result()


def copy_blocks(pool, destination, source):
    """``destination[...] = source`` (NumPy arrays of one shape), in blocks of the first
    axis on ``pool`` when it is large; casts as needed. (Blocks of the second axis for
    chunks of 4 slices, 8 blocks instead of 4, made two GPUs slower, not faster, on the
    H200 machine: 3.99 s against 2.88 s, the host's memory already busy.)"""
    in_blocks(pool, len(destination), destination.nbytes, lambda a, b: checks.cast_into(
        destination[a:b], source[a:b]))


def read_into(destination, source, frames: slice, rows: slice):
    """``destination[:, :n] = source[frames, rows]`` (``n``: the rows): read straight
    into ``destination`` (C-contiguous) where the source reads into an array of its own
    dtype (an h5py dataset's ``read_direct``, a :class:`pybp.io.readers.TiffStack`'s),
    else read into an array of the source's and copied, converting. (HDF5 reading
    uint16 straight into float32 ran slower than reading and NumPy's conversion: the
    direct read pays where the staging holds the file's type, cone beam's integer
    counts.)"""
    n = len(range(*rows.indices(source.shape[1])))
    direct = getattr(source, "read_direct", None)
    if direct is not None and np.dtype(source.dtype) == destination.dtype \
            and destination.flags.c_contiguous:
        direct(destination, (frames, rows), (slice(None), slice(0, n)))
    else:
        checks.cast_into(destination[:, :n], np.asarray(source[frames, rows]))


@contextlib.contextmanager
def copy_pools():
    """Two pools (reading, writing) of :data:`COPY_THREADS` threads each, shut down on
    leaving the block."""
    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="pybp-read") as reading, \
            ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="pybp-write") as writing:
        yield reading, writing


class Ahead:
    """``work(a, b)`` for the blocks ``[a, b)`` of ``range(count)`` given by ``edges``
    (their starts, then ``count``), in order, on ``threads`` of their own, as far
    ahead of the device as the host goes: what a stream takes from page-locked memory
    that holds its whole input (cone beam's store, filled in place: pybp/cone/store.py)
    is copied there at the host's pace, not a slot's. :meth:`wait` returns once the
    blocks that cover ``[a, b)`` are done (raising their error); leaving the ``with``
    block cancels those not begun and waits for the rest (each a copy of a few MB).
    ``threads``: :data:`COPY_THREADS`, half the host's cores, leaving the others to the
    thread that enqueues (H200 machine, 16 cores, cone beam's fill of 512^3: on 16
    threads the copies alone took 0.072 s, but the fill 0.154 s beside them, against
    0.091 s with none)."""

    def __init__(self, work, edges, threads=COPY_THREADS):
        self._starts = list(edges[:-1])
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="pybp-ahead")
        self._futures = [self._pool.submit(work, a, b) for a, b in zip(edges[:-1], edges[1:])]

    def wait(self, a, b, stop=None):
        first = bisect.bisect_right(self._starts, a) - 1
        for future in self._futures[first:bisect.bisect_left(self._starts, b)]:
            while True:
                try:
                    future.result(timeout=WAIT_SECONDS)
                    break
                except FutureTimeout:
                    if stop is not None and stop.is_set():
                        raise Stopped from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pool.shutdown(wait=True, cancel_futures=True)


class SinogramsInto:
    """``out`` ``(n_angles, rows, n_cols)`` as a stream's output (its ``write``):
    sinograms of detector rows ``(count, n_angles, n_cols)`` put at rows ``rows`` (from
    several threads, disjoint rows), each a transposing copy in blocks of projections
    on ``threads`` of its own, inside a ``with`` block."""

    def __init__(self, out, threads):
        self.out, self.threads, self._pool = out, threads, None

    def __enter__(self):
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="pybp-sinograms")
        return self

    def __exit__(self, *exc):
        self._pool.shutdown(wait=True)

    def __setitem__(self, rows: slice, sinograms):
        copy_blocks(self._pool, self.out[:, rows], np.swapaxes(sinograms, 0, 1))


def put_rows(pool, out, at, slices):
    """``out[at:at + len(slices)] = slices``: split over ``pool`` for NumPy arrays and
    memmaps, one assignment for anything else (an h5py dataset)."""
    if isinstance(out, np.ndarray):
        copy_blocks(pool, out[at:at + len(slices)], slices)
    else:
        out[at:at + len(slices)] = slices


ROW_BLOCK_BYTES = 1 << 30  # rows read from a file at once (capped by the host's memory)


def _frame_count(frames):
    return 1 if len(frames.shape) == 2 else frames.shape[0]


def _frame_rows(frames, first, stop):
    """Rows ``[first, stop)`` of flats or darks, ``(n_frames, rows, n_bins)``."""
    return np.asarray(frames[first:stop])[None] if len(frames.shape) == 2 else \
        np.asarray(frames[:, first:stop])


def frame_mean(frames, first=0, stop=None) -> np.ndarray:
    """The mean in float64 of rows ``[first, stop)`` (None: to the last) of flats or
    darks (frames ``(n, n_rows, n_bins)``, or one frame): the one place every path
    (parallel beam's chunks, cone beam's whole detector, the centre finder) takes its
    means from."""
    stop = frames.shape[-2] if stop is None else stop
    return _frame_rows(frames, first, stop).mean(axis=0, dtype=np.float64)


class RowBlocks:
    """Rows ``[first, stop)`` of a ``(n_angles, n_rows, n_bins)`` input that is not a
    NumPy array (an h5py dataset, TIFF files), read in large blocks of rows, the next
    block on a thread of its own while the current one is used.

    A file holding projections keeps each frame together (HDF5 chunks of one frame,
    one TIFF per frame), so a chunk of a few rows is one small read per frame, each
    with a fixed cost: 8 rows at a time read a 4 GiB DXchange file at 80 MB/s on the
    H100 machine. Blocks of ``block_bytes`` make those reads few and long. The first
    block is ``first_rows`` rows, so the device starts early, and the next ones grow
    fourfold up to ``block_bytes``, so that each is read while the one before is used
    (a 1 GiB block takes 0.14 s at the 7.6 GB/s measured on the H100 machine, a chunk
    of 4 rows 10 ms on the device). Several pipelines may
    share one (any thread): ``rows(start, count)`` is called for rows in about
    increasing order, each row once, and a block is dropped once all its rows are out.

    With ``margin``, chunks read that many rows beyond their own on each side, up to
    ``n_rows`` (the rows the input has): ``rows(start, count, own)`` names the chunk's
    own rows, and a block is dropped once every chunk that could read it has: once
    every row within ``margin`` of it has been out as a chunk's own."""

    def __init__(self, source, first, stop, first_rows, block_bytes=None, row_bytes=None,
                 margin=0, n_rows=None):
        self.source, self.margin = source, margin
        own_first, own_stop = first, stop
        first, stop = max(0, first - margin), min(n_rows or stop, stop + margin)
        frame_row = row_bytes or int(np.prod(source.shape[::2])) * np.dtype(source.dtype).itemsize
        block_bytes = block_bytes or min(ROW_BLOCK_BYTES, checks.host_memory() // 16)
        size = max(first_rows, block_bytes // frame_row)
        edges, step = [first], first_rows
        while edges[-1] < stop:
            edges.append(min(stop, edges[-1] + step))
            step = min(size, 4 * step)
        self.blocks = list(zip(edges[:-1], edges[1:]))
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pybp-read-ahead")
        self.loaded = {}  # block index -> future of its rows
        # Own rows not yet out within the margin of each block.
        self.left = {k: self._reach(k, own_first, own_stop) for k in range(len(self.blocks))}
        self._lock = threading.Lock()

    def _load(self, k):
        if k < len(self.blocks) and k not in self.loaded and k in self.left:
            a, b = self.blocks[k]
            self.loaded[k] = self.pool.submit(self._read, a, b)

    def _read(self, first, stop):
        return np.asarray(self.source[:, first:stop])

    def rows(self, start, count, own=None):
        """Rows ``[start, start + count)`` (absolute), as an array or a view of one;
        ``own``: ``(start, count)`` of the chunk's own rows among them (None: all)."""
        own_start, own_count = own or (start, count)
        parts = []
        with self._lock:
            k = next(k for k, (a, b) in enumerate(self.blocks) if a <= start < b)
            while count > 0:
                a, b = self.blocks[k]
                self._load(k)
                self._load(k + 1)
                take = min(count, b - start)
                parts.append((k, self.loaded[k], start - a, take))
                start, count, k = start + take, count - take, k + 1
        views = [future.result()[:, at:at + take] for _, future, at, take in parts]
        with self._lock:
            for k in list(self.left):
                self.left[k] -= self._reach(k, own_start, own_start + own_count)
                if not self.left[k]:  # every chunk that could read it has
                    del self.left[k]
                    self.loaded.pop(k, None)
        return views[0] if len(views) == 1 else np.concatenate(views, axis=1)

    def _reach(self, k, start, stop):
        """How many of rows ``[start, stop)`` lie within the margin of block ``k``."""
        a, b = self.blocks[k]
        return max(0, min(b + self.margin, stop) - max(a - self.margin, start))

    def close(self):
        for future in self.loaded.values():
            future.cancel()
        self.pool.shutdown(wait=True)
        self.loaded.clear()


class FlatField(RowBlocks):
    """The dark and flat means of rows ``[first, stop)``, for the pipelines of one run:
    ``rows(start, count)`` gives them as ``(2, count, n_bins)`` float64 (dark, flat).
    They are averaged on the host, a block of rows ahead of the chunks that need them
    (on the read-ahead thread), and each chunk's means go up with it. Averaging all of
    2 x 20 frames of 2048 x 2048 on the device before the first chunk held it back by
    about 0.1 s on the H200 machine; averaging each block on the reader thread when
    needed stalled the stream."""

    def __init__(self, flats, darks, first, stop, first_rows, margin=0):
        self.frames = (darks, flats)
        row_bytes = sum(_frame_count(f) * np.dtype(f.dtype).itemsize * f.shape[-1]
                        for f in self.frames)
        super().__init__(None, first, stop, first_rows, REFERENCE_BYTES, row_bytes, margin,
                         flats.shape[-2])

    def _read(self, first, stop):
        return np.stack([frame_mean(f, first, stop) for f in self.frames])


WRITE_PIECE_BYTES = 64 << 20  # one write (and its flush to the disk) of a part's planes
# Pieces written at once, each flushed by its writer. The H200 machine's disk took a
# 2 GiB .npy at 1.27 GB/s from one thread, 1.75 from 3, 1.98 from 8 and 2.03 from 32
# (pybp bench --io says which count did best); cone 2048^3 to it, the command in
# process, ran 29.5-30.9 s with 3, 28.1-28.2 s with 8 and 27.7 s with 16
# (docs/benchmarks.md's history, issue 53's fourth step).
BEHIND_WRITES = 16
SETTLE_POLL = 0.1  # seconds between looks at a stop while waiting for writes
TOUCH_BYTES = 64 << 20  # pages touched between looks at a stop (WriteBehind's arrays)


class WriteBehind:
    """Parts of the volume (cone beam's slabs) written to an output that is not in host
    memory (a file, a dataset) on threads of their own while the device goes on with
    the next part: that part's kernels run while the disk takes this one.

    ``hold(shape, stop)`` gives the host array a part of ``shape`` comes down into, in
    turn one of ``parts`` arrays (made on first use): it first waits until that
    array's last writes have ended, so the disk sets the pace and host memory stays
    at ``parts`` parts. With two, a part comes down while the one before is still being
    written (a thin last slab then waits for nothing).
    ``write(out, at, rows, stop)`` hands the rows to ``threads`` writers in pieces of
    whole planes and returns. A failed write sets ``stop``, so that the device stops
    within a fraction of a second, and is raised by a later ``hold`` or by
    :meth:`settle`. Once ``stop`` is set, pieces not begun are dropped; those begun end
    whole (the outputs record a plane as done once it is on the disk: ``--resume``
    writes the rest).

    Given ``part`` (the largest shape), the arrays are made at once and their pages
    touched on a thread of their own while the first part's kernels run, so that the
    first read-back into each does not wait for the system to give it its pages (on the
    H200 machine, 448 planes of 2048^2 came down in 0.89-1.12 s into new memory and in
    0.45-0.55 s into touched memory). A hold that comes before its array is touched
    stops the touching and the copy threads touch the rest."""

    def __init__(self, parts, threads=BEHIND_WRITES, part=None):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="pybp-write-behind")
        self.futures = [[] for _ in range(parts)]  # the writes from each array
        self.arrays = [None] * parts
        self.turn = 0
        # Writes running, counted here rather than by the pool: a Ctrl-C inside
        # Thread.start leaves a worker the pool neither knows of nor waits for.
        self._state, self._running, self._closed = threading.Condition(), 0, False
        self._toucher = None
        if part is not None and parts:
            self.arrays = [np.empty(int(np.prod(part)), np.float32) for _ in range(parts)]
            self._toucher = Toucher(self.arrays)

    @staticmethod
    def parts(shape, members=1) -> int:
        """How many parts of ``shape`` (float32) each of ``members`` may hold in host
        memory: 2, 1 or 0 (none: the part is written as it comes down)."""
        part = 4 * int(np.prod(shape)) * members
        return next((k for k in (2, 1) if checks.within_host_share(k * part)), 0)

    def hold(self, shape, stop=None) -> np.ndarray:
        self._wait(self.futures[self.turn], stop)
        if self._toucher is not None and not self._toucher.touched(self.turn):
            self._toucher = None
        count, array = int(np.prod(shape)), self.arrays[self.turn]
        if array is None or array.size < count:
            self.arrays[self.turn] = array = None
            self.arrays[self.turn] = array = np.empty(count, np.float32)
        return array[:count].reshape(shape)

    def write(self, out, at, rows, stop):
        per = max(1, WRITE_PIECE_BYTES // max(1, rows[0].nbytes))
        futures = self.futures[self.turn] = []
        self.turn = (self.turn + 1) % len(self.futures)
        for a in range(0, len(rows), per):
            futures.append(self.pool.submit(self._put, out, at + a, rows[a:a + per], stop))

    def _put(self, out, at, rows, stop):
        with self._state:
            if self._closed or (stop is not None and stop.is_set()):
                return  # dropped: not begun
            self._running += 1
        try:
            out[at:at + len(rows)] = rows
        except BaseException:
            if stop is not None:
                stop.set()
            raise
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    @staticmethod
    def _wait(futures, stop=None, quiet=False):
        """Wait for ``futures``, then raise the first error among them (unless
        ``quiet``). Where ``stop`` is set, or ``quiet``, those not begun are dropped."""
        error = None
        for future in futures:
            while not future.done():
                if quiet or (stop is not None and stop.is_set()):
                    future.cancel()
                wait_futures([future], timeout=SETTLE_POLL)  # short waits: Ctrl-C gets in
            if not future.cancelled() and error is None:
                error = future.exception()
        if error is not None and not quiet:
            raise error

    def settle(self, stop=None, quiet=False):
        """Wait for every write handed over, then raise the first error among them
        (unless ``quiet``: the caller is raising an error of its own). Where ``stop``
        is set, or ``quiet``, those not begun are dropped."""
        writes = [f for futures in self.futures for f in futures]
        self._wait(writes, stop, quiet)
        self.futures = [[] for _ in self.futures]

    def close(self):
        """Wait for the writes begun (those not begun are dropped) and free the memory."""
        if self._toucher is not None:
            self._toucher.stop()
            self._toucher = None
        for futures in self.futures:
            for future in futures:
                future.cancel()
        with self._state:
            self._closed = True
            while self._running:
                self._state.wait(SETTLE_POLL)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.futures, self.arrays = [], []


class Toucher:
    """Touches the pages of ``arrays`` (one float a page, which has the operating system
    give each page), in order, on a daemon thread, a block of :data:`TOUCH_BYTES` at a
    time; :meth:`touched` says whether an array is done, or stops the thread where it
    is not, so that no page is touched once the array is handed out."""

    def __init__(self, arrays):
        self.arrays, self.done = arrays, [threading.Event() for _ in arrays]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pybp-touch", daemon=True)
        self.thread.start()

    def _run(self):
        block, page = TOUCH_BYTES // 4, mmap.PAGESIZE // 4
        for array, done in zip(self.arrays, self.done):
            for a in range(0, array.size, block):
                if self._stop.is_set():
                    return
                array[a:a + block:page] = 0
            done.set()

    def touched(self, index) -> bool:
        """True where array ``index`` is touched; else False, once the thread has
        stopped."""
        if self.done[index].is_set():
            return True
        self.stop()
        return self.done[index].is_set()

    def stop(self):
        """Stop the thread and wait for it: a block at most (polled, so that Ctrl-C
        gets in)."""
        self._stop.set()
        while self.thread.is_alive():
            self.thread.join(SETTLE_POLL)
