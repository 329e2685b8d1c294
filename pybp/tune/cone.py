"""``pybp tune --cone``: search the cone-beam kernels' parameters for this device and
save the fastest verified set, which :func:`pybp.cone.profiler.default_params` uses from
then on (docs/design.md, section 8).

Each candidate is verified first by the bench's rule (FDK against the float64
reference: exact 1e-5, texture 1e-2), then timed as ``pybp bench --cone`` times it
(these functions are its own): the FDK kernel alone on the RabbitCT-like case at
``size``^3 (on a CPU, the bench's case scaled to it). The current choice is timed first; the
fastest is timed again beside it, in turns, and saved only where it is faster; a
search stopped by Ctrl-C keeps the profile as it was.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict

import pyopencl as cl

import functools

import numpy as np

from pybp.api.cone import ConeBackprojector
from pybp.cl import profiles
from pybp.cl.device import describe, open_device
from pybp.cone import reference
from pybp.cone.params import ConeParams
from pybp.cone.backproject import SlabRecipe
from pybp.cone.profiler import KEY, RECORD, default_params
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry
from pybp.parallel.verify import TOLERANCES
from pybp.tune.search import confirmed, default_budget

SIZES = {"cpu": 64}
SIZE = 256
VOXELS = (4, 8, 16)
PASSES = (8, 16, 32)
GROUPS = ((32, 8), (16, 16), (64, 4), (32, 4))
SOURCE_ORIGIN, SOURCE_DETECTOR, PIXEL, FIELD = 750.0, 1200.0, 0.3, 256.0  # mm
# The bench's laminography: the rays 30 degrees from a right angle to the turning axis.
LAMINOGRAPHY_TILT = np.radians(30.0)


def geometry(size=512, n_projections=496, detector=(960, 1248), pitch=None) -> ConeGeometry:
    """The bench's scan: ``size``^3 voxels over a 256 mm field of view (at 512^3 a voxel
    is 2.67 pixels wide at the isocentre, as in ASTRA's case of ../shared/peers/), or
    of ``pitch`` pixels at the isocentre each."""
    voxel = FIELD / size if pitch is None else pitch * PIXEL * SOURCE_ORIGIN / SOURCE_DETECTOR
    return ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_projections, endpoint=False),
                                 detector, PIXEL, SOURCE_ORIGIN, SOURCE_DETECTOR - SOURCE_ORIGIN,
                                 (size,) * 3, voxel)


def laminography(size=512, n_projections=512, detector=(768, 768), pitch=None):
    """The bench's laminography scan (:class:`pybp.ParallelVectorGeometry`): ``size``^3
    voxels turning a full circle, the rays :data:`LAMINOGRAPHY_TILT` from a right angle
    to the axis, pixels of 1 and voxels of ``pitch`` pixels (default 1)."""
    return ParallelVectorGeometry.laminography(
        np.linspace(0, 2 * np.pi, n_projections, endpoint=False), LAMINOGRAPHY_TILT, detector,
        (1.0, 1.0), (size,) * 3, 1.0 if pitch is None else pitch)


@functools.lru_cache(maxsize=1)
def _verification_case():
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 24, endpoint=False), (40, 512), 0.5,
                              300.0, 150.0, (24, 64, 64), 1.5)
    data = np.random.default_rng(1).standard_normal((24, 40, 512)).astype(np.float32)
    return g, data, reference.fdk(data, g)


def verify(params, queue) -> tuple:
    """``(rule, error, passed)``: FDK of zero-mean data on a detector 512 columns wide
    against the float64 reference."""
    g, data, want = _verification_case()
    with ConeBackprojector(g, params, filter="ramp", queue=queue) as bp:
        got = bp(data)
    error = float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))
    rule = "exact" if params.family == "exact" else "texture"
    return rule, error, error <= TOLERANCES[rule]


def kernel_seconds(g, params, queue, repeats, distance_weight=True) -> float:
    """Device seconds of the back-projection kernel alone over the volume (median of
    ``repeats`` after a warm-up)."""
    backprojector = SlabRecipe(g, params, queue=queue, filter="ramp" if distance_weight else None)
    try:
        images = np.random.default_rng(0).standard_normal(
            (params.projections_per_pass, backprojector.plan.row_stride, g.detector_shape[1]))
        if len(backprojector.plan.slabs) > 1:
            raise ValueError("the bench's volume does not fit the device in one piece")
        times = []
        for _ in range(repeats + 1):
            events = backprojector.kernel_events(images)
            times.append(sum((e.profile.end - e.profile.start) * 1e-9 for e in events))
        return float(np.median(times[1:]))
    finally:
        backprojector.close()




def candidates(device) -> list:
    """The search space, the profiler's default first."""
    families = ("texture", "exact") if device.image_support else ("exact",)
    positions = ("float", "double") if "cl_khr_fp64" in device.extensions else ("float",)
    found = [default_params(device, tuned_first=False)]
    for family, position, vpi, ppp, group in itertools.product(families, positions, VOXELS,
                                                               PASSES, GROUPS):
        params = ConeParams(family, vpi, ppp, group, position)
        if params not in found:
            found.append(params)
    return found


