"""``pybp.reconstruct`` (this module is named for what it makes, so that the function
is ``pybp.reconstruct``): a volume from detector projections, streamed through one
device or several (docs/architecture.md).

Projections come in the tomopy/DXchange layout ``(n_angles, n_rows, n_bins)`` as any
object with ``shape``, ``dtype`` and slicing (NumPy arrays, memmaps, h5py datasets),
and are read a chunk of rows at a time. On the device: the means of the flats and
darks, ``(p - dark) / (flat - dark)``, ``-log``, the transpose to sinograms, the FBP
filter, interleaving and back-projection; the slices go into ``out`` as they come.
With several devices, each runs its own pipeline and takes the next chunk of rows
when it has room for it (:class:`pybp.stream.team.Pipelines`); with a Dask client, workers take slabs
of rows (:mod:`pybp.distributed`).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from pybp import checks, distributed, registry
from pybp.api.cone import fdk
from pybp.api.iterative import cone_method
from pybp.centre import find_center
from pybp.geometry.angles import in_radians
from pybp.geometry.parallel import Geometry
from pybp.iterative import options as iterative_options
from pybp.iterative.options import OPTION_NAMES
from pybp.iterative.table import TABLE
from pybp.parallel import speed
from pybp.parallel.prepare import RowsTask, Setup, team
from pybp.stages import filters
from pybp.stages.normalize import warn_replaced
from pybp.stream.team import Job


def reconstruct(projections, geometry=None, flats=None, darks=None, center=None, rows=None,
                out=None, *, filter="ramp", padding="zero", log=True, progress=True,
                chunk_slices=None, device=None, devices=None, client=None, context=None,
                queue=None, stats=None, angle_unit=None, **options):
    """Reconstruct a scan in ``geometry``: a :class:`pybp.ParallelGeometry`, a
    :class:`pybp.ConeGeometry` (ASTRA's dicts: ``from_astra`` of either), a
    :class:`pybp.ParallelVectorGeometry` (any rays: laminography; iterative methods
    only, as cone beam's), or the angles of a parallel-beam scan. By filtered
    back-projection (FDK for cone beam), or an iterative ``method``; return the volume.

    Parallel beam: detector rows ``rows=(first, stop)`` (default all), the volume
    ``(stop - first, ny, nx)``. Cone beam: the geometry's volume ``(nz, ny, nx)``
    (:func:`pybp.fdk`, or the iterative method of the line integrals; ``rows``,
    ``center`` and ``chunk_slices`` are parallel beam's; ``short_scan``, ``params``,
    ``planes`` in ``options`` as :func:`pybp.fdk` takes them). The options below mean
    the same in both.

    - ``projections``: ``(n_angles, n_rows, n_bins)``, any integer or float dtype; NumPy
      arrays, memmaps, h5py datasets, or anything with ``shape``, ``dtype`` and slicing.
      Read a chunk of rows at a time, never whole.
    - ``geometry``: a geometry, or the angles, radians, one per projection
      (``angle_unit="deg"``: degrees; radians spanning more than one turn are refused
      unless ``angle_unit="rad"`` says so). A geometry holds the angles, the axis and
      the sizes: ``center`` (but ``"auto"``), ``angle_unit`` and the geometry's own
      options are refused beside it.
    - ``flats``, ``darks``: ``(n_frames, n_rows, n_bins)`` (or one 2-D frame) each, or
      both None for data already normalised. Values are normalised as
      ``(p - mean dark) / (mean flat - mean dark)``; with ``log`` (default) the FBP is of
      ``-log`` of that: values that are not positive become 1e-6 first, not-a-number
      ones 1 (counted in one warning). ``log=False`` back-projects the values as they are
      (e.g. sinograms already taken the log of, as ``(n_angles, n_rows, n_bins)``).
    - ``center``: the axis' detector column (default ``(n_bins - 1) / 2``), or
      ``"auto"``: found from the data by :func:`pybp.find_center` (Vo's method refined
      by the least negative slice), also with a ParallelGeometry, in place of its own.
    - ``out``: where slices go (NumPy array, memmap, h5py dataset), of shape
      ``(stop - first, ny, nx)``, or ``(n_rows, ny, nx)`` for slices to land at their own
      row; float dtype. Nothing is written before every argument has been checked; the
      values are checked as their chunk is read: with ``log=False`` a NaN or Inf stops
      the call with a ValueError naming its projection, row and bin, the chunks before
      it in ``out`` already.
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
    - ``chunk_slices``: the most rows per chunk (default: 4 from arrays, 16 from files;
      fewer where the device's memory, or ``memory_limit``, asks).
    - ``memory_limit`` (in ``options``): the most bytes of each device's memory a call
      keeps (default: 75% of the device's; the same rule as cone beam's).
    - ``method``: ``"fbp"`` (default), or an iterative method, ``"sirt"``, ``"sart"``,
      ``"cgls"`` or ``"tv"``, run on each chunk of slices in place of the filter and the
      back-projection, with ``iterations`` and its options in ``options``
      (``nonnegative``, ``relaxation``, ``subsets``, ``weight``: as :func:`pybp.sirt`
      and the others take them); ``filter``, FBP's, is then left at its default. Each
      slice is its own problem: any chunks, devices or workers give the same bits.
    - ``progress``: rows done, GU/s and time left on standard error for work longer
      than 2 s.
    - ``stats``: a dict to fill with timings (wall, device time per stage, host copies;
      with several devices, ``devices``: the slices and time of each).

    Each call makes the devices' kernels, memory and page-locked staging, and frees
    them after; to reconstruct several volumes of one geometry, a
    :class:`Reconstructor` keeps them between calls.
    """
    if geometry is None:  # the name before geometries, reconstruct(p, angles=...)
        geometry = options.pop("angles", None)
        if geometry is None:
            raise TypeError("geometry: give the scan's geometry (pybp.ParallelGeometry, "
                            "pybp.ConeGeometry) or its angles")
    if isinstance(geometry, (str, bytes, dict)):
        astra = (" (ASTRA's dicts: pybp.ConeGeometry.from_astra(proj_geom, vol_geom), or "
                 "pybp.ParallelGeometry's)" if isinstance(geometry, dict) else "")
        raise TypeError(f"geometry: expected a pybp geometry (pybp.ParallelGeometry, "
                        f"pybp.ConeGeometry, pybp.ParallelVectorGeometry) or the angles, got "
                        f"a {type(geometry).__name__}{astra}")
    if registry.is_whole(geometry):  # a whole volume: cone beam, parallel vectors
        parallel_only = dict(center=center, rows=rows, chunk_slices=chunk_slices,
                             angle_unit=angle_unit, stats=stats)
        given = [name for name, value in parallel_only.items() if value is not None]
        if given:
            raise ValueError(f"{given[0]}: "
                             + CONE_REFUSES[given[0]].format(kind=type(geometry).__name__))
        return _cone(projections, geometry, flats, darks, out, filter=filter, padding=padding,
                     log=log, progress=progress, device=device, devices=devices, client=client,
                     context=context, queue=queue, options=options)
    inputs = checks.projection_inputs(projections, flats, darks, rows)
    (n_angles, _, n_bins) = inputs[0]
    if isinstance(geometry, Geometry) and (n_angles, n_bins) != (geometry.n_angles,
                                                                 geometry.n_bins):
        raise ValueError(f"projections: expected {geometry.n_angles} angles x rows x "
                         f"{geometry.n_bins} bins (the geometry's), got "
                         f"{tuple(projections.shape)}")
    angles, center, angle_unit = _parallel(geometry, center, angle_unit, options)
    if np.ndim(angles) != 1 or len(angles) != n_angles:
        raise ValueError(f"angles: expected one per projection ({n_angles}, axis 0 of "
                         f"projections), got {np.shape(angles)}")
    angles = in_radians(angles, angle_unit)
    if isinstance(center, str) and center == "auto":
        center = find_center(projections, angles, flats, darks, rows, log=log, angle_unit="rad",
                             device=device if devices is None and client is None else None)
    tick = time.perf_counter()
    made = Reconstructor(n_bins, angles, center, filter=filter, padding=padding, device=device,
                         devices=devices, client=client, context=context, queue=queue,
                         angle_unit="rad", **options)
    try:
        setup_plan = time.perf_counter() - tick
        volume, clipped, n_values = made._reconstruct(projections, inputs, out, log, progress,
                                                      chunk_slices, stats)
    except BaseException:
        made.close()
        raise
    released = time.perf_counter()
    made.close(wait=False)  # unpinning on a thread of its own, after the caller goes on
    if stats is not None and client is None:
        stats.update(setup_plan=setup_plan, setup_release=time.perf_counter() - released)
    warn_replaced(clipped, n_values)
    return volume


class Reconstructor:
    """Volumes of one scan geometry, one call after another, on one device, several
    (``devices``) or the workers of a Dask ``client``: each device's kernels, memory
    and page-locked staging are made once and kept until :meth:`close` (or the end of a
    ``with`` block), so that every call after the first streams from its start.

    ``n_bins``, ``angles`` (radians), ``center`` and the keywords are those of
    :func:`reconstruct`, which is one call of a Reconstructor made for it and closed
    after; or a :class:`pybp.ParallelGeometry` in place of ``n_bins`` and ``angles``::

        with pybp.Reconstructor(2048, angles, center=1021.5, devices="all") as rec:
            for scan in scans:
                rec.reconstruct(scan.projections, scan.flats, scan.darks, out=...)
    """

    def __init__(self, n_bins, angles=None, center=None, *, filter="ramp", padding="zero",
                 device=None, devices=None, client=None, context=None, queue=None,
                 angle_unit=None, method="fbp", iterations=None, **options):
        if isinstance(center, str) and center == "auto":
            raise ValueError("center: 'auto' finds the axis from the data, which a "
                             "Reconstructor has not yet: pybp.find_center(...) first, or "
                             "pybp.reconstruct(..., center='auto')")
        if isinstance(n_bins, Geometry):
            if angles is not None:
                raise ValueError("angles: the geometry holds them; give a ParallelGeometry, "
                                 "or n_bins and angles")
            geometry, n_bins = n_bins, n_bins.n_bins
            angles, center, angle_unit = _parallel(geometry, center, angle_unit, options)
        elif angles is None:
            raise TypeError("angles: give n_bins and the angles, or a pybp.ParallelGeometry")
        if method != "fbp":
            if filter not in (None, "ramp"):  # the default is FBP's
                raise ValueError(f"filter: FBP's window; {method} takes none")
            filter = None
        elif filter is None:
            raise ValueError(f"filter: FBP needs a filter; expected one of "
                             f"{', '.join(filters.FILTERS)}")
        chosen = [name for name, value in (("device", device), ("devices", devices),
                                           ("client", client), ("context", context),
                                           ("queue", queue)) if value is not None]
        if len(chosen) > 1 and set(chosen) != {"context", "queue"}:
            raise ValueError(f"{chosen[1]}: give one of device, devices, client, context or "
                             f"queue, not {' and '.join(chosen)}")
        options.pop("progress", None)  # a Backprojector option; volumes take it per call
        _known_options(options)
        angles = in_radians(angles, angle_unit)
        self.setup = Setup.of(n_bins, angles, center, filter=filter, padding=padding,
                              method=method, iterations=iterations, **options)
        self.geometry = self.setup.geometry()
        self._client, self._team = client, None
        if client is not None:
            if not hasattr(client, "submit") or not hasattr(client, "scheduler_info"):
                raise TypeError(f"client: expected a dask.distributed.Client, got "
                                f"{type(client).__name__}")
            return
        if devices is not None:
            targets = [dict(device=d) for d in distributed.device_list(devices)]
        else:
            if len(chosen) == 0:
                speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
            targets = [dict(device=device, context=context, queue=queue)]
        self._team = team(self.setup, targets, self.geometry)

    def kernels(self) -> list:
        """What gives each value its last bits, per device: ``[{"device": identity,
        "name": name, "kernels": [parameter set of each pass width]}, ...]`` (empty on
        a Dask cluster, whose workers choose their own devices). The command stores it
        with the slices, and ``--resume`` refuses another."""
        if self._team is None:
            return []
        return [dict(device=recipe.device.identity, name=recipe.device.name,
                     kernels=recipe.kernel_keys()) for recipe in self._team.members]

    def reconstruct(self, projections, flats=None, darks=None, rows=None, out=None, *,
                    log=True, progress=True, chunk_slices=None, stats=None):
        """The volume of detector rows ``rows=(first, stop)`` of ``projections``
        ``(n_angles, n_rows, n_bins)`` (this Reconstructor's angles and bins); the
        arguments are those of :func:`reconstruct`."""
        inputs = checks.projection_inputs(projections, flats, darks, rows)
        volume, clipped, n_values = self._reconstruct(projections, inputs, out, log, progress,
                                                      chunk_slices, stats)
        warn_replaced(clipped, n_values)
        return volume

    def _reconstruct(self, projections, inputs, out, log, progress, chunk_slices, stats):
        """``(volume, values clipped, values normalised)`` of ``projections``, ``inputs``
        their checked shape, rows, flats and darks (:func:`pybp.checks.projection_inputs`)."""
        (n_angles, n_rows, n_bins), first, stop, flats, darks = inputs
        log, progress = checks.flag(log, "log"), checks.flag(progress, "progress")
        g = self.geometry
        if (n_angles, n_bins) != (g.n_angles, g.n_bins):
            raise ValueError(f"projections: expected {g.n_angles} angles x rows x {g.n_bins} "
                             f"bins (this Reconstructor's), got shape {tuple(projections.shape)}")
        if self._team is None and self._client is None:
            raise ValueError("Reconstructor: closed; make a new one")
        if chunk_slices is not None:
            chunk_slices = checks.positive_int(chunk_slices, "chunk_slices")
        out, offset = _output(out, g, first, stop, n_rows,
                              dict(projections=projections, flats=flats, darks=darks))
        if self._client is not None:
            clipped = distributed.on_cluster(
                self._client, RowsTask(self.setup, first, offset, log, chunk_slices), first,
                stop, dict(projections=projections, flats=flats, darks=darks, out=out),
                progress=progress, release=False, stats=stats)
        else:
            clipped = self._team.run(Job(projections, flats, darks, first, stop, out,
                                         offset=offset, log=log, chunk_slices=chunk_slices,
                                         progress=progress, stats=stats))
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
            distributed.release_workers(client, background=not wait)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# What cone beam's volume takes in place of parallel beam's options
CONE_REFUSES = {
    "center": "a {kind} holds its detector (detector_offset of its constructors)",
    "rows": "cone beam reconstructs the geometry's volume (volume_shape and volume_offset "
            "choose it; planes=(first, stop) some of its z planes)",
    "chunk_slices": "parallel beam's; cone beam takes memory_limit",
    "angle_unit": "a {kind}'s angles are radians",
    "stats": "parallel beam's",
}
# A ParallelGeometry's own options, refused beside it
GEOMETRY_OPTIONS = ("slice_shape", "slice_offset", "angle_weights", "pixel_size", "voxel_size")


def _parallel(geometry, center, angle_unit, options):
    """``(angles, center, angle_unit)`` of a parallel-beam call, ``options`` given the
    geometry's sizes where ``geometry`` is a :class:`pybp.ParallelGeometry` (else the
    angles)."""
    if not isinstance(geometry, Geometry):
        return geometry, center, angle_unit
    if angle_unit is not None:
        raise ValueError("angle_unit: a ParallelGeometry's angles are radians")
    for name in GEOMETRY_OPTIONS:
        if name in options:
            raise ValueError(f"{name}: the geometry holds it (pybp.ParallelGeometry's {name})")
    if center is not None and not (isinstance(center, str) and center == "auto"):
        raise ValueError("center: the geometry holds the axis (pybp.ParallelGeometry(..., "
                         "center=)); center='auto' finds it from the data")
    options.update(slice_shape=geometry.slice_shape, slice_offset=geometry.slice_offset,
                   angle_weights=geometry.weights, pixel_size=geometry.pixel_size,
                   voxel_size=geometry.voxel_size)
    return geometry.angles, geometry.center if center is None else center, "rad"


def _cone(projections, geometry, flats, darks, out, *, filter, padding, log, progress, device,
          devices, client, context, queue, options):
    """:func:`reconstruct` of a :class:`pybp.ConeGeometry`: FDK (:func:`pybp.fdk`), or an
    iterative method of the line integrals on one device or several
    (:func:`pybp.api.iterative.cone_method`); of a :class:`pybp.ParallelVectorGeometry`,
    the iterative method alone."""
    method = options.pop("method", "fbp")
    iterations = options.pop("iterations", None)
    if method in ("fbp", "fdk") and registry.kind_of(geometry).filtered != "FDK":
        raise ValueError(f"method: {method!r}: pybp has no filtered back-projection of a "
                         f"{type(geometry).__name__} (its rays need not cross one axis at "
                         "right angles); take method='sirt', 'sart', 'cgls' or 'tv'")
    if method in ("fbp", "fdk"):
        for name in ["iterations"] * (iterations is not None) + list(options):
            if name == "iterations" or name in OPTION_NAMES or name in STREAM_HINTS:
                raise ValueError(f"{name}: an option of the iterative methods; FDK takes "
                                 "none (method='sirt', 'sart', 'cgls' or 'tv')")
        targets = {name: value for name, value in (("device", device), ("context", context),
                                                   ("queue", queue)) if value is not None}
        return fdk(projections, geometry, filter=filter, padding=padding, out=out, flats=flats,
                   darks=darks, progress=progress, devices=devices, client=client, log=log,
                   **targets, **options)
    checks.choice("method", method, tuple(TABLE) + ("fdk",))
    if filter not in (None, "ramp"):
        raise ValueError(f"filter: FDK's window; {method} takes none")
    for name, value in (("client", client), ("context", context), ("queue", queue)):
        if value is not None:
            raise ValueError(f"{name}: {method} of a {type(geometry).__name__} holds the whole "
                             "volume on each device; give device or devices")
    if device is not None and devices is not None:
        raise ValueError("devices: give device or devices, not both")
    chosen = {name: options.pop(name) for name in OPTION_NAMES if name in options}
    chosen = dict(method=method, iterations=iterations,
                  **iterative_options.check_options(method, iterations, chosen))
    steps = {name: options.pop(name) for name in ("rings", "ring_options", "phase",
                                                  "memory_limit") if name in options}
    for name in options:
        raise TypeError(f"{name}: not an option of pybp.reconstruct's cone-beam {method}; "
                        f"{STREAM_HINTS.get(name, 'its docstring lists them')}")
    return cone_method(chosen, projections, geometry, flats=flats, darks=darks, log=log,
                       device=device, devices=devices, progress=progress, out=out, **steps)


# Options of the methods' own calls (pybp.sirt and the others) that the stream has no
# place for, and TIGRE's name for the iterations: what to do instead
STREAM_HINTS = {
    "x0": "each chunk's method starts at zero; pybp.sirt and the others take x0",
    "mask": "pybp.sirt and the others take a mask; the stream takes circle=True",
    "callback": "pybp.sirt and the others take a callback; the stream shows progress",
    "niter": "TIGRE's name; pybp's is iterations",
}


def _known_options(options):
    """A ``TypeError`` naming the first of ``options`` that is not an option of
    :func:`reconstruct`, and what to do instead (not the inner constructor's)."""
    known = {f.name for f in dataclasses.fields(Setup)} | set(OPTION_NAMES)
    for name in options:
        if name not in known:
            raise TypeError(f"{name}: not an option of pybp.reconstruct; "
                            f"{STREAM_HINTS.get(name, 'its docstring lists them')}")


def _output(out, geometry, first, stop, n_rows, inputs):
    """``(out, offset)``: the caller's array checked (slices land at ``offset + i``; it
    shares no memory with ``inputs``), or a new one."""
    ny, nx = geometry.slice_shape
    n = stop - first
    if out is None:
        checks.check_volume_memory((n, ny, nx))
        return np.empty((n, ny, nx), np.float32), 0
    offset = first if len(out.shape) == 3 and out.shape[0] == n_rows and n != n_rows else 0
    checks.check_output(out, (n_rows if offset else n, ny, nx), inputs=inputs)
    return out, offset

