"""``pybp.reconstruct`` (this module is named for what it makes, so that the function
is ``pybp.reconstruct``): a volume from detector projections, streamed through one
device or several (design sections 1 and 3).

Projections come in the tomopy/DXchange layout ``(n_angles, n_rows, n_bins)`` as any
object with ``shape``, ``dtype`` and slicing (NumPy arrays, memmaps, h5py datasets),
and are read a chunk of rows at a time. On the device: the means of the flats and
darks, ``(p - dark) / (flat - dark)``, ``-log``, the transpose to sinograms, the FBP
filter, interleaving and back-projection; the slices go into ``out`` as they come.
With several devices, each runs its own pipeline and takes the next chunk of rows
when it has room for it (:class:`Pipelines`); with a Dask client, workers take slabs
of rows (:mod:`pybp.distributed`).
"""

from __future__ import annotations

import operator
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from . import filters, pipeline
from .centre import find_center
from .executor import raw_dtype
from .geometry import Geometry, check_output
from .params import SLICES_PER_PASS
from .plan import MemoryPlan
from .runner import Backprojector


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
        first, stop = (operator.index(r) for r in rows)
    except (TypeError, ValueError):
        raise ValueError(f"rows: expected (first, stop), two integers, got {rows!r}") from None
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


def _check_flats_above_darks(flats, darks, first, stop):
    """Refuse flats and darks that look swapped (no pixel of the first flat frame above
    the first dark frame, in the rows reconstructed): one frame of each is read."""
    flat, dark = (np.asarray(f[first:stop] if len(f.shape) == 2 else f[0, first:stop])
                  for f in (flats, darks))
    if not (flat > dark).any():
        raise ValueError("flats: no pixel of the first flat frame is above the first dark "
                         "frame in the rows reconstructed (flats and darks swapped?)")


def _inputs(projections, flats, darks, rows):
    """The checked ``(n_angles, n_rows, n_bins)``, ``first``, ``stop``, ``flats`` and
    ``darks`` of a call (nothing is read)."""
    _array_like(projections, "projections", (3,))
    n_angles, n_rows, n_bins = (int(n) for n in projections.shape)
    if (flats is None) != (darks is None):
        raise ValueError(f"{'darks' if darks is None else 'flats'}: give flats and darks "
                         "together, or neither for normalised data")
    first, stop = _row_range(rows, n_rows)
    if flats is not None:
        flats = _frames(flats, "flats", (n_rows, n_bins))
        darks = _frames(darks, "darks", (n_rows, n_bins))
    return (n_angles, n_rows, n_bins), first, stop, flats, darks


def _warn_clipped(clipped, n_values):
    if clipped:
        warnings.warn(f"projections: {clipped} of {n_values} normalised values had "
                      "no transmission to take the log of (not positive, or flat equal to "
                      "dark); they were set to 1e-6 (not positive) or 1 (not a number)",
                      RuntimeWarning, stacklevel=3)


