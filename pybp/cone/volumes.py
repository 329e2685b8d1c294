"""What ``pybp.reconstruct`` does with a whole volume (a :class:`pybp.ConeGeometry`, or
parallel rays along any direction): FDK (:func:`fdk`, also ``pybp.fdk``'s work) where the
geometry has it, or an iterative method of the line integrals (:func:`method`) on one
device or several, on this machine or on the workers of a Dask client."""

from __future__ import annotations

import numpy as np

from pybp import checks, distributed
from pybp.cl.device import device_list
from pybp.cone import run
from pybp.cone.backproject import plane_range
from pybp.geometry.cone import ConeGeometry
from pybp.iterative import options as iterative_options
from pybp.iterative.options import OPTION_NAMES, STREAM_HINTS
from pybp.iterative.table import TABLE
from pybp.stages.normalize import warn_replaced

# What a whole volume takes in place of parallel beam's options of pybp.reconstruct
REFUSES = {
    "center": "a {kind} holds its detector (detector_offset of its constructors)",
    "rows": "cone beam reconstructs the geometry's volume (volume_shape and volume_offset "
            "choose it; planes=(first, stop) some of its z planes)",
    "chunk_slices": "parallel beam's; cone beam takes memory_limit",
    "angle_unit": "a {kind}'s angles are radians",
    "stats": "parallel beam's",
}


def reconstruct(kind, projections, geometry, flats=None, darks=None, center=None, rows=None,
                out=None, *, filter="ramp", padding="zero", log=True, progress=True,
                chunk_slices=None, device=None, devices=None, client=None, context=None,
                queue=None, stats=None, angle_unit=None, solve=None, **options):
    """:func:`pybp.reconstruct` of ``geometry``, a whole volume of ``kind`` (its
    docstring says what each argument is): FDK (:func:`fdk`), or the iterative method
    of the line integrals that ``solve`` runs (:func:`method`); parallel beam's options
    are refused by name."""
    parallel_only = dict(center=center, rows=rows, chunk_slices=chunk_slices,
                         angle_unit=angle_unit, stats=stats)
    given = [name for name, value in parallel_only.items() if value is not None]
    if given:
        raise ValueError(f"{given[0]}: " + REFUSES[given[0]].format(kind=kind.name))
    method_name = options.pop("method", "fbp")
    iterations = options.pop("iterations", None)
    if method_name in ("fbp", "fdk") and kind.filtered is None:
        raise ValueError(f"method: {method_name!r}: pybp has no filtered back-projection of a "
                         f"{kind.name} (its rays need not cross one axis at right angles); take "
                         "method='sirt', 'sart', 'cgls' or 'tv'")
    if method_name in ("fbp", "fdk"):
        for name in ["iterations"] * (iterations is not None) + list(options):
            if name == "iterations" or name in OPTION_NAMES or name in STREAM_HINTS:
                raise ValueError(f"{name}: an option of the iterative methods; "
                                 f"{kind.filtered} takes none (method='sirt', 'sart', 'cgls' "
                                 "or 'tv')")
        if filter is None:
            raise ValueError(f"filter: {kind.filtered} needs a filter; for none, "
                             "pybp.Projector(geometry).backward (or pybp.cone_backproject of a "
                             "pybp.ConeGeometry)")
        targets = {name: value for name, value in (("device", device), ("context", context),
                                                   ("queue", queue)) if value is not None}
        short_scan = options.pop("short_scan", None)
        steps = {name: options.pop(name, None) for name in ("rings", "ring_options", "phase")}
        return fdk(projections, geometry, filter, padding, short_scan, out, flats, darks,
                   progress, steps, devices, client, dict(options, **targets),
                   checks.log_option(log, flats))
    checks.choice("method", method_name, tuple(TABLE) + ("fdk",))
    if filter not in (None, "ramp"):
        raise ValueError(f"filter: {kind.filtered or 'a filtered back-projection'}'s window; "
                         f"{method_name} takes none")
    for name, value in (("client", client), ("context", context), ("queue", queue)):
        if value is not None:
            raise ValueError(f"{name}: {method_name} of a {kind.name} holds the whole "
                             "volume on each device; give device or devices")
    if device is not None and devices is not None:
        raise ValueError("devices: give device or devices, not both")
    chosen = {name: options.pop(name) for name in OPTION_NAMES if name in options}
    chosen = dict(method=method_name, iterations=iterations,
                  **iterative_options.check_options(method_name, iterations, chosen))
    steps = {name: options.pop(name) for name in ("rings", "ring_options", "phase",
                                                  "memory_limit") if name in options}
    for name in options:
        raise TypeError(f"{name}: not an option of pybp.reconstruct's cone-beam {method_name}; "
                        f"{STREAM_HINTS.get(name, 'its docstring lists them')}")
    return method(solve, chosen, projections, geometry, flats=flats, darks=darks, log=log,
                  device=device, devices=devices, progress=progress, out=out, **steps)


