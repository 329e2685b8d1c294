"""``pybp.reconstruct`` (this module is named for what it makes, so that the function
is ``pybp.reconstruct``): a volume from detector projections, streamed through one
device (design sections 1 and 3).

Projections come in the tomopy/DXchange layout ``(n_angles, n_rows, n_bins)`` as any
object with ``shape``, ``dtype`` and slicing (NumPy arrays, memmaps, h5py datasets),
and are read a chunk of rows at a time. On the device: the means of the flats and
darks, ``(p - dark) / (flat - dark)``, ``-log``, the transpose to sinograms, the FBP
filter, interleaving and back-projection; the slices go into ``out`` as they come.
"""

from __future__ import annotations

import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import filters, pipeline
from .executor import raw_dtype
from .geometry import check_output
from .plan import MemoryPlan
from .runner import Backprojector

REFERENCE_BYTES = 256 << 20  # flats or darks read per block while averaging


def _array_like(value, name, ndim):
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"{name}: expected an array (NumPy, memmap, h5py dataset), "
                        f"got {type(value).__name__}")
    if len(value.shape) not in ndim:
        raise ValueError(f"{name}: expected {' or '.join(f'{n}-D' for n in ndim)} data, "
                         f"got shape {tuple(value.shape)}")
    if np.dtype(value.dtype).kind not in "iuf":
        raise TypeError(f"{name}: expected integers or floats, got dtype {value.dtype}")
    if 0 in value.shape:
        raise ValueError(f"{name}: is empty (shape {tuple(value.shape)})")
    return value


def _row_range(rows, n_rows):
    if rows is None:
        return 0, n_rows
    try:
        first, stop = (int(r) for r in rows)
    except (TypeError, ValueError):
        raise ValueError(f"rows: expected (first, stop), got {rows!r}") from None
    if not 0 <= first < stop <= n_rows:
        raise ValueError(f"rows: expected 0 <= first < stop <= {n_rows} (the projections' "
                         f"rows, axis 1), got ({first}, {stop})")
    return first, stop


def _frames(reference, name, detector):
    """Flats or darks as ``(n_frames, n_rows, n_bins)`` (one 2-D frame is allowed)."""
    _array_like(reference, name, (2, 3))
    shape = tuple(reference.shape)
    if shape[-2:] != detector:
        raise ValueError(f"{name}: frames of {shape[-2]}x{shape[-1]} (rows x bins) do not match "
                         f"the projections' {detector[0]}x{detector[1]}")
    return reference


