#!/usr/bin/env python3
"""Device time of the FBP filter, FFT in one work-group's local memory, FFT through
global memory (four-step) and direct convolution, beside the back-projection of the
same slices (docs/design.md, section 5: one run, one device).

    python tuning/filter_speed.py [--sizes 256 1024 2048 4096] [--slices 8] [--repeats 5]

For each detector width (angles = width): milliseconds per slice of each filter method
(median of the repeats after a warm-up, kernel time), of the profile's back-projection,
and the filter's share of it. Pick the device with PYBP_DEVICE.
"""

import argparse
import sys

import numpy as np

import pybp


def per_slice_ms(bp, stack, repeats, stage):
    bp(stack)
    times = []
    for _ in range(repeats):
        bp(stack)
        times.append(bp.executor.stage_seconds[stage])
    return float(np.median(times)) / len(stack) * 1e3


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    parser.add_argument("--slices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    methods = ("fft", "global-fft", "convolution")
    print("| bins | " + " | ".join(f"{m} ms/slice" for m in methods) + " | back-projection "
          "ms/slice | " + " | ".join(f"{m} share" for m in methods) + " |")
    print("|" + " --- |" * (2 + 2 * len(methods)))
    for size in args.sizes:
        angles = np.linspace(0, np.pi, size, endpoint=False)
        stack = np.random.default_rng(0).random((args.slices, size, size)).astype(np.float32)
        row = {}
        for method in methods:
            try:
                bp = pybp.Backprojector(size, angles, filter="ramp", filter_method=method)
            except ValueError as exc:
                print(f"{size}: {method} skipped ({exc})", file=sys.stderr)
                continue
            row[method] = per_slice_ms(bp, stack, args.repeats, "filter")
            row["bp"] = per_slice_ms(bp, stack, args.repeats, "backproject")
            bp.close()
        cells = [f"{row[m]:.3f}" if m in row else "-" for m in methods]
        shares = [f"{100 * row[m] / row['bp']:.1f}%" if m in row else "-" for m in methods]
        print(f"| {size} | {' | '.join(cells)} | {row['bp']:.3f} | {' | '.join(shares)} |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
