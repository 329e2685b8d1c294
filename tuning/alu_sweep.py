#!/usr/bin/env python3
"""A grid of ALU kernel shapes for one setting, each verified then timed at 2048^2
(issue 24, item 1: what holds the one-slice kernels back). Prints the fastest first.

    python tuning/alu_sweep.py --slices 1 --interpolation linear --rounding fixed --cache pair
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from pybp.api.sinograms import Backprojector
from pybp.cl.device import select_device
from pybp.parallel.prepare import check
from pybp.tune.search import gups

SHAPES = [dict(square=64, items=256), dict(square=64, items=128), dict(square=32, items=256),
          dict(square=32, items=128)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=1)
    parser.add_argument("--interpolation", default="linear")
    parser.add_argument("--storage", default="float")
    parser.add_argument("--rounding", default="fixed")
    parser.add_argument("--cache", default="pair")
    parser.add_argument("--cache-storage", default="float")
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = select_device()
    angles = np.linspace(0, np.pi, args.size, endpoint=False)
    data = np.random.default_rng(0).random((args.slices, args.size, args.size)).astype(np.float32)
    results = []
    for shape, row_items, cached, unroll in itertools.product(SHAPES, (8, 32),
                                                              (16, 32, 64), (1, 4, 16)):
        overrides = dict(shape, items_per_row=row_items, cached_projections=cached,
                         unroll=unroll, rounding=args.rounding, cache=args.cache,
                         cache_storage=args.cache_storage)
        options = dict(device=device, interpolation=args.interpolation,
                       slices_per_pass=args.slices, precision=args.storage, kernel="alu",
                       overrides=overrides, verify=False)
        try:
            verdict, _ = check(options)
        except ValueError:
            continue  # a shape this setting cannot take (local memory, items per row)
        if not verdict.passed:
            print(f"FAILED {verdict}: {overrides}", flush=True)
            continue
        bp = Backprojector(args.size, angles, **options)
        speed = gups(bp, data, args.repeats)
        results.append((speed, bp.params.key()))
        print(f"{speed:7.0f} GU/s  {bp.params.key()}", flush=True)
        del bp
    print("--- fastest ---")
    for speed, key in sorted(results, reverse=True)[:8]:
        print(f"{speed:7.0f} GU/s  {key}")


if __name__ == "__main__":
    main()
