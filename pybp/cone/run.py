"""FDK on one device or several, by the one stream: each device takes the next slab of
the volume and adds every projection's pass into it (pybp/cone/backproject.py's stages:
pre-weighting from counts or line integrals, the row filter, the back-projection;
pybp/stream/slabs.py's schedule), reading each pass's window of rows from the
projections itself. Where ring removal or phase retrieval asks for whole rows or whole
projections first, the rows the planes project onto go through the rows' stream first
(pybp/cone/corrections.py: normalisation, phase retrieval, ring removal; chunks of rows
shared out among the devices as parallel beam's are) into line integrals in host
memory, which the same passes then take as they take a user's. A slab's voxels do not
depend on the device that made it, nor a row's corrections on its chunk: the volume is
the same bit for bit on one device or several, and equals :class:`pybp.ConeBackprojector`'s.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from pybp import checks
from pybp.cl.device import open_device
from pybp.cone import slabs
from pybp.cone.backproject import SlabRecipe, SlabRun, plane_range
from pybp.cone.corrections import Corrections
from pybp.geometry.cone import ConeGeometry
from pybp.stream.executor import WRITES
from pybp.stream.progress import Progress
from pybp.stream.slabs import Parts, accumulate
from pybp.stream.sources import COPY_THREADS, SinogramsInto
from pybp.stream.jobs import Job, Pipelines


def reconstruct(projections, geometry: ConeGeometry, out, targets, *, filter="ramp",
                padding="zero", short_scan=None, flats=None, darks=None, rings=None,
                ring_options=None, phase=None, memory_limit=None, params=None, planes=None,
                progress=True, stats=None, log=None) -> int:
    """FDK of ``projections`` (line integrals; counts where ``flats`` are given; ``log``
    as :func:`line_integrals` takes it) into
    ``out`` (the volume, or its ``planes``) on ``targets`` (dicts of ``device``,
    ``context`` or ``queue``), with ``rings``/``ring_options`` and ``phase`` as for
    :func:`pybp.reconstruct`; returns how many values the flat-field rule replaced.
    ``stats`` (a dict): the seconds of each phase (``rows_seconds``, with rings or
    phase; ``slabs_seconds``), and the rows' stream's (as :class:`pybp.stream.jobs.Job`
    has them)."""
    wanted = plane_range(planes, geometry.volume_shape[0])
    opened = _opened(targets)
    log, darks = _flat_field(geometry, flats, darks, log)
    options = dict(filter=filter, padding=padding, short_scan=short_scan,
                   memory_limit=memory_limit, planes=(wanted.start, wanted.stop))
    tick = time.perf_counter()
    if rings is None and phase is None and log == (flats is not None):
        # the passes normalise, weight and filter their windows themselves
        replaced = back_project(projections, geometry, out, opened, params, progress,
                                flats=flats, darks=darks, **options)
        if stats is not None:
            stats.update(slabs_seconds=time.perf_counter() - tick)
        return replaced
    # Rings and phase need whole rows or whole projections first: the line integrals of
    # the rows the planes project onto (all of them for the whole volume, from an even
    # row), then FDK of those through the same passes.
    first_row, count = slabs.window(geometry, wanted, range(geometry.n_angles))
    integrals, replaced = _line_integrals(
        projections, geometry, opened, flats, darks, log, rings, ring_options, phase,
        memory_limit, progress, (first_row, first_row + count), stats)
    made = time.perf_counter()
    back_project(integrals, geometry, out, opened, params, progress, first_row=first_row,
                 **options)
    if stats is not None:
        stats.update(rows_seconds=made - tick, slabs_seconds=time.perf_counter() - made)
    return replaced


def check(geometry: ConeGeometry, targets, *, filter="ramp", padding="zero", short_scan=None,
          flats=None, darks=None, rings=None, phase=None, memory_limit=None, params=None,
          planes=None, log=None, **_):
    """The ``ValueError`` :func:`reconstruct` with these arguments would raise where its
    slabs do not fit a device of ``targets``, raised now (each device's recipe made, as
    :func:`back_project` makes them, and closed): a command checks this before it makes
    its output."""
    log, darks = _flat_field(geometry, flats, darks, log)
    direct = rings is None and phase is None and log == (flats is not None)
    wanted = plane_range(planes, geometry.volume_shape[0])
    recipes = []
    try:
        for target in _opened(targets):
            first = recipes[0] if recipes else None
            recipes.append(SlabRecipe(
                geometry, params or (first.params if first else None), **target,
                filter=filter, padding=padding, short_scan=short_scan,
                memory_limit=memory_limit, planes=(wanted.start, wanted.stop),
                flats=flats if direct else None, darks=darks if direct else None,
                devices=len(targets),
                plan=first.plan if first else None))
    finally:
        for recipe in recipes:
            recipe.close()


def _host_shape(geometry, count, what) -> tuple:
    """``(n_angles, count, n_cols)``: ``count`` detector rows kept in host memory,
    refused where they would take over :data:`pybp.checks.HOST_MEMORY_SHARE` of the
    host's memory."""
    shape = (geometry.n_angles, count, geometry.detector_shape[1])
    size = 4 * int(np.prod(shape))
    if not checks.within_host_share(size):
        raise ValueError(f"projections: their {what} ({size / 2**30:.3g} GiB) are kept in "
                         f"host memory, over {checks.HOST_MEMORY_SHARE:.0%} of this machine's "
                         f"{checks.host_memory() / 2**30:.3g} GiB")
    return shape


