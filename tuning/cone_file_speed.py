"""A cone-beam scan from a DXchange file to a volume on disk, the whole command, beside
the same FDK from the same counts in memory (docs/benchmarks.md): the RabbitCT-like case
of ``pybp bench --cone`` (496 projections of 960 x 1248 uint16 counts, 20 flats and
darks) into 512^3.

    python tuning/cone_file_speed.py [--folder /tmp/cone] [--size 512] [--output vol.h5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import pybp
from pybp.io.cone import write_circular
from pybp.io.demo import write_dxchange
from pybp.tune.cone import FIELD, PIXEL, SOURCE_DETECTOR, SOURCE_ORIGIN, geometry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="/tmp/pybp-cone")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--output", default="volume.h5", help="in --folder: .h5, .npy or a folder")
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    g = geometry(args.size)
    n, (rows, cols) = g.n_angles, g.detector_shape
    rng = np.random.default_rng(0)
    tick = time.perf_counter()
    counts = rng.integers(1000, 20000, (n, rows, cols), dtype=np.uint16)
    flats = rng.integers(24000, 26000, (20, rows, cols), dtype=np.uint16)
    darks = rng.integers(90, 110, (20, rows, cols), dtype=np.uint16)
    scan = folder / "scan.h5"
    if not scan.exists():
        write_dxchange(scan, counts, flats, darks, np.degrees(g.angles) % 360)
    write_circular(folder / "cone.json", SOURCE_ORIGIN, SOURCE_DETECTOR - SOURCE_ORIGIN, PIXEL,
                   g.volume_shape, FIELD / args.size)
    print(f"scan: {scan} ({scan.stat().st_size / 2**30:.2f} GiB), made in "
          f"{time.perf_counter() - tick:.1f} s", flush=True)

    with pybp.ConeBackprojector(g, filter="ramp", flats=flats, darks=darks) as bp:
        bp(counts)
        tick = time.perf_counter()
        bp(counts)
        memory = time.perf_counter() - tick
    print(f"in memory: uint16 counts to the volume, normalised on the device (a kept "
          f"ConeBackprojector): "
          f"{memory:.2f} s ({g.updates() / memory * 1e-9:.0f} GUPS)", flush=True)

    output = folder / args.output
    command = [sys.executable, "-m", "pybp", "reconstruct", str(scan), "-o", str(output),
               "--geometry", str(folder / "cone.json"), "--overwrite", "--quiet"]
    for attempt in ("first", "second"):
        tick = time.perf_counter()
        subprocess.run(command, check=True)
        wall = time.perf_counter() - tick
        print(f"whole command ({attempt}; the file in the page cache): {wall:.2f} s "
              f"({g.updates() / wall * 1e-9:.0f} GUPS): {' '.join(command[1:])}", flush=True)


if __name__ == "__main__":
    main()
