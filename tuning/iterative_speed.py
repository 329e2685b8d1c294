#!/usr/bin/env python3
"""Speed of the matched pair and of SIRT and CGLS on one device: ``pybp bench
--iterative`` (pybp/bench/iterative.py) with this script's cases.

    python tuning/iterative_speed.py                       # 64 slices of 2048^2, 2048 angles
    python tuning/iterative_speed.py --size 256 --rows 4 --angles 256   # a CPU's case
    python tuning/iterative_speed.py --cone --size 32 --rows 48 --angles 64 --iterations 2
    python tuning/iterative_speed.py --bench-scan 960 1248 --size 512 --angles 496
    python tuning/iterative_speed.py --voxel-size 2 --size 1024     # voxels of 2 bins

ASTRA's figures for the standard cases come from ../shared/peers/astra_iter.py, run in
the same call.
"""

from __future__ import annotations

import argparse

import numpy as np

import pybp
from pybp.bench import iterative
from pybp.tune.cone import geometry as bench_geometry


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="bins and slice side")
    parser.add_argument("--rows", type=int, default=64, help="slices")
    parser.add_argument("--angles", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--cone", action="store_true",
                        help="cone beam: a size^3 volume, a circular scan onto rows x 2 size "
                             "size pixels of 1.2 (source 150, detector 90 from the origin)")
    parser.add_argument("--bench-scan", type=int, nargs=2, metavar=("ROWS", "COLS"),
                        help="cone beam: the scan of pybp bench --cone instead (size^3 over "
                             "256 mm, projections of ROWS x COLS; 512 496 960 1248 is ASTRA's "
                             "case in ../shared/peers/astra_iter.py)")
    parser.add_argument("--voxel-size", type=float, default=1.0,
                        help="parallel beam: the voxels' size in bins (size voxels a side)")
    args = parser.parse_args()
    if args.bench_scan:
        geometry = bench_geometry(args.size, args.angles, tuple(args.bench_scan))
    elif args.cone:
        geometry = pybp.ConeGeometry.circular(
            np.linspace(0, 2 * np.pi, args.angles, endpoint=False),
            (args.rows, 2 * args.size), 1.2, 150.0, 90.0, (args.size,) * 3, 1.0)
    else:
        geometry = pybp.ParallelGeometry(np.linspace(0, np.pi, args.angles, endpoint=False),
                                         int(round(args.size * args.voxel_size)),
                                         voxel_size=args.voxel_size,
                                         slice_shape=(args.size, args.size))
    iterative.run(geometry, None if args.cone or args.bench_scan else args.rows, device=args.device, repeats=args.repeats,
                  iterations=args.iterations)


if __name__ == "__main__":
    main()
