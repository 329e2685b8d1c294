#!/usr/bin/env python3
"""Where the cone pair's time goes, on the standard case (512^3 from 496 projections of
960 x 1248; docs/benchmarks.md, issue 51): A and A^T timed with

- ``--constants``: the module constants of pybp/cone/project.py set to other values
  before each Projector is made (every variant gives the same bits);
- ``--parts``: A^T's kernel text with parts taken out (wrong values, for the time alone);
- ``--float``: the pair with positions in float, the path of devices without double.

    python tuning/cone_pair_parts.py --constants --parts --float
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp.bench import iterative as bench_iterative
from pybp.cl import codegen
from pybp.cl.device import describe, open_device
from pybp.cone import project
from pybp.tune.cone import geometry as bench_geometry

CONSTANTS = [{}, {"COLUMN": 16}, {"COLUMN": 4}, {"BACKWARD_GROUP": (16, 16, 1)},
             {"BACKWARD_GROUP": (8, 8, 1)}, {"COLUMN": 16, "BACKWARD_GROUP": (8, 8, 1)},
             {"GATHER_COLUMNS": 8}, {"GATHER_COLUMNS": 2}, {"CHUNK": 8}, {"CHUNK": 2},
             {"GATHER_ITEMS": 256}, {"SLOTS": 4}]
READ = "under = fma(shares[c], row[c], under);"
VOXEL = "sum = fma(cone_fixed_share(lo, hi, r), rows_under[r - r0][item], sum);"
PARTS = {"as shipped": [],
         "the image's pixels read as 1.0": [(READ, "under = fma(shares[c], 1.0f, under);")],
         "the rows' sums not kept": [("rows_under[d][item] = under;", "")],
         "no voxel's loop over its rows": [(VOXEL, "sum += 1.0f;")]}


def median_seconds(work, queue, repeats=3):
    return bench_iterative.median_seconds(work, queue, repeats)[0]


def timed(pair, queue, x, y, forward=True):
    """``(A seconds or None, A^T seconds)`` of ``pair`` on device arrays."""
    ax, aty = cla.empty_like(y), cla.empty_like(x)
    a = median_seconds(lambda: pair.forward(x.data, ax.data), queue) if forward else None
    return a, median_seconds(lambda: pair.backward(y.data, aty.data), queue)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--constants", action="store_true")
    parser.add_argument("--parts", action="store_true")
    parser.add_argument("--float", action="store_true")
    args = parser.parse_args()
    g = bench_geometry(512, 496, (960, 1248))
    found, context, _ = open_device(None)
    queue = cl.CommandQueue(context)
    device = describe(found)
    rng = np.random.default_rng(0)
    x = cla.to_device(queue, rng.random(g.volume_shape, np.float32))
    y = cla.to_device(queue, rng.random((g.n_angles,) + g.detector_shape, np.float32))
    if args.constants:
        shipped = {name: getattr(project, name) for variant in CONSTANTS for name in variant}
        for variant in CONSTANTS:
            for name, value in {**shipped, **variant}.items():
                setattr(project, name, value)
            a, at = timed(project.ConePair(g, context, queue, device), queue, x, y)
            print(f"{variant or 'as shipped'}: A {a:.4f} s, A^T {at:.4f} s", flush=True)
        for name, value in shipped.items():
            setattr(project, name, value)
    if args.parts:
        render = codegen.render
        for name, swaps in PARTS.items():
            def swapped(template, kernels=None, swaps=swaps, **values):
                text = render(template, kernels, **values)
                for old, new in swaps:
                    assert old in text, old
                    text = text.replace(old, new)
                return text
            codegen.render = swapped
            _, at = timed(project.ConePair(g, context, queue, device), queue, x, y, False)
            print(f"A^T, {name}: {at:.4f} s", flush=True)
        codegen.render = render
    if args.float:
        single = dataclasses.replace(device, extensions=tuple(
            e for e in device.extensions if e != "cl_khr_fp64"))
        for name, described in (("double", device), ("float", single)):
            a, at = timed(project.ConePair(g, context, queue, described), queue, x, y)
            print(f"positions in {name}: A {a:.4f} s, A^T {at:.4f} s", flush=True)


if __name__ == "__main__":
    main()
