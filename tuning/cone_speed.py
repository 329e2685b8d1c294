"""Kernel speed of the cone-beam back-projection (pybp/cone/) on the RabbitCT-like case
of the issue: a circular scan, source-isocentre 750 mm, source-detector 1200 mm, 0.3 mm
pixels, 0.5 mm voxels; GUPS = nx * ny * nz * n_projections / s of the launches alone
(median of --repeats after a warm-up), for each parameter set asked for.

    python tuning/cone_speed.py --size 512 --projections 496 --detector 960x1248
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pyopencl as cl

from pybp.cl.device import select_device
from pybp.cone.params import ConeParams
from pybp.cone.prepare import Unit
from pybp.geometry.cone import ConeGeometry


def rabbit_geometry(size, n_projections, detector):
    n_rows, n_cols = detector
    return ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_projections, endpoint=False),
                                 detector, 0.3, 750.0, 450.0, (size,) * 3, 0.5 * 512 / size)


def kernel_seconds(unit, repeats):
    """Seconds of the launches of one whole back-projection, every pass with its own
    matrices (the access pattern turns with the angle); the median of ``repeats`` after
    a warm-up. The images are random and the same in every pass: their values do not
    change the time."""
    n, per_pass = unit.geometry.n_angles, unit.params.projections_per_pass
    images = np.random.default_rng(0).standard_normal(
        (per_pass,) + unit.geometry.detector_shape).astype(np.float32)
    unit.upload(images)
    times = []
    for _ in range(repeats + 1):
        events = [unit.launch(first, min(per_pass, n - first), first > 0)
                  for first in range(0, n, per_pass)]
        cl.wait_for_events(events)
        times.append(sum((e.profile.end - e.profile.start) * 1e-9 for e in events))
    return float(np.median(times[1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--projections", type=int, default=496)
    parser.add_argument("--detector", default="960x1248", help="rows x columns")
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--voxels", type=int, nargs="*", default=[1, 4, 8, 16])
    parser.add_argument("--passes", type=int, nargs="*", default=[8, 16])
    parser.add_argument("--positions", nargs="*", default=["double", "float"])
    parser.add_argument("--groups", nargs="*", default=["32x8", "64x4", "16x16"])
    args = parser.parse_args()
    detector = tuple(int(v) for v in args.detector.split("x"))
    geometry = rabbit_geometry(args.size, args.projections, detector)
    device = select_device(args.device)
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(f"{device.name}: {args.size}^3 from {args.projections} x {detector[0]} x {detector[1]}")
    for vpi, ppp, positions, group in itertools.product(args.voxels, args.passes,
                                                        args.positions, args.groups):
        params = ConeParams(voxels_per_item=vpi, projections_per_pass=ppp, positions=positions,
                            group=tuple(int(g) for g in group.split("x")))
        tick = time.perf_counter()
        unit = Unit(geometry, params, queue=queue)
        built = time.perf_counter() - tick
        seconds = kernel_seconds(unit, args.repeats)
        print(f"  {params.key()}: {geometry.updates() / seconds * 1e-9:8.1f} GUPS "
              f"({seconds:.3f} s; built in {built:.2f} s)", flush=True)
        unit.close()


if __name__ == "__main__":
    main()
