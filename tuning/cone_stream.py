#!/usr/bin/env python3
"""Cone-beam FDK with the rows' stream first (pybp/cone/run.py: ring removal, phase
retrieval) beside the slabs' passes alone (pybp.ConeBackprojector), host memory to host
memory, on detector counts with flats:

    python3 tuning/cone_stream.py [--size 512] [--repeats 3] [--device NAME]

Rows: the passes; with ring removal; with phase retrieval (the two phases timed apart:
the rows filtered into the store, with the stream's host and device times, and the
slabs from it). Each the median of ``--repeats`` calls after a warm-up.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pybp  # noqa: E402
from pybp.cl.device import select_device  # noqa: E402
from pybp.cone import run  # noqa: E402
from pybp.tune.cone import geometry  # noqa: E402

PHASE = dict(delta_beta=200.0, energy=25.0, distance=0.3, pixel_size=3e-6)


def timed(call, repeats):
    call()  # warm-up: kernels built, staging mapped
    walls = []
    for _ in range(repeats):
        tick = time.perf_counter()
        result = call()
        walls.append(time.perf_counter() - tick)
    return float(np.median(walls)), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--projections", type=int, default=496)
    parser.add_argument("--detector", type=int, nargs=2, default=[960, 1248])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # counts of zero: floored, counted
    device = select_device(args.device)
    g = geometry(args.size, args.projections, tuple(args.detector))
    rng = np.random.default_rng(0)
    shape = (g.n_angles,) + g.detector_shape
    counts = rng.integers(1000, 4000, shape, dtype=np.uint16)
    flats = np.full((2,) + g.detector_shape, 4000, np.uint16)
    darks = np.full((2,) + g.detector_shape, 100, np.uint16)
    out = np.empty(g.volume_shape, np.float32)
    print(f"{device.name}: FDK {args.size}^3 from {g.n_angles} counts of {g.detector_shape} "
          "(uint16, with flats and darks), host memory to host memory")
    print("| path | wall s | rows into the store s | of which: reading s, writing s, device "
          "s by stage | slabs from the store s | equals the passes |")
    print("| --- | --- | --- | --- | --- | --- |")
    wall, want = timed(lambda: pybp.fdk(counts, g, flats=flats, darks=darks, out=out,
                                        device=device, progress=False).copy(), args.repeats)
    print(f"| passes (ConeBackprojector) | {wall:.3f} | | | | |", flush=True)
    for name, options in (("stream, --rings fw", dict(rings="fw")),
                          ("stream, --phase paganin", dict(phase=PHASE))):
        stats = {}

        def call():
            stats.clear()
            run.reconstruct(counts, g, out, [dict(device=device)], flats=flats, darks=darks,
                            progress=False, stats=stats, **options)
            return out
        wall, got = timed(call, args.repeats)
        same = "yes" if np.array_equal(got, want) else "no (other steps)"
        stages = ", ".join(f"{k[len('device_'):]} {v:.3f}" for k, v in stats.items()
                           if k.startswith("device_"))
        print(f"| {name} | {wall:.3f} | {stats['rows_seconds']:.3f} | "
              f"{stats['host_read']:.3f}, {stats['host_write']:.3f}, {stages} | "
              f"{stats['slabs_seconds']:.3f} | {same} |", flush=True)
    print("(the last call's figures; reading and writing are summed over threads)")


if __name__ == "__main__":
    main()