def checked_frames(geometry, flats, darks, phase, log) -> tuple:
    """``(flats, darks)`` checked against the detector before any work, for a call that
    normalises (``log``: whether it takes ``-log``) and may retrieve the ``phase``: the
    one rule of missing frames (:func:`pybp.checks.flat_field_frames`), and phase
    retrieval a transmission."""
    flats, darks = checks.flat_field_frames(flats, darks, geometry.detector_shape)
    if phase is not None and not log:
        raise ValueError("phase: retrieval works on the transmission, before -log; give "
                         "flats (and darks) with the detector counts, or transmissions with "
                         "log=True")
    return flats, darks


def _flat_field(geometry, flats, darks, log=None) -> tuple:
    """``(log, darks)``: the frames by the one rule (:func:`pybp.checks.flat_field_frames`:
    flats alone are counts above a dark of zero); ``-log`` is taken where ``log`` says
    (None: where flats are given, FDK's rule; True without flats: the projections are
    transmissions)."""
    log = checks.log_option(log, flats)
    return log, checks.flat_field_frames(flats, darks, geometry.detector_shape)[1]


def _opened(targets) -> list:
    """One context per device of ``targets``, for both phases."""
    opened = []
    for target in targets:
        _, context, queue = open_device(**target)
        opened.append(dict(queue=queue) if queue is not None else dict(context=context))
    return opened


def line_integrals(projections, geometry: ConeGeometry, targets, *, flats=None, darks=None,
                   rings=None, ring_options=None, phase=None, memory_limit=None,
                   progress=True, log=None):
    """``(line integrals, values the flat-field rule replaced)``: the line integrals of
    ``projections`` ``(n_angles, n_rows, n_cols)`` (counts where ``flats`` are given) in
    host memory, float32, made on ``targets`` as FDK makes them where rings or phase
    ask for it (normalisation, ``-log``, ``phase``, ``rings``): what cone beam's
    iterative methods start from. ``log``: whether ``-log`` is taken (default: where
    flats are given; True without flats: of the values, transmissions)."""
    log, darks = _flat_field(geometry, flats, darks, log)
    return _line_integrals(projections, geometry, _opened(targets), flats, darks, log, rings,
                           ring_options, phase, memory_limit, progress,
                           (0, geometry.detector_shape[0]))


def _line_integrals(projections, geometry, opened, flats, darks, log, rings, ring_options,
                    phase, memory_limit, progress, rows, stats=None) -> tuple:
    """:func:`line_integrals` of detector ``rows`` ``(first, stop)`` on the ``opened``
    devices, their chunks of rows shared out as parallel beam's are: ``(n_angles, stop -
    first, n_cols)`` float32, and the values replaced."""
    first, stop = rows
    integrals = np.zeros(_host_shape(geometry, stop - first, "line integrals"), np.float32)

    def corrections(target):
        return Corrections(geometry, rings, ring_options, phase, memory_limit, **target)

    with Pipelines(corrections, opened) as pipelines, \
            SinogramsInto(integrals, COPY_THREADS * WRITES) as into:
        replaced = pipelines.run(Job(projections, flats, darks, first, stop, into, offset=0,
                                     log=log, progress=progress, stats=stats))
    return integrals, replaced


