"""Streaming slices through one executor (design section 3; paper Sect. 4, Fig. 4).

A reader thread copies each chunk from the caller's input into the executor's
page-locked staging, the calling thread enqueues the chunk's device work, and a writer
thread copies finished slices into the caller's output. Bounded hand-offs keep at most
the executor's slots in flight, so host memory stays a few chunks beyond the caller's
arrays. Copies of NumPy arrays are split over a few threads (NumPy releases the GIL
while copying): one thread copies pageable memory at a fraction of what the device's
DMA and the host's memory can do. Several pipelines (one per device) can share one
:class:`Rows`: each reader takes the next chunk when a slot of its own is free, so a
faster device takes more.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pybp.cl.pacing import Stopped, wait

COPY_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))  # per direction
PARALLEL_COPY_BYTES = 8 << 20  # smaller copies are not worth the threads
POLL_SECONDS = 0.1
REFERENCE_BYTES = 64 << 20  # flats and darks averaged per block of rows


def copy_blocks(pool, destination, source):
    """``destination[...] = source`` (NumPy arrays of one shape), in blocks of the first
    axis on ``pool`` when it is large; casts as needed. (Blocks of the second axis for
    chunks of 4 slices, 8 blocks instead of 4, made two GPUs slower, not faster, on the
    H200 machine: 3.99 s against 2.88 s, the host's memory already busy.)"""
    if pool is None or destination.nbytes < PARALLEL_COPY_BYTES or len(destination) < 2:
        np.copyto(destination, source, casting="unsafe")
        return
    edges = np.linspace(0, len(destination), min(len(destination), 4 * COPY_THREADS) + 1).astype(int)
    futures = [pool.submit(np.copyto, destination[a:b], source[a:b], casting="unsafe")
               for a, b in zip(edges[:-1], edges[1:]) if b > a]
    for future in futures:
        future.result()


class Rows:
    """Rows ``[0, n_slices)`` handed out in chunks, in order, to one or more pipelines
    (any thread). Chunks start at multiples of ``align`` (the widest pass), so slices
    group into kernel passes as they do through one device, and give the same values."""

    def __init__(self, n_slices, align=1):
        self.n_slices, self.align = n_slices, align
        self.next, self._lock = 0, threading.Lock()

    def take(self, most):
        """The next ``(start, count)`` of at most ``most`` rows, or None when all are taken."""
        if most >= self.align:  # (chunks narrower than a pass cannot keep the grouping)
            most = most // self.align * self.align
        with self._lock:
            start = self.next
            if start >= self.n_slices:
                return None
            self.next = min(self.n_slices, start + most)
            return start, self.next - start


class Progress:
    """Slices done, GU/s and time left on standard error, once work has run for
    ``delay`` seconds (short calls print nothing); ``enabled=False`` silences it.
    Several pipelines may update one (any thread)."""

    def __init__(self, total, updates_per_slice, enabled=True, delay=2.0, stream=sys.stderr):
        self.total, self.per_slice, self.enabled = total, updates_per_slice, enabled
        self.delay, self.stream = delay, stream
        self.done, self.start, self.shown, self.last = 0, time.perf_counter(), False, 0.0
        self._lock = threading.Lock()

    def update(self, count):
        with self._lock:
            self._update(count)

    def _update(self, count):
        self.done += count
        now = time.perf_counter()
        elapsed = now - self.start
        finished = self.done >= self.total
        if not self.enabled or elapsed < self.delay or (now - self.last < 0.25 and not finished):
            return
        self.last, self.shown = now, True
        rate = self.done * self.per_slice / elapsed * 1e-9
        left = elapsed / self.done * (self.total - self.done)
        print(f"\rpybp: {self.done}/{self.total} slices, {rate:.0f} GU/s, "
              f"{left:.0f} s left ", end="\n" if finished else "", file=self.stream, flush=True)

    def close(self):
        """End the line of an unfinished bar (once, whichever pipeline stops first)."""
        with self._lock:
            if self.shown and self.done < self.total:
                print(file=self.stream, flush=True)
            self.shown = False


def _get(hand_off, stop):
    while True:
        try:
            return hand_off.get(timeout=POLL_SECONDS)
        except queue.Empty:
            if stop.is_set():
                raise Stopped from None


def _put(hand_off, item, stop):
    while True:
        try:
            return hand_off.put(item, timeout=POLL_SECONDS)
        except queue.Full:
            if stop.is_set():
                raise Stopped from None


def _acquire(semaphore, stop):
    while not semaphore.acquire(timeout=POLL_SECONDS):
        if stop.is_set():
            raise Stopped


def _serial(executor, rows, read, write, progress, timings, stop) -> int:
    """:func:`stream` in the calling thread, one step after another, for
    implementations that take commands from one thread at a time."""
    stop = stop if stop is not None else threading.Event()
    clipped, slices = 0, 0
    try:
        while (taken := rows.take(executor.memory.chunk_slices)) is not None:
            start, count = taken
            references = read(start, count, executor.staging_in(0, count))
            event, stages = executor.upload(0, count, references)
            wait(event, stop)
            computed, computing = executor.compute(0, count, stop)
            wait(computed, stop)
            event, downloaded = executor.download(0, count)
            wait(event, stop)
            executor.record(stages + computing + downloaded)
            clipped += executor.clipped(0)
            write(start, count, executor.staging_out(0, count))
            slices += count
            if progress is not None:
                progress.update(count)
    except Stopped:  # set elsewhere: end quietly
        pass
    except BaseException:
        stop.set()
        if progress is not None:
            progress.close()
        raise
    finally:
        executor.finish()
    if timings is not None:
        timings.update(wait_device=0.0, slices=slices)
    return clipped


def stream(executor, rows, read, write, progress=None, timings=None, stop=None) -> int:
    """Run the chunks of ``rows`` (a :class:`Rows`, or a number of slices) through
    ``executor`` (its slots reserved).

    ``read(start, count, staging)`` fills a chunk's input staging and returns the dark
    and flat means of its rows (or None), and the reader thread uploads them; the
    calling thread enqueues its device stages; the writer thread downloads it and
    hands its slices to ``write(start, count, slices)``. Returns how
    many values normalisation replaced. ``timings`` (a dict) gets the seconds the
    writer waited for the device (``wait_device``) and the slices done (``slices``).
    An exception in any thread, or Ctrl-C, stops all of them and is raised here once
    the device work in flight ends (a fraction of a second: see :mod:`pybp.pacing`);
    ``stop`` (a ``threading.Event`` shared by several pipelines) ends this one quietly
    when set elsewhere, and is set when this one fails.
    """
    if not isinstance(rows, Rows):
        rows = Rows(rows)
    if not executor.threads:
        return _serial(executor, rows, read, write, progress, timings, stop)
    chunk, slots = executor.memory.chunk_slices, len(executor.slots)
    ready, done = queue.Queue(maxsize=slots), queue.Queue(maxsize=slots)
    input_free = [threading.Semaphore(1) for _ in range(slots)]
    output_free = [threading.Semaphore(1) for _ in range(slots)]
    stop = stop if stop is not None else threading.Event()
    errors, clipped = [], [0]
    spent = dict(wait_device=0.0, slices=0)

    def guarded(work):
        def run():
            try:
                work()
            except Stopped:
                pass
            except BaseException as exc:  # handed to the calling thread
                errors.append(exc)
                stop.set()
        return run

    @guarded
    def reader():
        i = 0
        while True:
            slot = i % slots
            _acquire(input_free[slot], stop)  # the slot's last chunk was enqueued ...
            executor.input_free(slot, stop)   # ... and computed: only now take rows
            taken = rows.take(chunk)
            if taken is None:
                _put(ready, None, stop)
                return
            start, count = taken
            references = read(start, count, executor.staging_in(slot, count))
            event, stages = executor.upload(slot, count, references)
            wait(event, stop)
            executor.record(stages)
            _put(ready, (i, start, count), stop)
            i += 1

    @guarded
    def writer():
        while True:
            item = _get(done, stop)
            if item is None:
                return
            i, start, count, computed, stages = item
            slot = i % slots
            tick = time.perf_counter()
            wait(computed, stop)
            event, downloaded = executor.download(slot, count)
            wait(event, stop)
            spent["wait_device"] += time.perf_counter() - tick
            executor.record(stages + downloaded)
            clipped[0] += executor.clipped(slot)
            write(start, count, executor.staging_out(slot, count))
            output_free[slot].release()
            spent["slices"] += count
            if progress is not None:
                progress.update(count)

    threads = [threading.Thread(target=reader, name="pybp-reader", daemon=True),
               threading.Thread(target=writer, name="pybp-writer", daemon=True)]
    for thread in threads:
        thread.start()
    finished = False
    try:
        while True:
            item = _get(ready, stop)
            if item is None:
                _put(done, None, stop)
                break
            i, start, count = item
            slot = i % slots
            _acquire(output_free[slot], stop)  # the slot's last slices are downloaded
            computed, stages = executor.compute(slot, count, stop)
            input_free[slot].release()
            _put(done, (i, start, count, computed, stages), stop)
        threads[1].join()
        finished = not errors
    except Stopped:
        pass
    finally:
        if not finished:  # failed, interrupted or stopped elsewhere: stop the others
            stop.set()
        for thread in threads:
            thread.join()
        executor.finish()  # what is in flight: at most a fraction of a second (pacing)
        if progress is not None and not finished:
            progress.close()
    if timings is not None:
        timings.update(spent)
    if errors:
        raise errors[0]
    return clipped[0]


@contextlib.contextmanager
def copy_pools():
    """Two pools (reading, writing) of :data:`COPY_THREADS` threads each, shut down on
    leaving the block."""
    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="pybp-read") as reading, \
            ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="pybp-write") as writing:
        yield reading, writing


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


