"""FDK through the stream, on one device or several: the projections' rows that the
planes project onto go through the stream (pybp/cone/filtering.py: normalisation, phase
retrieval, ring removal, FDK's weights and the filter; chunks of rows shared out among
the devices as parallel beam's are) into a store of filtered projections in
page-locked host memory; then each device takes the next slab of planes and
back-projects it from the store (pybp/cone/prepare.py, ``Unit.from_store``). A row is
filtered to the same bits on any device, in any chunk, and a slab's voxels do not
depend on the device that made it: the volume is the same bit for bit on one device
or several, and equals :class:`pybp.ConeBackprojector`'s.
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

from pybp import checks
from pybp.cl.device import open_device
from pybp.cl.staging import Staging
from pybp.cone import slabs
from pybp.cone.filtering import ROW_ALIGN, Filtering
from pybp.cone.prepare import STORE_HOST_SHARE, Unit, plane_range
from pybp.geometry.cone import ConeGeometry
from pybp.stream.progress import Progress
from pybp.stream.sources import copy_pools
from pybp.stream.team import Pipelines, Slab, join_all


class _StoreRows:
    """The store ``(n_angles, rows, n_cols)`` as the stream's output: rows of sinograms
    ``(count, n_angles, n_cols)`` put at detector row ``at`` (from several threads,
    disjoint rows)."""

    def __init__(self, store):
        self.store = store

    def __setitem__(self, rows: slice, sinograms):
        self.store[:, rows] = np.swapaxes(sinograms, 0, 1)


def store_bytes(geometry: ConeGeometry) -> int:
    """Host memory of the store: every projection's rows (even) as float32."""
    n_rows, n_cols = geometry.detector_shape
    return geometry.n_angles * slabs.even(n_rows) * n_cols * 4


def reconstruct(projections, geometry: ConeGeometry, out, targets, *, filter="ramp",
                padding="zero", short_scan=None, flats=None, darks=None, rings=None,
                ring_options=None, phase=None, memory_limit=None, params=None, planes=None,
                progress=True) -> int:
    """FDK of ``projections`` (line integrals; counts where ``flats`` are given) into
    ``out`` (the volume, or its ``planes``) on ``targets`` (dicts of ``device``,
    ``context`` or ``queue``), with ``rings``/``ring_options`` and ``phase`` as for
    :func:`pybp.reconstruct`; returns how many values the flat-field rule replaced."""
    n_rows, n_cols = geometry.detector_shape
    wanted = plane_range(planes, geometry.volume_shape[0])
    size = store_bytes(geometry)
    if size > STORE_HOST_SHARE * checks.host_memory():
        raise ValueError(f"projections: their filtered line integrals ({size / 2**30:.3g} GiB) "
                         f"are kept in host memory, over {STORE_HOST_SHARE:.0%} of this "
                         f"machine's {checks.host_memory() / 2**30:.3g} GiB")
    opened = []
    for target in targets:  # one context per device, for both phases
        cl_device, context, queue = open_device(**target)
        opened.append(dict(queue=queue) if queue is not None else dict(context=context))
    first_row, count = slabs.window(geometry, wanted, range(geometry.n_angles))
    log = flats is not None
    if log and darks is None:
        darks = np.zeros(geometry.detector_shape, np.float32)
    first = opened[0]
    queue = first.get("queue") or cl.CommandQueue(first["context"])
    staging = Staging(queue)
    try:
        store = staging.array(size // 4, np.float32).reshape(geometry.n_angles, -1, n_cols)
        if store.shape[1] > n_rows:  # the FFT pairs an odd last row with zeros
            store[:, n_rows:] = 0

        def filtering(target):
            return Filtering(geometry, filter, padding, short_scan, rings, ring_options, phase,
                             memory_limit, **target)

        with Pipelines(filtering, opened, align=ROW_ALIGN) as team:
            replaced = team.run(Slab(projections, flats, darks, first_row, first_row + count,
                                     _StoreRows(store), offset=first_row, log=log,
                                     progress=progress))
        _back_project(store, geometry, out, opened, filter, params, memory_limit, wanted,
                      progress)
    finally:
        staging.release()
    return replaced


def _back_project(store, geometry, out, targets, filter, params, memory_limit, planes,
                  progress):
    """Every slab of ``planes`` from ``store`` into ``out``, each device taking the next."""
    units = []
    try:
        for target in targets:  # one parameter set: the same passes on every device
            units.append(Unit(geometry, params or (units[0].params if units else None),
                              filter=filter, memory_limit=memory_limit,
                              planes=(planes.start, planes.stop), filtered=True, **target))
        # The shortest slabs fit every device (its slab buffer, its windows' rows).
        plan = min((unit.plan for unit in units), key=lambda p: p.slab_planes)
        _, ny, nx = geometry.volume_shape
        passes = len(plan.slabs) * len(plan.passes)
        bar = Progress(passes, len(planes) * ny * nx * geometry.n_angles / passes, progress,
                       what="passes", rate="GUPS")
        left, lock = iter(plan.slabs), threading.Lock()

        def take():
            with lock:
                return next(left, None)

        def runs(unit):
            def run():
                with copy_pools() as (reading, _):
                    unit.from_store(store, out, take, reading, lambda _: bar.update(1))
            return run

        try:
            if len(units) == 1:
                runs(units[0])()
            else:
                join_all([runs(unit) for unit in units], threading.Event())
        finally:
            bar.close()
    finally:
        for unit in units:
            unit.close()
