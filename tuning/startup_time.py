#!/usr/bin/env python3
"""Start-up cost of the ``pybp`` command against the bare imports (issue 24, item 5).

    python tuning/startup_time.py --device pthread     # PoCL: the tiny scan, 9 runs each

Times, from the shell's side, ``python -c "import pyopencl, h5py, numpy"`` and the
whole ``pybp reconstruct`` of a tiny DXchange scan (90 projections of 32 rows x 64
bins, its kernels cached by a run before), alternating the two, and prints the median
and the spread of each and their ratio, of wall time and of CPU time.
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


def timed(command, env=None) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one run of ``command``: its CPU time is user plus
    system time of that child alone (``os.wait4``), which other processes or threads
    on a busy machine slow far less than its wall time."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, command)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def measure(device=None, runs=9, folder=None):
    """``(bare, pybp)``: lists of ``runs`` ``(wall, cpu)`` seconds each (:func:`timed`)."""
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
        b, o = timed(BARE, env), timed(command, env)
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
    for kind, pick in (("wall", 0), ("CPU", 1)):
        b, o = [t[pick] for t in bare], [t[pick] for t in ours]
        for name, times in (("bare imports", b), ("pybp reconstruct", o)):
            print(f"{kind:4s} {name:18s} median {statistics.median(times):.3f} s "
                  f"(min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs)")
        print(f"{kind:4s} ratio of medians: {statistics.median(o) / statistics.median(b):.2f}x, "
              f"of the fastest runs: {min(o) / min(b):.2f}x")
    print("(issue 24 asks at most 2.5x of wall time)")


if __name__ == "__main__":
    main()