def check_geometry(geometry):
    """A ``TypeError`` where ``geometry`` is not a :class:`pybp.ConeGeometry` (FDK's and
    the cone back-projector's own calls)."""
    if not isinstance(geometry, ConeGeometry):
        raise TypeError(f"geometry: expected a pybp.ConeGeometry, got {type(geometry).__name__}")


def checked_volume(projections, geometry, shape, out):
    """``projections`` checked against ``geometry``, and ``out`` for a volume of
    ``shape`` (None: a new float32 array, where this machine's memory holds it)."""
    checks.array_like(projections, "projections", (3,))
    expected = (geometry.n_angles,) + geometry.detector_shape
    if tuple(projections.shape) != expected:
        raise ValueError(f"projections: expected (n_angles, n_rows, n_cols) = {expected} "
                         f"(the geometry's), got {tuple(projections.shape)}")
    if out is None:
        checks.check_volume_memory(shape)
        out = np.empty(shape, np.float32)
    checks.check_output(out, shape, inputs=dict(projections=projections))
    return out


OPTIONS = ("params", "memory_limit", "planes", "device", "context", "queue")


def fdk(projections, geometry, filter, padding, short_scan, out, flats, darks, progress,
        steps, devices, client, options, log):
    """:func:`pybp.fdk`, on one device or several, or on the workers of ``client``
    (pybp/cone/run.py), its arguments checked first; ``log`` already resolved
    (:func:`pybp.checks.log_option`)."""
    check_geometry(geometry)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"{unknown[0]}: not an option of pybp.fdk")
    targets = {k: options.pop(k) for k in ("device", "context", "queue") if k in options}
    if any(v is not None for v in targets.values()):
        for name, given in (("client", client), ("devices", devices)):
            if given is not None:
                raise ValueError(f"{name}: give {name}, or one of device, context or queue")
    if devices is not None and client is not None:
        raise ValueError("client: give a client, or devices (each worker has its own)")
    planes = plane_range(options.get("planes"), geometry.volume_shape[0])
    out = checked_volume(projections, geometry, (len(planes),) + geometry.volume_shape[1:], out)
    flats, darks = run.checked_frames(geometry, flats, darks, steps["phase"], log)
    common = dict(filter=filter, padding=padding, short_scan=short_scan, **steps)
    if client is not None:
        options.pop("planes", None)
        task = run.PlanesTask(geometry, planes.start, log=log, options=dict(common, **options))
        replaced = distributed.on_cluster(
            client, task, planes.start, planes.stop,
            dict(projections=projections, flats=flats, darks=darks, out=out), progress=progress)
    else:
        if devices is not None:
            targets = [dict(device=d) for d in device_list(devices)]
        else:
            targets = [targets]
        replaced = run.reconstruct(projections, geometry, out, targets, flats=flats,
                                   darks=darks, progress=progress, log=log, **common,
                                   **options)
    warn_replaced(replaced, int(np.prod(np.shape(projections))), stacklevel=3)
    return out


def method(solve, chosen: dict, projections, geometry, *, flats=None, darks=None, log=None,
           rings=None, ring_options=None, phase=None, device=None, devices=None,
           memory_limit=None, progress=True, out=None, checkpoint=None):
    """The iterative method ``chosen`` (``method``, ``iterations`` and its options, as
    :func:`pybp.iterative.options.check_options` gives them) of detector data, run by
    ``solve(chosen, line_integrals, geometry, **kwargs)`` (pybp/api/iterative.py's
    ``by_method``): what :func:`pybp.reconstruct` and the command run. The line integrals
    as FDK's first phase makes them on ``device`` or ``devices``
    (:func:`pybp.cone.run.line_integrals`: flats, darks, ``-log`` where ``log`` says,
    FDK's rule by default; ``rings``, ``phase``), in host memory, then the method there,
    on the same devices. Where there is nothing to do to them, the projections go to the
    method as they are. ``checkpoint``: as the methods take it (the line integrals are
    made again on a resumed run: the same bits on the same devices)."""
    checks.array_like(projections, "projections", (3,))
    log = checks.log_option(log, flats)
    flats, darks = run.checked_frames(geometry, flats, darks, phase, log)
    steps = dict(rings=rings, ring_options=ring_options, phase=phase)
    targets = [dict(device=device)] if devices is None else \
        [dict(device=d) for d in device_list(devices)]
    if log or flats is not None or any(v is not None for v in steps.values()):
        data, replaced = run.line_integrals(projections, geometry, targets,
                                            flats=flats, darks=darks, log=log,
                                            memory_limit=memory_limit, progress=progress,
                                            **steps)
        warn_replaced(replaced, int(np.prod(projections.shape)), stacklevel=3)
    else:
        data = projections
    return solve(chosen, data, geometry, device=device, devices=devices, progress=progress,
                 out=out, memory_limit=memory_limit, checkpoint=checkpoint)
