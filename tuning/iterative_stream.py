#!/usr/bin/env python3
"""The iterative methods through the stream beside one call on the device: ``pybp.sirt``
on a whole stack of sinograms in memory, then ``pybp.reconstruct(method="sirt")`` on
the same data in chunks, the wall time of each and whether they give the same bits.

    python tuning/iterative_stream.py                       # 256 slices of 1024^2, 1024 angles
    python tuning/iterative_stream.py --size 128 --rows 16 --angles 128   # a CPU's case
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
    args = parser.parse_args()
    angles = np.linspace(0, np.pi, args.angles, endpoint=False)
    geometry = pybp.ParallelGeometry(angles, args.size)
    data = np.random.default_rng(0).random((args.angles, args.rows, args.size), np.float32)
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


if __name__ == "__main__":
    main()