def reconstruct(projections, angles, flats=None, darks=None, center=None, rows=None, out=None,
                *, filter="ramp", padding="zero", log=True, progress=True, chunk_slices=None,
                device=None, devices=None, client=None, context=None, queue=None, stats=None,
                **options):
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
    - ``center``: the axis' detector column (default ``(n_bins - 1) / 2``), or
      ``"auto"``: found from the data by :func:`pybp.find_center` (Vo's method refined
      by the least negative slice).
    - ``out``: where slices go (NumPy array, memmap, h5py dataset), of shape
      ``(stop - first, ny, nx)``, or ``(n_rows, ny, nx)`` for slices to land at their own
      row; float dtype. Nothing is written before every argument has been checked.
    - ``filter`` (default ``"ramp"``), ``padding``, and ``options`` as for
      :class:`pybp.Backprojector` (``interpolation``, ``precision``, ``slices_per_pass``,
      ``slice_shape``, ``kernel``, ...); ``device``, ``context`` or ``queue`` pick the device.
    - ``devices``: several devices, ``"all"`` (every GPU, else every device of the
      fastest kind) or a list of indices, names or ``pyopencl.Device``; each runs its
      own pipeline and takes the next chunk of rows when it has room (a slower device
      takes fewer). Every slice is written once, with the values one device gives.
    - ``client``: a ``dask.distributed.Client``: its workers reconstruct slabs of rows
      on their own devices (:mod:`pybp.distributed`); arrays are shared with workers
      in this process only (``LocalCluster(processes=False)``, or
      :func:`pybp.distributed.local_cluster`); workers in other processes or on other
      hosts read files: ``pybp reconstruct --scheduler``.
    - ``chunk_slices``: rows per chunk (default: from the device's memory).
    - ``progress``: rows done, GU/s and time left on standard error for work longer
      than 2 s.
    - ``stats``: a dict to fill with timings (wall, device time per stage, host copies;
      with several devices, ``devices``: the slices and time of each).

    Each call makes the devices' kernels, memory and page-locked staging, and frees
    them after; to reconstruct several volumes of one geometry, a
    :class:`Reconstructor` keeps them between calls.
    """
    (n_angles, _, n_bins), *_ = _inputs(projections, flats, darks, rows)
    if np.ndim(angles) != 1 or len(angles) != n_angles:
        raise ValueError(f"angles: expected one per projection ({n_angles}, axis 0 of "
                         f"projections), got {np.shape(angles)}")
    if isinstance(center, str) and center == "auto":
        center = find_center(projections, angles, flats, darks, rows, log=log,
                             device=device if devices is None and client is None else None)
    tick = time.perf_counter()
    made = Reconstructor(n_bins, angles, center, filter=filter, padding=padding, device=device,
                         devices=devices, client=client, context=context, queue=queue,
                         **options)
    try:
        setup_plan = time.perf_counter() - tick
        volume, clipped, n_values = made._reconstruct(projections, flats, darks, rows, out, log,
                                                      progress, chunk_slices, stats)
    except BaseException:
        made.close()
        raise
    released = time.perf_counter()
    made.close(wait=False)  # unpinning on a thread of its own, after the caller goes on
    if stats is not None and client is None:
        stats.update(setup_plan=setup_plan, setup_release=time.perf_counter() - released)
    _warn_clipped(clipped, n_values)
    return volume


class Reconstructor:
    """Volumes of one scan geometry, one call after another, on one device, several
    (``devices``) or the workers of a Dask ``client``: each device's kernels, memory
    and page-locked staging are made once and kept until :meth:`close` (or the end of a
    ``with`` block), so that every call after the first streams from its start.

    ``n_bins``, ``angles`` (radians), ``center`` and the keywords are those of
    :func:`reconstruct`, which is one call of a Reconstructor made for it and closed
    after::

        with pybp.Reconstructor(2048, angles, center=1021.5, devices="all") as rec:
            for scan in scans:
                rec.reconstruct(scan.projections, scan.flats, scan.darks, out=...)
    """

    def __init__(self, n_bins, angles, center=None, *, filter="ramp", padding="zero",
                 device=None, devices=None, client=None, context=None, queue=None, **options):
        if filter is None:
            raise ValueError(f"filter: FBP needs a filter; expected one of "
                             f"{', '.join(filters.FILTERS)}")
        chosen = [name for name, value in (("device", device), ("devices", devices),
                                           ("client", client), ("context", context),
                                           ("queue", queue)) if value is not None]
        if len(chosen) > 1 and set(chosen) != {"context", "queue"}:
            raise ValueError(f"{chosen[1]}: give one of device, devices, client, context or "
                             f"queue, not {' and '.join(chosen)}")
        self.setup = dict(n_bins=n_bins, angles=angles, center=center, filter=filter,
                          padding=padding, **options)
        self._client, self._team = client, None
        if client is not None:
            if not hasattr(client, "submit") or not hasattr(client, "scheduler_info"):
                raise TypeError(f"client: expected a dask.distributed.Client, got "
                                f"{type(client).__name__}")
            self.geometry = geometry_of(self.setup)
            return
        if devices is not None:
            from .distributed import device_list
            targets = [dict(device=d) for d in device_list(devices)]
        else:
            targets = [dict(device=device, context=context, queue=queue)]
        self._team = Pipelines(targets, **self.setup)
        self.geometry = self._team.geometry

    def reconstruct(self, projections, flats=None, darks=None, rows=None, out=None, *,
                    log=True, progress=True, chunk_slices=None, stats=None):
        """The volume of detector rows ``rows=(first, stop)`` of ``projections``
        ``(n_angles, n_rows, n_bins)`` (this Reconstructor's angles and bins); the
        arguments are those of :func:`reconstruct`."""
        volume, clipped, n_values = self._reconstruct(projections, flats, darks, rows, out, log,
                                                      progress, chunk_slices, stats)
        _warn_clipped(clipped, n_values)
        return volume

    def _reconstruct(self, projections, flats, darks, rows, out, log, progress, chunk_slices,
                     stats):
        """``(volume, values clipped, values normalised)``."""
        (n_angles, n_rows, n_bins), first, stop, flats, darks = _inputs(projections, flats, darks,
                                                                        rows)
        g = self.geometry
        if (n_angles, n_bins) != (g.n_angles, g.n_bins):
            raise ValueError(f"projections: expected {g.n_angles} angles x rows x {g.n_bins} "
                             f"bins (this Reconstructor's), got shape {tuple(projections.shape)}")
        if self._team is None and self._client is None:
            raise ValueError("Reconstructor: closed; make a new one")
        out, offset = _output(out, g, first, stop, n_rows)
        slab = dict(projections=projections, flats=flats, darks=darks, first=first, stop=stop,
                    out=out, offset=offset, log=log, chunk_slices=chunk_slices,
                    progress=progress, stats=stats)
        if self._client is not None:
            from . import distributed  # Dask only when asked for
            clipped = distributed.reconstruct_on_cluster(self._client, self.setup, slab,
                                                         release=False)
        else:
            clipped = self._team.run(**slab)
        return out, clipped, (stop - first) * n_angles * n_bins

    def close(self, wait=True):
        """Free the devices' memory and staging (on a cluster, the workers'); with
        ``wait=False`` on a thread of its own, after the caller goes on (unpinning took
        0.1 s per device on the H200 machine). A closed Reconstructor makes nothing more."""
        team, self._team = self._team, None
        client, self._client = self._client, None
        if team is not None:
            team.close(wait)
        if client is not None:
            from .distributed import release_workers
            release_workers(client, background=not wait)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def geometry_of(setup) -> Geometry:
    """The geometry that :class:`pybp.Backprojector` makes of ``setup`` (its arguments,
    ``n_bins`` and ``angles`` among them), without a device."""
    return Geometry.create(setup["n_bins"], setup["angles"], setup.get("center"),
                           setup.get("slice_shape"), setup.get("slice_offset"),
                           setup.get("angle_weights"))


def _output(out, geometry, first, stop, n_rows):
    """``(out, offset)``: the caller's array checked (slices land at ``offset + i``), or
    a new one."""
    ny, nx = geometry.slice_shape
    n = stop - first
    if out is None:
        return np.empty((n, ny, nx), np.float32), 0
    offset = first if len(out.shape) == 3 and out.shape[0] == n_rows and n != n_rows else 0
    check_output(out, (n_rows if offset else n, ny, nx))
    return out, offset


class Pipelines:
    """One :class:`pybp.Backprojector` per device (``targets``: dicts of ``device``,
    ``context`` or ``queue``), kept for any number of :meth:`run` calls over slabs of
    one scan geometry; ``close()`` (or leaving a ``with`` block) releases them.

    With several devices nothing waits for all: they are made one after the other on a
    thread, and in :meth:`run` each device pins its staging and starts streaming as
    soon as it is ready, the first while the next is still being made (on the H200
    machine, making, pinning and releasing ran one device after the other however
    many threads asked: about 0.12 s, 0.13 s and 0.1 s each)."""

    def __init__(self, targets, n_bins, angles, **options):
        self.geometry = geometry_of(dict(options, n_bins=n_bins, angles=angles))
        self._pool = None
        if len(targets) == 1:  # errors now, before the caller's output is touched
            self._builds = [_done(Backprojector(n_bins, angles, **targets[0], **options))]
        else:
            # One at a time, in order: they ran no faster at once, and the first device
            # streams the sooner while the next is made.
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="pybp-build")
            self._builds = [self._pool.submit(Backprojector, n_bins, angles, **t, **options)
                            for t in targets]

    @property
    def members(self):
        """The Backprojectors (waits for those still being made)."""
        return [future.result() for future in self._builds]

    def run(self, projections, flats, darks, first, stop, out, offset, log=True,
            chunk_slices=None, progress=True, stats=None) -> int:
        """Reconstruct rows ``[first, stop)`` into ``out[offset + i]``; return how many
        values normalisation replaced. With several devices each streams on a thread of
        its own from one :class:`pybp.pipeline.Rows`."""
        n, g = stop - first, self.geometry
        dtype = raw_dtype(projections.dtype)
        if flats is not None:
            _check_flats_above_darks(flats, darks, first, stop)

        def prepare(bp):
            """On the device's own thread: its memory plan and staging."""
            executor = bp.executor
            memory = MemoryPlan.create(bp.plan, bp.device, g.n_angles * g.n_bins * dtype.itemsize,
                                       n, chunk_slices)
            executor.take_projections(dtype, log)
            executor.reserve(memory)
            return executor

        return _stream(self._builds, prepare, projections, flats, darks, first, n, out, offset,
                       progress, stats)

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


def _stream(builds, prepare, projections, flats, darks, first, n, out, offset, progress, stats):
    """Each device (``builds``: futures of Backprojectors) prepares (``prepare(bp)``
    returns its executor, slots reserved) and streams on a thread of its own, taking
    rows as soon as it is ready."""
    # Made on first use, the first block a chunk for each device, to start early: a
    # pipeline.RowBlocks for inputs that are not arrays, a pipeline.FlatField.
    blocks, field = [], []
    rows = pipeline.Rows(n, align=max(SLICES_PER_PASS))
    stop = threading.Event()
    members = [dict(read=0.0, write=0.0, wait_device=0.0, slices=0, clipped=0, wall=0.0,
                    built=0.0, prepare=0.0, executor=None) for _ in builds]
    bar = [None]
    bar_lock, prepare_lock = threading.Lock(), threading.Lock()
    tick = time.perf_counter()

    def pipeline_of(build, host):
        def read(start, count, staging):
            began = time.perf_counter()
            with bar_lock:
                if not blocks and not isinstance(projections, np.ndarray):
                    blocks.append(pipeline.RowBlocks(projections, first, first + n,
                                                     count * len(builds)))
                if not field and flats is not None:
                    field.append(pipeline.FlatField(flats, darks, first, first + n,
                                                    count * len(builds)))
            means = field[0].rows(first + start, count) if field else None
            block = blocks[0].rows(first + start, count) if blocks else \
                projections[:, first + start:first + start + count]
            pipeline.copy_blocks(reading, staging, block)
            host["read"] += time.perf_counter() - began
            return means

        def write(start, count, slices):
            began = time.perf_counter()
            pipeline.put_rows(writing, out, offset + start, slices)
            host["write"] += time.perf_counter() - began

        def run():
            nonlocal reading, writing
            bp = build.result()
            host["built"] = time.perf_counter() - tick
            with bar_lock:
                if bar[0] is None:
                    bar[0] = pipeline.Progress(n, bp.geometry.updates(), progress)
            with prepare_lock:  # pinning ran one device at a time anyway: first come first
                executor = host["executor"] = prepare(bp)  # served, so one starts early
            executor.stage_seconds.clear()
            began = time.perf_counter()
            host["prepare"] = began - tick
            if not stop.is_set():
                with pipeline.copy_pools() as (reading, writing):
                    host["clipped"] = pipeline.stream(executor, rows, read, write, bar[0], host,
                                                      stop)
            host["wall"] = time.perf_counter() - began
        reading = writing = None
        return run

    try:
        runs = [pipeline_of(b, h) for b, h in zip(builds, members)]
        if len(runs) == 1:
            runs[0]()
        else:
            _join_all(runs, stop)
    finally:
        for reader in blocks + field:
            reader.close()
    wall = time.perf_counter() - tick
    if stats is not None:
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
    return sum(h["clipped"] for h in members)


def _join_all(runs, stop):
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
                thread.join(0.1)  # short joins: Ctrl-C reaches this thread
    except BaseException:
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]
