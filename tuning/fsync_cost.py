"""What flushing each slice to the disk costs (issue 20): slices written into each kind
of output with ``os.fsync`` as pybp does it, and with it made a no-op, in one run.

    python tuning/fsync_cost.py --folder /tmp/fsync --slices 64 --size 1024
"""

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np

from pybp.io import writers


def write(folder, kind, slices, batch):
    path = Path(folder) / {"tiff": "s", "hdf5": "r.h5", "npy": "r.npy"}[kind]
    tick = time.perf_counter()
    output = writers.open_output(path, slices.shape)
    for start in range(0, len(slices), batch):
        output[start:start + batch] = slices[start:start + batch]
    output.finish()
    output.close()
    seconds = time.perf_counter() - tick
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.with_suffix(".json").unlink(missing_ok=True)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--slices", type=int, default=64)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8, help="slices per write (a chunk)")
    args = parser.parse_args()
    Path(args.folder).mkdir(parents=True, exist_ok=True)
    slices = np.random.default_rng(0).standard_normal(
        (args.slices, args.size, args.size)).astype(np.float32)
    real = os.fsync
    print(f"{args.slices} slices of {args.size}^2 float32 ({slices.nbytes / 1e6:.0f} MB), "
          f"{args.batch} per write, into {args.folder}")
    for kind in ("tiff", "hdf5", "npy"):
        synced = min(write(args.folder, kind, slices, args.batch) for _ in range(3))
        os.fsync = lambda fd: None
        try:
            unsynced = min(write(args.folder, kind, slices, args.batch) for _ in range(3))
        finally:
            os.fsync = real
        print(f"{kind:5s} with fsync {synced:6.3f} s, without {unsynced:6.3f} s "
              f"({synced / unsynced:.2f}x)")


if __name__ == "__main__":
    main()
