#!/usr/bin/env python3
"""The whole ``pybp reconstruct`` command from the shell, float32 and half (issue 24,
item 4): a DXchange file of 2048 projections x 512 rows x 2048 bins (uint16, 20 flats
and darks) in the page cache, to a folder of float32 TIFF slices, five runs each after
a first one that builds and caches the kernels.

    python tuning/command_speed.py --folder /dev/shm/pybp-speed --runs 5

Prints each run's wall time (the process, from start to exit), the median and the
spread, and the line the command itself printed (its reconstruction time and GU/s).
``--code A B`` compares checkouts (folders holding ``pybp/`` and ``templates/``), and
``--options '' '--chunk-slices 8'`` sets of the command's options, in one run, their
runs taken in turn, so that the machine's drift falls on all alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pybp.bench import volume as bench_pipeline
from pybp.io.demo import write_dxchange


def run_command(argv, code=None):
    """Wall seconds of one ``pybp`` process (the package in folder ``code``, or the one
    this Python finds), and the last line it printed."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(code).resolve())]
                                            + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pybp", *argv], capture_output=True, text=True,
                          env=env, cwd=code)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"pybp {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    lines = done.stdout.strip().splitlines()
    return seconds, lines[-1] if lines else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="/dev/shm/pybp-speed")
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--precisions", nargs="*", default=["float", "half"])
    parser.add_argument("--code", nargs="*", default=[None], metavar="FOLDER",
                        help="checkouts to compare (default: the pybp this Python finds)")
    parser.add_argument("--options", nargs="*", default=[""], metavar="'OPTIONS'",
                        help="sets of more options of the command to compare, each quoted")
    args = parser.parse_args()
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    scan = folder / "scan.h5"
    if not scan.exists():
        angles, projections, flats, darks = bench_pipeline.make_scan(
            args.size, args.size, args.rows, 20)
        write_dxchange(scan, projections, flats, darks, np.degrees(angles))
        del projections, flats, darks
    print(f"{scan}: {scan.stat().st_size / 1e9:.2f} GB; device {os.environ.get('PYBP_DEVICE', 'default')}")
    center = f"{(args.size - 1) / 2}"
    cases = [(code, options) for code in args.code for options in args.options]
    for precision in args.precisions:
        out = folder / f"slices-{precision}"
        argv = ["reconstruct", str(scan), "-o", str(out), "--center", center, "--overwrite",
                "--precision", precision]
        times = {case: [] for case in cases}
        for code, options in cases:
            shutil.rmtree(out, ignore_errors=True)
            first, _ = run_command(argv + options.split(), code)  # builds what a shape needs
            print(f"--precision {precision} {code or ''} {options}: first run {first:.2f} s")
        said = {}
        for _ in range(args.runs):
            for code, options in cases:
                shutil.rmtree(out, ignore_errors=True)
                seconds, said[code, options] = run_command(argv + options.split(), code)
                times[code, options].append(seconds)
        for (code, options), runs in times.items():
            print(f"--precision {precision} {code or ''} {options}: "
                  + ", ".join(f"{t:.2f}" for t in runs)
                  + f" s: median {statistics.median(runs):.2f} s "
                  f"(spread {min(runs):.2f}-{max(runs):.2f})")
            print(f"  the command said: {said[code, options]}")
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