def scaled_geometry(size: int) -> ConeGeometry:
    """The bench's case scaled to a ``size``^3 volume: its projections and detector in
    proportion (512^3 from 496 projections of 960 x 1248), so that a CPU's 64^3 times
    a case of its own size (the full detector took the search's whole budget there)."""
    scale = size / 512
    return geometry(size, max(16, round(496 * scale)),
                    (max(8, round(960 * scale)), max(8, round(1248 * scale))))


def tune(device=None, size=None, repeats=3, budget=None, log=print) -> ConeParams | None:
    """Time verified candidates until ``budget`` seconds (default: the parallel tuner's
    for the device type), the current choice first; the fastest, timed again beside the
    current choice in turns, is saved only where it is faster
    (:func:`pybp.tune.search.confirmed`). Returns the choice from then on."""
    cl_device, context, _ = open_device(device)
    d = describe(cl_device)
    size = size or SIZES.get(d.type, SIZE)
    budget = default_budget(d) if budget is None else budget
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    g = scaled_geometry(size) if d.type == "cpu" else geometry(size)
    start, current = time.perf_counter(), default_params(d)
    log(f"{d.name}: cone-beam FDK kernels, {size}^3 from {g.n_angles} projections of "
        f"{g.detector_shape[0]} x {g.detector_shape[1]}; budget {budget:.0f} s")

    def speed(params):
        return g.updates() / kernel_seconds(g, params, queue, repeats) * 1e-9

    timed, best = [], None
    for params in [current] + [p for p in candidates(d) if p != current]:
        elapsed = time.perf_counter() - start
        # room for the confirmation at the end: about two candidates' time
        if timed and elapsed * (len(timed) + 3) / len(timed) > budget:
            log(f"budget spent: {len(timed)} candidates timed")
            break
        rule, error, passed = verify(params, queue)
        if not passed:
            log(f"  {params.key()}: FAILED {rule} {error:.1e}")
            continue
        try:
            gups = speed(params)
        except (cl.Error, ValueError) as exc:  # a set the device cannot run: skipped, said
            log(f"  {params.key()}: not run ({str(exc).splitlines()[0]})")
            continue
        timed.append(params)
        log(f"  {params.key()}: {gups:.4g} GUPS ({rule} {error:.1e})"
            f"{' (the current choice)' if params == current else ''}")
        if best is None or gups > best[1]:
            best = (params, gups)
    if best is None or best[0] == current:
        log(f"the current choice {current.key()} stays")
        return current
    kept, was, found = confirmed(lambda: speed(current), lambda: speed(best[0]))
    log(f"{best[0].key()}: {found:.4g} GUPS against the current {was:.4g}, in turns: "
        f"{'kept' if kept else 'not kept'}")
    if not kept:
        return current
    path = profiles.update_record(d, RECORD, {KEY: {"params": asdict(best[0]), "gups": found,
                                                    "size": size}})
    log(f"saved {path}")
    return best[0]
