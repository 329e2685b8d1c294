"""``pybp bench --forward`` and ``pybp bench --iterative``: the matched pair of a
geometry (:class:`pybp.Projector`, pyopencl arrays in and out) and SIRT's and CGLS's
iterations on the device, beside the device's load ceiling.

The forward projection A and its transpose A^T are timed on device arrays, median of
``repeats`` after a warm-up, in G updates/s (pixels or voxels x angles per second); an
iteration is the median of ``iterations`` timed one by one through the methods' report
(the first, which holds SIRT's weights, left out). The ceiling is the rate at which
local memory serves 4-byte loads (:func:`pybp.bench.kernels.local_ceiling`) over the
loads an update takes: both parallel-beam kernels load two floats per pixel, slice and
angle (A^T the two bins of its sample; A about two candidates per pixel on a line), the
cone-beam transpose four (its bilinear sample). ASTRA's figures for the standard cases
come from ../shared/peers/astra_iter.py, run in the same call (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pyopencl.array as cla

import pybp
from pybp import checks, registry
from pybp.bench.kernels import local_ceiling
from pybp.iterative import methods
from pybp.iterative.vectors import Vectors

def median_seconds(work, queue, repeats):
    """Median, least and most seconds of ``work()`` after a warm-up, each waited for."""
    work()
    queue.finish()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        queue.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def iteration_seconds(method, pair, vectors, data, shape, iterations):
    """The seconds of each of ``iterations`` iterations of ``method`` but the first."""
    queue = vectors.queue
    stamps = []
    x = cla.zeros(queue, shape, np.float32)
    queue.finish()
    stamps.append(time.perf_counter())
    method(pair, vectors, data, x, iterations=iterations,
           report=lambda i, x: (queue.finish(), stamps.append(time.perf_counter())))
    return np.diff(stamps)[1:]


def run(geometry, rows=None, device=None, repeats=5, iterations=5, iterative=True, log=print):
    """Print the table for ``geometry`` (``rows`` slices where its volume is cut in
    slices; None for a whole volume); return its rows as dicts (``what``, ``seconds``,
    ``rate``)."""
    if iterative and checks.positive_int(iterations, "--iterations") < 2:
        raise ValueError("--iterations: at least 2 (the first, which holds SIRT's weights, "
                         "is not timed)")
    projector = pybp.Projector(geometry, rows, device=device)
    queue, pair = projector.queue, projector.pair
    rng = np.random.default_rng(0)
    data = cla.to_device(queue, rng.random(projector.projection_shape, np.float32))
    volume = cla.to_device(queue, rng.random(projector.volume_shape, np.float32))
    out_p = cla.empty(queue, projector.projection_shape, np.float32)
    out_v = cla.empty(queue, projector.volume_shape, np.float32)
    updates = pair.updates()
    case = registry.kind_of(geometry).describe(geometry, projector.slices)
    loads = pair.loads
    ceiling = local_ceiling(queue.device, 4, repeats) / loads
    log(f"{projector.device.label()}: {case} ({updates / 1e9:.3g} G updates per application)")
    log(f"load ceiling: {ceiling / 1e9:.4g} G updates/s (local memory's 4-byte loads over "
        f"{loads} per update)")
    log("| pybp | s (median) | spread | G updates/s | of the ceiling |")
    log("| --- | --- | --- | --- | --- |")
    rows_out = []

    def say(what, seconds, low, high, applications=1):
        rate = applications * updates / seconds
        rows_out.append(dict(what=what, seconds=seconds, rate=rate))
        log(f"| {what} | {seconds:.4f} | {low:.4f}-{high:.4f} | {rate / 1e9:.4g} | "
            f"{rate / ceiling:.0%} |")

    # a pair whose A is a gather or a scatter by the geometry (cone beam's,
    # pybp/cone/project.py) says which
    say(f"forward A ({pair.method})" if pair.method else "forward A",
        *median_seconds(lambda: pair.forward(volume.data, out_p.data), queue, repeats))
    say("transpose A^T", *median_seconds(lambda: pair.backward(data.data, out_v.data), queue,
                                         repeats))
    if iterative:
        vectors = Vectors(projector.context, queue, projector.device)
        for what, method in (("SIRT iteration", methods.sirt), ("CGLS iteration", methods.cgls)):
            steps = iteration_seconds(method, pair, vectors, data, projector.volume_shape,
                                      iterations)
            if steps.size == 0:
                log(f"| {what} | stopped before a second iteration (A of this case is zero?) "
                    "| | | |")
                continue
            say(f"{what} (A and A^T)", statistics.median(steps), steps.min(), steps.max(), 2)
    return rows_out
