"""Files to files on one device, beside the same volume from memory to memory, in one run
(issue 9): a DXchange file of ``angles x rows x size`` uint16 projections with flats and
darks, reconstructed by ``pybp reconstruct`` into a folder of float32 TIFF slices, with
the disk's own read and write speed measured in the same folder.

    python tuning/file_speed.py --size 2048 --rows 512 --folder /local/disk/folder
    pybp bench --io --folder /local/disk/folder --json limits.json   # then, beside each run
    python tuning/file_speed.py ... --limits limits.json             # its bound (issue 53)

Reads are timed cold (the input's pages dropped from the page cache with
``posix_fadvise(DONTNEED)`` after an fsync, no root needed) and warm. Writes land in
the page cache; the time to write them to the disk (``sync``) is reported beside.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from pybp.bench import io as bench_io, volume as bench_pipeline
from pybp.cli import commands as cli
from pybp.io import open_output, open_scan
from pybp.io.demo import write_dxchange
from pybp.api.volumes import reconstruct

BLOCK = 64 << 20


def disk_speed(folder: Path, n_bytes: int):
    """(write GB/s including fsync, cold read GB/s) of one file of ``n_bytes``."""
    path = folder / "disk-speed.bin"
    block = np.random.default_rng(0).integers(0, 255, BLOCK, np.uint8).tobytes()
    tick = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(n_bytes // BLOCK):
            f.write(block)
        os.fsync(f.fileno())
    write = n_bytes / (time.perf_counter() - tick) * 1e-9
    bench_io.drop_from_cache(path)
    tick = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass
    read = n_bytes / (time.perf_counter() - tick) * 1e-9
    path.unlink()
    return write, read


def timed_cli(argv):
    tick = time.perf_counter()
    code = cli.main(argv)
    wall = time.perf_counter() - tick
    if code != 0:
        sys.exit(f"pybp {' '.join(argv)} failed with {code}")
    return wall


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--angles", type=int, default=None)
    parser.add_argument("--flats", type=int, default=20)
    parser.add_argument("--folder", default="file-speed", help="on the disk to measure")
    parser.add_argument("--device", default=None)
    parser.add_argument("--disk-gib", type=float, default=8.0, help="size of the disk test")
    parser.add_argument("--limits", default=None,
                        help="limits from pybp bench --io --json: each run beside its bound")
    args = parser.parse_args()
    n_angles = args.angles or args.size
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)

    write, read = disk_speed(folder, int(args.disk_gib * (1 << 30)) // BLOCK * BLOCK)
    print(f"disk ({folder.resolve()}): write {write:.2f} GB/s (with fsync), cold read "
          f"{read:.2f} GB/s, {args.disk_gib:.0f} GiB file")

    print("--- in memory to in memory (pybp bench --pipeline) ---", flush=True)
    memory = bench_pipeline.run(device=args.device, size=args.size, n_angles=n_angles,
                                rows=args.rows, n_flats=args.flats, with_silx=False)

    angles, projections, flats, darks = bench_pipeline.make_scan(args.size, n_angles,
                                                                 args.rows, args.flats)
    scan = folder / "scan.h5"
    scan.unlink(missing_ok=True)
    tick = time.perf_counter()
    write_dxchange(scan, projections, flats, darks, np.degrees(angles))
    bench_io.drop_from_cache(scan)
    print(f"wrote {scan} ({scan.stat().st_size / 1e9:.2f} GB) in "
          f"{time.perf_counter() - tick:.1f} s (with fsync)")
    del projections, flats, darks
    updates = float(args.size) ** 2 * n_angles * args.rows
    kernel_seconds = updates / (memory["kernel_gups"] * 1e9)
    limits = bench_io.load(args.limits) if args.limits else None
    center = str((args.size - 1) / 2)
    device = [] if args.device is None else ["--device", args.device]
    results = {}
    for name in ("cold", "warm"):
        out = folder / f"slices-{name}"
        shutil.rmtree(out, ignore_errors=True)
        if name == "cold":
            bench_io.drop_from_cache(scan)
        print(f"--- file to TIFF folder, input {name} ---", flush=True)
        wall = timed_cli(["reconstruct", str(scan), "-o", str(out), "--center", center] + device)
        tick = time.perf_counter()
        os.sync()
        flush = time.perf_counter() - tick
        results[name] = wall
        if args.limits:
            case = bench_io.Case(f"file to TIFF, input {name}", read=scan.stat().st_size,
                                 written=4 * args.rows * args.size ** 2,
                                 copied=scan.stat().st_size + 4 * args.rows * args.size ** 2,
                                 up=scan.stat().st_size, down=4 * args.rows * args.size ** 2,
                                 format="tiff", kernel_seconds=kernel_seconds)
            print(f"{name}: " + bench_io.against(case, limits, wall, cached=name == "warm"))
        print(f"{name}: {wall:.2f} s wall, {updates / wall * 1e-9:.3g} GU/s, "
              f"{100 * (updates / wall) / (updates / memory['wall']):.0f}% of in memory; "
              f"then sync of the slices to disk {flush:.2f} s "
              f"({args.rows * args.size ** 2 * 4 / max(flush, 1e-9) * 1e-9:.2f} GB/s)")
        shutil.rmtree(out)

    print("--- where the time goes, warm input, through the API ---", flush=True)
    out = folder / "slices-stats"
    shutil.rmtree(out, ignore_errors=True)
    stats = {}
    with open_scan(scan) as opened:
        output = open_output(out, (args.rows, args.size, args.size),
                             metadata=dict(first_row=0))
        tick = time.perf_counter()
        reconstruct(opened.projections, opened.angles, opened.flats, opened.darks,
                    center=float(center), out=output, device=args.device, progress=False,
                    stats=stats)
        wall = time.perf_counter() - tick
        output.close()
    print(f"api: {wall:.2f} s wall; host read (HDF5 to staging) {stats['host_read']:.2f} s, "
          f"host write (TIFF files) {stats['host_write']:.2f} s, device back-projection "
          f"{stats['device_backproject']:.2f} s, writer waiting for the device "
          f"{stats['host_wait_device']:.2f} s, set-up {stats['setup_plan'] + stats['setup_staging']:.2f} s")
    shutil.rmtree(out)
    tick = time.perf_counter()
    timed_cli(["center", str(scan)])
    print(f"pybp center on the file: {time.perf_counter() - tick:.1f} s")
    print(f"summary: in memory {memory['wall']:.2f} s ({memory['gups']:.0f} GU/s, kernel "
          f"only {memory['kernel_gups']:.0f}); file to TIFF cold {results['cold']:.2f} s, "
          f"warm {results['warm']:.2f} s")
    scan.unlink()


if __name__ == "__main__":
    main()
