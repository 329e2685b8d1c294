#!/usr/bin/env python3
"""Where the whole ``pybp reconstruct`` command's time goes (issue 24, item 4), in one
process: the command itself run through ``pybp.cli.commands.main`` with the pipeline's
timings collected, then the file operations alone, as the command does them:

- reading all projection rows through :class:`pybp.io.hdf5.DirectRows` (the reader the
  command uses for unfiltered DXchange data) in the blocks of rows
  :class:`pybp.stream.sources.RowBlocks` asks for, and through h5py for comparison;
- writing the slices through :class:`pybp.io.writers.TiffSlices` (temporary name,
  fsync, rename), as many at once as the command writes.

    python tuning/command_stages.py --scan /dev/shm/pybp-speed/scan.h5 --folder /dev/shm

(The scan is the one tuning/command_speed.py writes.)
"""

from __future__ import annotations

import argparse
import json
import sys
import shutil
import time
from pathlib import Path

_start = time.perf_counter()

import numpy as np  # noqa: E402

from pybp.api import volumes  # noqa: E402
from pybp.cli import commands, files  # noqa: E402
from pybp.io.hdf5 import direct_rows  # noqa: E402
from pybp.io.writers import TiffSlices  # noqa: E402
from pybp.stream.sources import ROW_BLOCK_BYTES  # noqa: E402

imported = time.perf_counter() - _start


def command_timings(scan, out, precision, center, timeline=False):
    """The command's own timings: its wall time in this process, and the pipeline's
    ``stats`` (set-up, streaming, host and device seconds per stage); with ``timeline``,
    the calling thread's calls into pybp that took 10 ms or more are printed, nested,
    with when each began (seconds from this script's start)."""
    stats = {}

    def timed(*args, **kwargs):
        return volumes.reconstruct(*args, stats=stats, **kwargs)

    files.reconstruct = timed
    calls = Timeline() if timeline else None
    try:
        tick = time.perf_counter()
        if calls is not None:
            sys.setprofile(calls)
        code = commands.main(["reconstruct", str(scan), "-o", str(out), "--center", str(center),
                              "--overwrite", "--quiet", "--precision", precision])
        seconds = time.perf_counter() - tick
    finally:
        sys.setprofile(None)
        files.reconstruct = volumes.reconstruct
    if calls is not None:
        calls.show()
    if code:
        raise SystemExit(f"the command failed ({code})")
    return seconds, stats


class Timeline:
    """A ``sys.setprofile`` hook (this thread only) that keeps pybp's calls, nested."""

    def __init__(self, depth=16, shortest=0.01):
        self.depth, self.shortest, self.open, self.done = depth, shortest, [], []

    def __call__(self, frame, event, arg):
        if event not in ("call", "return") or "/pybp/" not in frame.f_code.co_filename:
            return
        if event == "call":
            self.open.append((frame, time.perf_counter()))
        elif self.open and self.open[-1][0] is frame:
            _, began = self.open.pop()
            if len(self.open) < self.depth:
                code = frame.f_code
                where = f"{code.co_filename.split('/pybp/')[-1]}:{code.co_name}"
                self.done.append((began, time.perf_counter() - began, len(self.open), where))

    def show(self):
        for began, seconds, depth, where in sorted(self.done):
            if seconds >= self.shortest:
                print(f"{began - _start:8.3f} s {'  ' * depth}{where} {seconds:.3f} s")


def read_speed(scan):
    """Seconds to read every projection row, through DirectRows and through h5py, in
    RowBlocks' blocks."""
    import h5py

    with h5py.File(scan, "r") as f:
        dataset = f["/exchange/data"]
        direct = direct_rows(dataset)
        n_angles, n_rows, n_bins = dataset.shape
        step = max(1, ROW_BLOCK_BYTES // (n_angles * n_bins * dataset.dtype.itemsize))
        times = {}
        for name, source in (("DirectRows", direct), ("h5py", dataset)):
            if source is None:
                continue
            tick = time.perf_counter()
            for r in range(0, n_rows, step):
                np.asarray(source[:, r:r + step])
            times[name] = time.perf_counter() - tick
        return dataset.size * dataset.dtype.itemsize, times


def write_speed(folder, n_slices, size):
    """Seconds to write ``n_slices`` float32 TIFF slices of ``size``^2 as the command does."""
    folder = Path(folder) / "pybp-stages-write"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    images = np.random.default_rng(0).random((16, size, size), dtype=np.float32)
    writer = TiffSlices(folder, 0, n_slices, np.float32, "{}")
    tick = time.perf_counter()
    for start in range(0, n_slices, len(images)):
        count = min(len(images), n_slices - start)
        writer[start:start + count] = images[:count]
    seconds = time.perf_counter() - tick
    writer.close()
    shutil.rmtree(folder)
    return n_slices * images[0].nbytes, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", default="/dev/shm/pybp-speed/scan.h5")
    parser.add_argument("--folder", default="/dev/shm")
    parser.add_argument("--precision", default="float")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--timeline", action="store_true",
                        help="print the first run's calls into pybp (calling thread)")
    args = parser.parse_args()
    print(f"imports before the command: {imported:.3f} s", flush=True)
    out = Path(args.folder) / "pybp-stages-slices"
    import h5py

    with h5py.File(args.scan, "r") as f:
        n_slices, size = f["/exchange/data"].shape[1:]
    for run in range(args.runs):
        seconds, stats = command_timings(args.scan, out, args.precision, (size - 1) / 2,
                                         timeline=args.timeline and run == 0)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items()}
        print(f"run {run + 1}: the command in this process {seconds:.2f} s; "
              f"stats {json.dumps(shown)}")
    shutil.rmtree(out, ignore_errors=True)
    n_bytes, times = read_speed(args.scan)
    for name, seconds in times.items():
        print(f"read {n_bytes / 1e9:.2f} GB through {name}: {seconds:.2f} s, "
              f"{n_bytes / 1e9 / seconds:.2f} GB/s")
    n_bytes, seconds = write_speed(args.folder, n_slices, size)
    print(f"wrote {n_slices} float32 TIFF slices ({n_bytes / 1e9:.2f} GB) through TiffSlices: "
          f"{seconds:.2f} s, {n_bytes / 1e9 / seconds:.2f} GB/s")


if __name__ == "__main__":
    main()
