#!/usr/bin/env python3
"""File speeds beside the whole command (issue 24, item 4): reading the DXchange
projections through h5py in blocks of 64 rows (the path of compressed or irregularly
chunked datasets: unfiltered ones are read at their byte offsets, timed with the
command's own writer by tuning/command_stages.py), and writing 512 float32 TIFF slices
of 2048^2 with tifffile (each fsynced, then renamed) with 1, 4 and 8 threads.

    python tuning/io_speed.py --scan /dev/shm/pybp-speed/scan.h5 --folder /dev/shm

(The scan is the one tuning/command_speed.py writes.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import tifffile


def read_speed(scan, rows_per_block=64):
    with h5py.File(scan, "r") as f:
        data = f["/exchange/data"]
        into = np.empty(data.shape, data.dtype)
        start = time.perf_counter()
        for r in range(0, data.shape[1], rows_per_block):
            block = np.s_[:, r:r + rows_per_block, :]
            data.read_direct(into, block, block)
        return into.nbytes, time.perf_counter() - start


def write_speed(folder, threads, n_slices=512, size=2048):
    folder = Path(folder) / "pybp-io-speed"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    image = np.random.default_rng(0).random((size, size), dtype=np.float32)

    def write(i):
        path = folder / f"slice_{i:05d}.tif"
        partial = path.with_suffix(".partial")
        tifffile.imwrite(partial, image)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(n_slices)))
    seconds = time.perf_counter() - start
    shutil.rmtree(folder)
    return n_slices * image.nbytes, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", default="/dev/shm/pybp-speed/scan.h5")
    parser.add_argument("--folder", default="/dev/shm")
    args = parser.parse_args()
    n_bytes, seconds = read_speed(args.scan)
    print(f"read {n_bytes / 1e9:.2f} GB through h5py in blocks of 64 rows: {seconds:.2f} s, "
          f"{n_bytes / 1e9 / seconds:.2f} GB/s")
    for threads in (1, 4, 8):
        n_bytes, seconds = write_speed(args.folder, threads)
        print(f"wrote 512 float32 TIFF slices ({n_bytes / 1e9:.2f} GB) with {threads} thread(s): "
              f"{seconds:.2f} s, {n_bytes / 1e9 / seconds:.2f} GB/s")


if __name__ == "__main__":
    main()
