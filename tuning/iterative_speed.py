#!/usr/bin/env python3
"""Speed of the matched parallel-beam pair and of SIRT and CGLS on one device.

    python tuning/iterative_speed.py                       # 64 slices of 2048^2, 2048 angles
    python tuning/iterative_speed.py --size 256 --rows 4 --angles 256   # a CPU's case
    python tuning/iterative_speed.py --cone --size 32 --rows 48 --angles 64 --iterations 2

Times, on device arrays (pybp.Projector with pyopencl arrays in and out), the forward
projection A and its transpose A^T, median of ``--repeats`` after a warm-up, in G
updates/s (pixels x angles x slices per second), then a SIRT and a CGLS iteration (the
median of ``--iterations`` timed one by one through the methods' report). ASTRA's
figures for the same case come from ../shared/peers/astra_iter.py, run in the same call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyopencl.array as cla

import pybp
from pybp.iterative import methods
from pybp.iterative.vectors import Vectors
from pybp.tune.cone import geometry as bench_geometry


def median_seconds(work, queue, repeats):
    work()
    queue.finish()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        queue.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


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
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.bench_scan:
        geometry = bench_geometry(args.size, args.angles, tuple(args.bench_scan))
        projector = pybp.Projector(geometry, device=args.device)
        args.cone = True
    elif args.cone:
        geometry = pybp.ConeGeometry.circular(
            np.linspace(0, 2 * np.pi, args.angles, endpoint=False),
            (args.rows, 2 * args.size), 1.2, 150.0, 90.0, (args.size,) * 3, 1.0)
        projector = pybp.Projector(geometry, device=args.device)
    else:
        geometry = pybp.ParallelGeometry(np.linspace(0, np.pi, args.angles, endpoint=False),
                                         args.size)
        projector = pybp.Projector(geometry, rows=args.rows, device=args.device)
    queue, pair = projector.queue, projector.pair
    vectors = Vectors(projector.context, queue, projector.device)
    data = cla.to_device(queue, rng.random(projector.projection_shape, np.float32))
    volume = cla.to_device(queue, rng.random(projector.volume_shape, np.float32))
    out_p = cla.empty(queue, projector.projection_shape, np.float32)
    out_v = cla.empty(queue, projector.volume_shape, np.float32)
    updates = pair.updates()
    case = (f"{args.size}^3 from {args.angles} projections of {projector.projection_shape[1]} x "
            f"{projector.projection_shape[2]}" if args.cone else
            f"{args.rows} slices of {args.size}^2, {args.angles} angles")
    print(f"{projector.device.label()}: {case} ({updates / 1e9:.3g} G updates per application)")
    print("| pybp | s (median) | spread | G updates/s |")
    print("| --- | --- | --- | --- |")
    for name, work in (("forward A", lambda: pair.forward(volume.data, out_p.data)),
                       ("transpose A^T", lambda: pair.backward(data.data, out_v.data))):
        m, lo, hi = median_seconds(work, queue, args.repeats)
        print(f"| {name} | {m:.4f} | {lo:.4f}-{hi:.4f} | {updates / m / 1e9:.3g} |")
    for name, method in (("SIRT iteration", methods.sirt), ("CGLS iteration", methods.cgls)):
        stamps = []
        x = cla.zeros(queue, projector.volume_shape, np.float32)
        report = lambda i, x: (queue.finish(), stamps.append(time.perf_counter()))  # noqa: E731
        queue.finish()
        stamps.append(time.perf_counter())
        method(pair, vectors, data, x, iterations=args.iterations, report=report)
        steps = np.diff(stamps)[1:]  # the first includes SIRT's weights and the set-up
        if steps.size == 0:
            print(f"| {name} | stopped before a second iteration (A of this case is zero?) | | |")
            continue
        print(f"| {name} | {statistics.median(steps):.4f} | {steps.min():.4f}-{steps.max():.4f} "
              f"| {2 * updates / statistics.median(steps) / 1e9:.3g} (both operators) |")


if __name__ == "__main__":
    main()
