#!/usr/bin/env python3
"""The iterative methods through the stream beside one call on the device: ``pybp.sirt``
on a whole stack of sinograms in memory, then ``pybp.reconstruct(method="sirt")`` on
the same data in chunks, the wall time of each and whether they give the same bits.

    python tuning/iterative_stream.py                       # 256 slices of 1024^2, 1024 angles
    python tuning/iterative_stream.py --size 128 --rows 16 --angles 128   # a CPU's case

With ``--devices`` (``all``, or indices ``0,1``), the stream on the first of them and then
on all of them, in the same run (issue 53's case: ``--size 2048 --angles 2048 --devices
all``): the wall time of each, the speed-up, and whether the volumes are the same bits.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import pybp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="bins and slice side")
    parser.add_argument("--rows", type=int, default=256, help="slices")
    parser.add_argument("--angles", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--chunk-slices", type=int, default=None,
                        help="rows a chunk (default: pybp's, about 2 s of work each)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--devices", default=None,
                        help="the stream on the first of these, then on all (all, or 0,1)")
    args = parser.parse_args()
    angles = np.linspace(0, np.pi, args.angles, endpoint=False)
    data = np.random.default_rng(0).random((args.angles, args.rows, args.size), np.float32)
    if args.devices is not None:
        return on_devices(args, angles, data)
    geometry = pybp.ParallelGeometry(angles, args.size)
    options = dict(log=False, method="sirt", progress=False, angle_unit="rad",
                   device=args.device)
    pybp.sirt(data[:, :1], geometry, 1, device=args.device)  # warm-up: the kernels' builds
    pybp.reconstruct(data[:, :1], angles, iterations=1, **options)
    tick = time.perf_counter()
    one = pybp.sirt(data, geometry, args.iterations, device=args.device)
    print(f"pybp.sirt, one call: {time.perf_counter() - tick:.2f} s for {args.rows} slices "
          f"of {args.size}^2 from {args.angles} angles, {args.iterations} iterations")
    tick = time.perf_counter()
    stats = {}
    streamed = pybp.reconstruct(data, angles, iterations=args.iterations,
                                chunk_slices=args.chunk_slices, stats=stats, **options)
    print(f"pybp.reconstruct(method='sirt'), chunks of {stats['chunk_slices']}: "
          f"{time.perf_counter() - tick:.2f} s; the same bits: {np.array_equal(one, streamed)}")


def on_devices(args, angles, data):
    """``pybp.reconstruct(method="sirt")`` of ``data`` on one device, then on every
    device of ``args.devices``: the median of two runs of each after a warm-up."""
    from pybp.distributed import device_list

    devices = device_list(args.devices)
    print("devices: " + "; ".join(d.name for d in devices), flush=True)
    options = dict(log=False, method="sirt", progress=False, angle_unit="rad",
                   iterations=args.iterations, chunk_slices=args.chunk_slices)
    volumes, walls = {}, {}
    for label, where in (("1 device", dict(device=devices[0])),
                         (f"{len(devices)} devices", dict(devices=devices))):
        pybp.reconstruct(data[:, :8], angles, **dict(options, iterations=1), **where)
        times = []
        for _ in range(2):
            tick = time.perf_counter()
            volumes[label] = pybp.reconstruct(data, angles, **options, **where)
            times.append(time.perf_counter() - tick)
        walls[label] = float(np.median(times))
        print(f"{label}: {walls[label]:.2f} s ({', '.join(f'{t:.2f}' for t in times)}) for "
              f"{args.rows} slices of {args.size}^2 from {args.angles} angles, "
              f"{args.iterations} iterations", flush=True)
    one, many = walls.values()
    first, second = volumes.values()
    print(f"{len(devices)} devices: {one / many:.2f}x one; the same bits as one device: "
          f"{np.array_equal(first, second)}")


if __name__ == "__main__":
    main()
