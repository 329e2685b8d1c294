#!/usr/bin/env python3
"""Accuracy of the profile's kernels at real detector widths, judged by pybp.parallel.verify.

    python tuning/accuracy.py [--sizes 1024 2048 4096] [--angles 64] [--rows 64]

Table 1: for each width x slices per pass x interpolation, the kernel this device's
profile picks, on zero-mean random data, random angles over 180 degrees and an
off-centre axis: relative RMS from the float64 reference (linear), or the share of
pixels off the reference away from bin boundaries (nearest); beside it the same kernel
with the cos/sin residuals of the projection table zeroed, which is the float32
arithmetic from the slice corner that pybp used before (docs/design.md, section 6).

Table 2: half storage against float storage, FBP and plain back-projection of the
Shepp-Logan phantom scaled from 1e-6 to 1e4 (rule `half`, 1e-3).

The reference computes ``--rows`` rows spread over each slice. Pick the device with
PYBP_DEVICE.
"""

import argparse
import sys
from unittest import mock

import numpy as np

import pybp
from pybp import phantoms
from pybp.parallel import verify
from pybp.geometry.parallel import ParallelGeometry

SCALES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1.0, 1e2, 1e4)


def without_residuals(original):
    """The projection table as pybp built it before: float32 cos and sin only."""
    def table(self, *args, **kwargs):
        values = original(self, *args, **kwargs)
        if values.shape[1] == 8:
            values[:, 4:6] = 0
        return values
    return table


def exactness(sizes, n_angles, n_rows, log=print):
    rng = np.random.default_rng(7)
    log("| bins | slices | interpolation | kernel | rule | error | without cos/sin residuals |")
    log("| --- | --- | --- | --- | --- | --- | --- |")
    for n_bins in sizes:
        angles = np.sort(rng.uniform(0, np.pi, n_angles))
        rows = np.linspace(0, n_bins - 1, n_rows).astype(int)
        for slices in (1, 2, 4):
            data = rng.standard_normal((slices, n_angles, n_bins)).astype(np.float32)
            for interpolation in ("linear", "nearest"):
                verdicts = []
                for old in (False, True):
                    table = ParallelGeometry.projection_constants
                    with mock.patch.object(ParallelGeometry, "projection_constants",
                                           without_residuals(table) if old else table):
                        bp = pybp.Backprojector(n_bins, angles, center=(n_bins - 1) / 2 + 11.3,
                                                interpolation=interpolation, slices_per_pass=slices)
                        verdicts.append(verify.judge(bp(data), data, bp.geometry, bp.params,
                                                     rows=rows))
                now, before = verdicts
                log(f"| {n_bins} | {slices} | {interpolation} | {bp.params.key()} | {now.rule} "
                    f"| {now.error:.1e}{'' if now.passed else ' FAILED'} "
                    f"| {before.error:.1e}{'' if before.passed else ' (fails)'} |")


def half_scales(n_bins, log=print):
    angles = np.linspace(0, np.pi, n_bins, endpoint=False)
    phantom = phantoms.shepp_logan_radon(ParallelGeometry.create(n_bins, angles))
    stack = np.stack([phantom * s for s in SCALES]).astype(np.float32)
    log(f"| {n_bins} bins, {n_bins} angles | " + " | ".join(f"x {s:g}" for s in SCALES) + " |")
    log("| --- |" + " --- |" * len(SCALES))
    for filter in ("ramp", None):
        results = {}
        for precision in ("float", "half"):
            bp = pybp.Backprojector(n_bins, angles, filter=filter, precision=precision,
                                    slices_per_pass=4)
            results[precision] = bp(stack)
        errors = [verify.judge_half(h, f) for h, f in zip(results["half"], results["float"])]
        name = "FBP (ramp)" if filter else "back-projection"
        log(f"| {name}, {bp.params.key()} | "
            + " | ".join(f"{e.error:.1e}{'' if e.passed else ' FAILED'}" for e in errors) + " |")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    parser.add_argument("--angles", type=int, default=64)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--half-size", type=int, default=2048)
    args = parser.parse_args(argv)
    print(f"device: {pybp.Backprojector(16, [0.0]).device.name}\n", flush=True)
    exactness(args.sizes, args.angles, args.rows, log=lambda s: print(s, flush=True))
    print()
    half_scales(args.half_size, log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
