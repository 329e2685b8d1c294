#!/usr/bin/env python3
"""Start-up cost of the ``pybp`` command against the bare imports (issue 24, item 5).

    python tuning/startup_time.py --device pthread     # PoCL: the tiny scan, 9 runs each

Times, from the shell's side, ``python -c "import pyopencl, h5py, numpy"`` and the
whole ``pybp reconstruct`` of a tiny DXchange scan (90 projections of 32 rows x 64
bins, its kernels cached by a run before), alternating the two, and prints the median
and the spread of each and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pybp.io.demo import write_dxchange

BARE = [sys.executable, "-c", "import pyopencl, h5py, numpy"]


def write_tiny_scan(path, n_angles=90, n_rows=32, n_bins=64):
    """A DXchange scan of uniform noise: what the command does with it is the same."""
    rng = np.random.default_rng(0)
    projections = rng.integers(1000, 2000, (n_angles, n_rows, n_bins)).astype(np.uint16)
    flats = np.full((5, n_rows, n_bins), 3000, np.uint16)
    darks = np.full((5, n_rows, n_bins), 100, np.uint16)
    write_dxchange(path, projections, flats, darks, np.linspace(0, 180, n_angles, endpoint=False))
    return (n_bins - 1) / 2


def wall(command, env=None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(device=None, runs=9, folder=None):
    """``(bare seconds, pybp seconds)``: lists of ``runs`` wall times each."""
    folder = Path(folder or tempfile.mkdtemp(prefix="pybp-startup-"))
    scan = folder / "tiny.h5"
    center = write_tiny_scan(scan)
    output = folder / "slices"
    command = [sys.executable, "-m", "pybp", "reconstruct", str(scan), "-o", str(output),
               "--center", str(center)] + (["--device", device] if device else [])
    env = dict(os.environ)
    bare, ours = [], []
    for run in range(runs + 1):  # the first of each warms caches (kernels, files)
        shutil.rmtree(output, ignore_errors=True)
        b, o = wall(BARE, env), wall(command, env)
        if run:
            bare.append(b)
            ours.append(o)
    shutil.rmtree(folder, ignore_errors=True)
    return bare, ours


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="as pybp's --device")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    bare, ours = measure(args.device, args.runs)
    for name, times in (("bare imports", bare), ("pybp reconstruct", ours)):
        print(f"{name:18s} median {statistics.median(times):.3f} s "
              f"(min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs)")
    print(f"ratio of medians: {statistics.median(ours) / statistics.median(bare):.2f}x, "
          f"of the fastest runs: {min(ours) / min(bare):.2f}x (issue 24 asks at most 2.5x)")


if __name__ == "__main__":
    main()
