#!/usr/bin/env python3
"""Cone beam's iterative methods on several devices of this host (pybp/iterative/team.py):
seconds an iteration on 1, 2, 4 ... of them, and whether each volume has the bits of
one device's.

    python tuning/cone_iterative_devices.py                     # 512^3 from 496 x 960 x 1248
    python tuning/cone_iterative_devices.py --devices 0,0       # a team of two on one GPU
    python tuning/cone_iterative_devices.py --size 32 --angles 24 --detector 40 64 --devices 0,0
    PYTHONPATH=OLD_TREE python tuning/cone_iterative_devices.py --devices 0   # older code

One device is called with ``device=`` (so that code older than ``devices=`` runs it).

An iteration's time is the difference of two calls, of ``2`` and ``2 + iterations``
iterations, over ``iterations``: the upload of the data, the weights and the download of
the volume drop out. Each call's wall time is printed too.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import pybp
from pybp import distributed
from pybp.tune.cone import geometry as bench_geometry


def ball(shape) -> np.ndarray:
    """A ball of 1 in a volume of 0.5 (the data: something other than zero everywhere)."""
    nz, ny, nx = shape
    z, y, x = np.ogrid[:nz, :ny, :nx]
    r2 = ((z - nz / 2) / nz) ** 2 + ((y - ny / 2) / ny) ** 2 + ((x - nx / 2) / nx) ** 2
    return np.where(r2 < 0.16, 1.0, 0.5).astype(np.float32)


def timed(method, data, geometry, iterations, devices, options):
    chosen = dict(device=devices[0]) if len(devices) == 1 else dict(devices=devices)
    start = time.perf_counter()
    volume = method(data, geometry, iterations, progress=False, **chosen, **options)
    return time.perf_counter() - start, volume


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--angles", type=int, default=496)
    parser.add_argument("--detector", type=int, nargs=2, default=(960, 1248))
    parser.add_argument("--devices", default="all")
    parser.add_argument("--methods", default="sirt,cgls")
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    devices = distributed.device_list(args.devices)
    geometry = bench_geometry(args.size, args.angles, tuple(args.detector))
    with pybp.Projector(geometry, device=devices[0]) as projector:
        data = projector.forward(ball(geometry.volume_shape))
    counts = [k for k in (1, 2, 4, 8) if k <= len(devices)]
    options = {"tv": dict(weight=1e-3), "sart": dict(subsets=8)}
    updates = 2 * int(np.prod(geometry.volume_shape)) * geometry.n_angles
    print(f"{args.size}^3 from {args.angles} x {args.detector[0]} x {args.detector[1]}; "
          f"devices: {', '.join(d.name for d in devices)}")
    for name in args.methods.split(","):
        method = getattr(pybp, name)
        extra = options.get(name, {})
        for k in counts:  # the kernels built, the host memory warm
            timed(method, data, geometry, 1, devices[:k], extra)
        one = first = None
        for k in counts:
            short, _ = timed(method, data, geometry, 2, devices[:k], extra)
            long, volume = timed(method, data, geometry, 2 + args.iterations, devices[:k], extra)
            each = (long - short) / args.iterations
            one = volume if one is None else one
            first = each if first is None else first  # the fewest devices' (one)
            print(f"{name} on {k}: {each:.4f} s an iteration ({updates / each * 1e-9:.0f} GUPS, "
                  f"{first / each:.2f}x one); calls of 2 and {2 + args.iterations} iterations "
                  f"{short:.2f} s and {long:.2f} s; bit for bit with one: "
                  f"{np.array_equal(volume, one)}", flush=True)


if __name__ == "__main__":
    main()