class RowBlocks:
    """Rows ``[first, stop)`` of a ``(n_angles, n_rows, n_bins)`` input that is not a
    NumPy array (an h5py dataset, TIFF files), read in large blocks of rows, the next
    block on a thread of its own while the current one is used.

    A file holding projections keeps each frame together (HDF5 chunks of one frame,
    one TIFF per frame), so a chunk of a few rows is one small read per frame, each
    with a fixed cost: 8 rows at a time read a 4 GiB DXchange file at 80 MB/s on the
    H100 machine. Blocks of ``block_bytes`` make those reads few and long. The first
    block is ``first_rows`` rows, so the device starts early. Several pipelines may
    share one (any thread): ``rows(start, count)`` is called for rows in about
    increasing order, each row once, and a block is dropped once all its rows are out."""

    def __init__(self, source, first, stop, first_rows, block_bytes=None, row_bytes=None):
        self.source = source
        frame_row = row_bytes or int(np.prod(source.shape[::2])) * np.dtype(source.dtype).itemsize
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            memory = 16 << 30
        block_bytes = block_bytes or min(ROW_BLOCK_BYTES, memory // 16)
        size = max(first_rows, block_bytes // frame_row)
        edges = [first] + list(range(min(stop, first + first_rows), stop, size)) + [stop]
        self.blocks = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pybp-read-ahead")
        self.loaded = {}  # block index -> future of its rows
        self.left = {k: b - a for k, (a, b) in enumerate(self.blocks)}  # rows not yet out
        self._lock = threading.Lock()

    def _load(self, k):
        if k < len(self.blocks) and k not in self.loaded and k in self.left:
            a, b = self.blocks[k]
            self.loaded[k] = self.pool.submit(self._read, a, b)

    def _read(self, first, stop):
        return np.asarray(self.source[:, first:stop])

    def rows(self, start, count):
        """Rows ``[start, start + count)`` (absolute), as an array or a view of one."""
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
            for k, _, _, take in parts:
                self.left[k] -= take
                if not self.left[k]:  # every row of it is out
                    del self.left[k]
                    self.loaded.pop(k, None)
        return views[0] if len(views) == 1 else np.concatenate(views, axis=1)

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

    def __init__(self, flats, darks, first, stop, first_rows):
        self.frames = (darks, flats)
        row_bytes = sum(_frame_count(f) * np.dtype(f.dtype).itemsize * f.shape[-1]
                        for f in self.frames)
        super().__init__(None, first, stop, first_rows, REFERENCE_BYTES, row_bytes)

    def _read(self, first, stop):
        return np.stack([_frame_rows(f, first, stop).mean(axis=0, dtype=np.float64)
                         for f in self.frames])