def _means(executor, frames, first, stop):
    """Per row and bin of rows [first, stop), the mean of ``frames``, on the device, a
    block of rows at a time."""
    n_bins = frames.shape[-1]
    count = 1 if len(frames.shape) == 2 else frames.shape[0]
    block = max(1, REFERENCE_BYTES // (np.dtype(frames.dtype).itemsize * n_bins * count))
    means = np.empty((stop - first, n_bins), executor.real_dtype)
    for row in range(first, stop, block):
        end = min(stop, row + block)
        data = frames[row:end][None] if len(frames.shape) == 2 else frames[:, row:end]
        means[row - first:end - first] = executor.mean_frames(np.asarray(data))
    return means


def reconstruct(projections, angles, flats=None, darks=None, center=None, rows=None, out=None,
                *, filter="ramp", padding="zero", log=True, progress=True, chunk_slices=None,
                device=None, context=None, queue=None, stats=None, **options):
    """Reconstruct detector rows ``rows=(first, stop)`` (default all) of a parallel-beam
    scan by filtered back-projection; return the volume ``(stop - first, ny, nx)``.

    - ``projections``: ``(n_angles, n_rows, n_bins)``, any integer or float dtype; NumPy
      arrays, memmaps, h5py datasets, or anything with ``shape``, ``dtype`` and slicing.
      Read a chunk of rows at a time, never whole.
    - ``angles``: radians, one per projection.
    - ``flats``, ``darks``: ``(n_frames, n_rows, n_bins)`` (or one 2-D frame) each, or
      both None for data already normalised. Values are normalised as
      ``(p - mean dark) / (mean flat - mean dark)``; with ``log`` (default) the FBP is of
      ``-log`` of that: values that are not positive become 1e-6 first, not-a-number
      ones 1 (counted in one warning). ``log=False`` back-projects the values as they are
      (e.g. sinograms already taken the log of, as ``(n_angles, n_rows, n_bins)``).
    - ``center``: the axis' detector column (default ``(n_bins - 1) / 2``).
    - ``out``: where slices go (NumPy array, memmap, h5py dataset), of shape
      ``(stop - first, ny, nx)``, or ``(n_rows, ny, nx)`` for slices to land at their own
      row; float dtype. Nothing is written before every argument has been checked.
    - ``filter`` (default ``"ramp"``), ``padding``, and ``options`` as for
      :class:`pybp.Backprojector` (``interpolation``, ``precision``, ``slices_per_pass``,
      ``slice_shape``, ``kernel``, ...); ``device``, ``context`` or ``queue`` pick the device.
    - ``chunk_slices``: rows per chunk (default: from the device's memory).
    - ``progress``: rows done, GU/s and time left on standard error for work longer
      than 2 s.
    - ``stats``: a dict to fill with timings (wall, device time per stage, host copies).
    """
    _array_like(projections, "projections", (3,))
    n_angles, n_rows, n_bins = (int(n) for n in projections.shape)
    if np.ndim(angles) != 1 or len(angles) != n_angles:
        raise ValueError(f"angles: expected one per projection ({n_angles}, axis 0 of "
                         f"projections), got {np.shape(angles)}")
    if (flats is None) != (darks is None):
        raise ValueError(f"{'darks' if darks is None else 'flats'}: give flats and darks "
                         "together, or neither for normalised data")
    if filter is None:
        raise ValueError(f"filter: reconstruct is FBP; expected one of {', '.join(filters.FILTERS)}")
    first, stop = _row_range(rows, n_rows)
    if flats is not None:
        flats = _frames(flats, "flats", (n_rows, n_bins))
        darks = _frames(darks, "darks", (n_rows, n_bins))

    clock = [time.perf_counter()]
    setup = {}

    def lap(name):
        now = time.perf_counter()
        setup[f"setup_{name}"] = now - clock[0]
        clock[0] = now

    bp = Backprojector(n_bins, angles, center=center, filter=filter, padding=padding,
                       device=device, context=context, queue=queue, **options)
    g = bp.geometry
    ny, nx = g.slice_shape
    n = stop - first
    dtype = raw_dtype(projections.dtype)
    with bp:
        memory = MemoryPlan.create(bp.plan, bp.device, n_angles * n_bins * dtype.itemsize, n,
                                   chunk_slices)
        if out is None:
            out, offset = np.empty((n, ny, nx), np.float32), 0
        else:
            offset = first if len(out.shape) == 3 and out.shape[0] == n_rows and n != n_rows else 0
            check_output(out, (n_rows if offset else n, ny, nx))
        executor = bp.executor
        executor.take_projections(dtype, log)
        lap("plan")
        with ThreadPoolExecutor(1) as helper:  # the means on the device while the host
            means = None                       # pins the staging memory
            if flats is not None:
                means = helper.submit(lambda: (_means(executor, darks, first, stop),
                                               _means(executor, flats, first, stop)))
            executor.reserve(memory)
        if means is not None:
            dark, flat = means.result()
            if not (flat > dark).any():
                raise ValueError("flats: every flat pixel is at or below its dark in the rows "
                                 "reconstructed (flats and darks swapped?)")
            executor.set_references(dark, flat)
        lap("references_and_staging")
        clipped = _stream(executor, projections, first, n, out, offset, progress, stats)
        lap("stream")
    lap("release")
    if stats is not None:
        stats.update(setup)
    if clipped:
        warnings.warn(f"projections: {clipped} of {n * n_angles * n_bins} normalised values had "
                      "no transmission to take the log of (not positive, or flat equal to "
                      "dark); they were set to 1e-6 (not positive) or 1 (not a number)",
                      RuntimeWarning, stacklevel=2)
    return out


def _stream(executor, projections, first, n, out, offset, progress, stats):
    g = executor.plan.geometry
    host = dict(read=0.0, write=0.0)
    blocks = None if isinstance(projections, np.ndarray) else pipeline.RowBlocks(
        projections, first, first + n, executor.memory.chunk_slices)

    def read(start, count, staging):
        tick = time.perf_counter()
        block = projections[:, first + start:first + start + count] if blocks is None \
            else blocks.rows(first + start, count)
        pipeline.copy_blocks(reading, staging, block)
        host["read"] += time.perf_counter() - tick

    def write(start, count, slices):
        tick = time.perf_counter()
        pipeline.put_rows(writing, out, offset + start, slices)
        host["write"] += time.perf_counter() - tick

    bar = pipeline.Progress(n, g.updates(), progress)
    tick = time.perf_counter()
    timings = {}
    try:
        with pipeline.copy_pools() as (reading, writing):
            clipped = pipeline.stream(executor, n, read, write, bar, timings)
    finally:
        if blocks is not None:
            blocks.close()
    if stats is not None:
        stats.update(wall=time.perf_counter() - tick, chunk_slices=executor.memory.chunk_slices,
                     slots=len(executor.slots), host_read=host["read"], host_write=host["write"],
                     host_wait_device=timings["wait_device"],
                     **{f"device_{k}": v for k, v in executor.stage_seconds.items()})
    return clipped