def back_project(source, geometry, out, targets, params=None, progress=True, first_row=0,
                 **options) -> int:
    """Every slab of the ``planes`` in ``options`` from ``source`` (projections, or
    their rows from the detector's ``first_row``) into ``out``, each device of ``targets`` taking the next (with several, slabs of at
    most a device's share of the planes, so that each has one); returns the values the
    flat-field rule replaced. ``options``: :class:`pybp.cone.backproject.SlabRecipe`'s."""
    recipes = []
    try:
        for target in targets:  # one parameter set and one plan: the same passes everywhere
            first = recipes[0] if recipes else None
            recipes.append(SlabRecipe(
                geometry, params or (first.params if first else None), **target, **options,
                devices=len(targets), plan=first.plan if first else None))
        return slabs_of(recipes, source, out, progress, first_row)
    finally:
        # Each device's queues are finished before the source they read goes.
        for recipe in recipes:
            recipe.close()


def slabs_of(recipes, source, out, progress=True, first_row=0, fill=None) -> int:
    """Every slab of the ``recipes``' plan (one per device, one plan) from ``source``
    into ``out``, each device taking the next, with a progress line (projections
    done, GUPS) where ``progress``; returns the values the flat-field rule replaced.
    ``fill`` (a :class:`pybp.cone.store.StoreFill`, with ``filtered`` recipes): the
    projections are pre-weighted and filtered into its store first, which the slabs
    then read."""
    geometry, plan = recipes[0].geometry, recipes[0].plan
    _, ny, nx = geometry.volume_shape
    parts = plan.slabs
    if not isinstance(out, np.ndarray) and len(parts) > len(recipes):  # written behind
        parts = slabs.tapered(geometry, plan, recipes[0].params.voxels_per_item)
    planes = sum(slab.n_planes for slab in parts)
    bar = Progress((len(parts) + (fill is not None)) * geometry.n_angles,
                   planes * ny * nx / len(parts), progress, what="projections",
                   rate="GUPS")
    stop = threading.Event()
    try:
        replaced = 0
        if fill is not None:  # the phases take turns with the device memory
            for recipe in recipes:
                recipe.executor.release_memory()
            replaced = fill.run(source, bar, stop)
            source, first_row = fill.store, fill.store.first_row
        return replaced + accumulate(
            [SlabRun(recipe, source, out, first_row, len(recipes)) for recipe in recipes],
            Parts(parts, stop), bar, stop, lambda slab: slab.n_planes * len(parts) / planes)
    finally:
        bar.close()


class _PlanesFrom:
    """``out`` from index ``at``: a task's planes ``[0, n)`` go to ``out[at:at + n]``."""

    def __init__(self, out, at):
        self.out, self.at = out, at

    def __setitem__(self, key: slice, planes):
        start = self.at + (key.start or 0)
        self.out[start:start + len(planes)] = planes


@dataclass(frozen=True)
class PlanesTask:
    """Cone beam's Dask task (pybp/distributed.py's :func:`on_cluster`): z planes ``[a,
    b)`` of ``geometry``'s volume by :func:`reconstruct` on a worker's devices (from
    multiples of ``PLANE_ALIGN``: bit for bit the volume of one device), plane ``first +
    i`` written to ``out[offset + i]``; ``log`` as :func:`reconstruct` takes it (None:
    where flats are given), ``options`` its keyword arguments."""

    geometry: ConeGeometry
    first: int
    offset: int = 0
    log: bool | None = None
    options: dict = field(default_factory=dict)
    what = "planes"
    rate = "GUPS"
    align = slabs.PLANE_ALIGN

    @property
    def updates(self) -> float:
        """Updates of one plane (for the progress line's rate)."""
        _, ny, nx = self.geometry.volume_shape
        return ny * nx * self.geometry.n_angles

    def __call__(self, worker, projections, flats, darks, out, a, b) -> dict:
        planes = _PlanesFrom(out, self.offset + a - self.first)
        replaced = reconstruct(projections, self.geometry, planes,
                               [dict(device=d) for d in worker.devices], flats=flats,
                               darks=darks, planes=(a, b), progress=False,
                               log=self.log or flats is not None, **self.options)
        return dict(clipped=replaced, devices=[d.name for d in worker.devices])
