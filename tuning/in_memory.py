"""Parallel beam from memory to memory on one device: ``pybp.reconstruct`` into a given
``out``, then a kept ``pybp.Reconstructor``, each the median of 3 after a warm-up, and a
checksum of the volume. Old code beside new: run it once per tree, in turn, with that
tree first on ``PYTHONPATH``; ``--make`` writes the scan to ``--folder`` first (each run
then reads it, not making it again).

    python tuning/in_memory.py --make
    python tuning/in_memory.py --label new
    (cd old-tree && PYTHONPATH=$PWD python ../tuning/in_memory.py --label old)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048, help="bins and projections")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--device", default="0")
    parser.add_argument("--folder", default="/dev/shm")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--make", action="store_true")
    args = parser.parse_args()
    folder, size, rows = Path(args.folder), args.size, args.rows
    names = ("angles", "p", "f", "d")
    if args.make:
        from pybp.bench.volume import make_scan
        for name, array in zip(names, make_scan(size, size, rows, 10, seed=1)):
            np.save(folder / f"{name}.npy", array)
        return
    import pybp
    angles, p, f, d = (np.load(folder / f"{name}.npy") for name in names)
    out = np.empty((rows, size, size), np.float32)
    device = int(args.device) if args.device.isdigit() else args.device
    center = size / 2 - 0.5

    def once():
        tick = time.perf_counter()
        pybp.reconstruct(p, angles, f, d, center=center, out=out, device=device,
                         progress=False)
        return time.perf_counter() - tick

    once()
    calls = [once() for _ in range(3)]
    with pybp.Reconstructor(size, angles, center, device=device) as rec:
        rec.reconstruct(p, f, d, out=out, progress=False)
        kept = []
        for _ in range(3):
            tick = time.perf_counter()
            rec.reconstruct(p, f, d, out=out, progress=False)
            kept.append(time.perf_counter() - tick)
    updates = rows * size ** 3 * 1e-9
    print(f"{args.label}: reconstruct {statistics.median(calls):.3f} s "
          f"({updates / statistics.median(calls):.0f} GU/s) {['%.3f' % t for t in calls]}; "
          f"kept {statistics.median(kept):.3f} s {['%.3f' % t for t in kept]}; checksum "
          f"{float(out[::64, ::64, ::64].astype(np.float64).sum()):.6e}", flush=True)


if __name__ == "__main__":
    main()
