"""Parallel beam's volumes (``pybp.Reconstructor``, and :func:`reconstruct`, what
``pybp.reconstruct`` does with a :class:`pybp.ParallelGeometry` or the angles): a volume
from detector projections, streamed through one device or several (docs/architecture.md).

Projections come in the tomopy/DXchange layout ``(n_angles, n_rows, n_bins)`` as any
object with ``shape``, ``dtype`` and slicing (NumPy arrays, memmaps, h5py datasets),
and are read a chunk of rows at a time. On the device: the means of the flats and
darks, ``(p - dark) / (flat - dark)``, ``-log``, the transpose to sinograms, the FBP
filter, interleaving and back-projection; the slices go into ``out`` as they come.
With several devices, each runs its own pipeline and takes the next chunk of rows
when it has room for it (:class:`pybp.stream.jobs.Pipelines`); with a Dask client, workers take slabs
of rows (:mod:`pybp.distributed`).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from pybp import checks, distributed
from pybp.cl.device import device_list
from pybp.geometry.angles import in_radians
from pybp.geometry.parallel import ParallelGeometry
from pybp.iterative.options import OPTION_NAMES, STREAM_HINTS
from pybp.parallel import speed
from pybp.parallel.centre import find_center
from pybp.parallel.prepare import RowsTask, Setup, pipelines
from pybp.stages import filters
from pybp.stages.normalize import warn_replaced
from pybp.stream.jobs import Job


def reconstruct(projections, geometry, flats=None, darks=None, center=None, rows=None,
                out=None, *, filter="ramp", padding="zero", log=True, progress=True,
                chunk_slices=None, device=None, devices=None, client=None, context=None,
                queue=None, stats=None, angle_unit=None, **options):
    """:func:`pybp.reconstruct` of a :class:`pybp.ParallelGeometry` or of the angles
    (its docstring says what each argument is): one :class:`Reconstructor` made for the
    call and closed after."""
    inputs = checks.projection_inputs(projections, flats, darks, rows)
    (n_angles, _, n_bins) = inputs[0]
    if isinstance(geometry, ParallelGeometry) and (n_angles, n_bins) != (geometry.n_angles,
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
        if isinstance(n_bins, ParallelGeometry):
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
        self._client, self._pipelines = client, None
        if client is not None:
            if not hasattr(client, "submit") or not hasattr(client, "scheduler_info"):
                raise TypeError(f"client: expected a dask.distributed.Client, got "
                                f"{type(client).__name__}")
            return
        if devices is not None:
            targets = [dict(device=d) for d in device_list(devices)]
        else:
            if len(chosen) == 0:
                speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
            targets = [dict(device=device, context=context, queue=queue)]
        self._pipelines = pipelines(self.setup, targets, self.geometry)

    def kernels(self) -> list:
        """What gives each value its last bits, per device: ``[{"device": identity,
        "name": name, "kernels": [parameter set of each pass width]}, ...]`` (empty on
        a Dask cluster, whose workers choose their own devices). The command stores it
        with the slices, and ``--resume`` refuses another."""
        if self._pipelines is None:
            return []
        return [dict(device=recipe.device.identity, name=recipe.device.name,
                     kernels=recipe.kernel_keys()) for recipe in self._pipelines.members]

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
        if self._pipelines is None and self._client is None:
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
            clipped = self._pipelines.run(Job(projections, flats, darks, first, stop, out,
                                         offset=offset, log=log, chunk_slices=chunk_slices,
                                         progress=progress, stats=stats))
        return out, clipped, (stop - first) * n_angles * n_bins

    def close(self, wait=True):
        """Free the devices' memory and staging (on a cluster, the workers'); with
        ``wait=False`` on a thread of its own, after the caller goes on (unpinning took
        0.1 s per device on the H200 machine). A closed Reconstructor makes nothing more."""
        kept, self._pipelines = self._pipelines, None
        client, self._client = self._client, None
        if kept is not None:
            kept.close(wait)
        if client is not None:
            distributed.release_workers(client, background=not wait)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# A ParallelGeometry's own options, refused beside it
GEOMETRY_OPTIONS = ("slice_shape", "slice_offset", "angle_weights", "pixel_size", "voxel_size")


def _parallel(geometry, center, angle_unit, options):
    """``(angles, center, angle_unit)`` of a parallel-beam call, ``options`` given the
    geometry's sizes where ``geometry`` is a :class:`pybp.ParallelGeometry` (else the
    angles)."""
    if not isinstance(geometry, ParallelGeometry):
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

