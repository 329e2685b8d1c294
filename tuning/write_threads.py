#!/usr/bin/env python3
"""The disk's ``.npy`` writes by writer threads (issue 53): one float32 ``.npy`` of
``--gib`` written as the command's outputs write it (space reserved, pieces of 64 MiB
of whole planes, each flushed by the thread that wrote it) by each count of
``--threads``; the best of ``--repeats`` after one, GB/s. It sizes
``pybp.stream.sources.BEHIND_WRITES`` (cone beam's slabs written behind).

    python3 tuning/write_threads.py --folder /tmp/fs --gib 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pybp.bench import io  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default=".", help="a folder on the disk to measure")
    parser.add_argument("--gib", type=float, default=2.0, help="the file's size")
    parser.add_argument("--threads", default="1,2,3,4,6,8,12,16,32",
                        help="writer thread counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    plane = 2048 * 2048
    volume = np.random.default_rng(0).random(
        (max(1, int(args.gib * 2**30 / 4 / plane)), 2048, 2048), np.float32)
    work = tempfile.mkdtemp(prefix="pybp-write-threads-", dir=args.folder)
    try:
        for n in (int(t) for t in args.threads.split(",")):
            seconds = []
            for k in range(args.repeats + 1):
                path = os.path.join(work, f"{n}-{k}.npy")
                tick = time.perf_counter()
                io._write_npy(path, volume, n, True)
                seconds.append(time.perf_counter() - tick)
                os.unlink(path)
            rates = ", ".join(f"{volume.nbytes / s / 1e9:.2f}" for s in seconds)
            print(f"{n:3d} threads: {volume.nbytes / min(seconds[1:]) / 1e9:.2f} GB/s "
                  f"(each: {rates})", flush=True)
    finally:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)


if __name__ == "__main__":
    main()
