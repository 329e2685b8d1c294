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

Issue 53's parallel cases, 2048^3 into each format, the input in the page cache only,
two runs each, without the breakdown through the API (``--quick``):

    python tuning/file_speed.py --size 2048 --rows 2048 --folder /tmp/fs \
        --limits limits.json --output npy h5 tiff --input warm --runs 2 --quick
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
# --output -> (the output's name in the folder, the format of pybp bench --io's limits)
OUTPUTS = {"tiff": ("slices-{}", "tiff"), "npy": ("volume-{}.npy", "npy"),
           "h5": ("volume-{}.h5", "hdf5")}


def remove(path: Path):
    """An output of this script: a folder, or a file and its ``.json`` sidecar."""
    if path.is_dir():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    path.with_suffix(".json").unlink(missing_ok=True)


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
    read_through(path)
    read = n_bytes / (time.perf_counter() - tick) * 1e-9
    path.unlink()
    return write, read


def read_through(path: Path):
    """Read ``path`` once, which leaves it in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass


def _scan_shape(path: Path):
    """The projections' shape of a DXchange file, or None."""
    try:
        with open_scan(path) as opened:
            return tuple(opened.projections.shape)
    except (OSError, ValueError, KeyError):
        return None


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
    parser.add_argument("--output", nargs="+", default=["tiff"], choices=sorted(OUTPUTS),
                        help="a folder of TIFF slices, a .npy or an HDF5 file (several: each "
                             "in turn, from the one scan)")
    parser.add_argument("--input", default="both", choices=("both", "cold", "warm"),
                        help="the input read from the disk (cold), the page cache, or both")
    parser.add_argument("--runs", type=int, default=1, help="whole commands per input state")
    parser.add_argument("--keep-scan", action="store_true",
                        help="reuse the folder's scan.h5 where it has these sizes, and leave it")
    parser.add_argument("--quick", action="store_true",
                        help="no disk test, no breakdown through the API, no pybp center")
    args = parser.parse_args()
    n_angles = args.angles or args.size
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)

    if not args.quick:
        write, read = disk_speed(folder, int(args.disk_gib * (1 << 30)) // BLOCK * BLOCK)
        print(f"disk ({folder.resolve()}): write {write:.2f} GB/s (with fsync), cold read "
              f"{read:.2f} GB/s, {args.disk_gib:.0f} GiB file")

    print("--- in memory to in memory (pybp bench --pipeline) ---", flush=True)
    memory = bench_pipeline.run(device=args.device, size=args.size, n_angles=n_angles,
                                rows=args.rows, n_flats=args.flats, with_silx=False)

    scan = folder / "scan.h5"
    shape = (n_angles, args.rows, args.size)
    if not (args.keep_scan and _scan_shape(scan) == shape):
        angles, projections, flats, darks = bench_pipeline.make_scan(args.size, n_angles,
                                                                     args.rows, args.flats)
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
    states = ("cold", "warm") if args.input == "both" else (args.input,)
    if states == ("warm",):
        read_through(scan)  # into the page cache (a scan just written was dropped from it)
    for kind, name in [(k, state) for k in args.output for state in states
                       for _ in range(args.runs)]:
        name_pattern, form = OUTPUTS[kind]
        out = folder / name_pattern.format(name)
        remove(out)
        if name == "cold":
            bench_io.drop_from_cache(scan)
        print(f"--- file to {kind}, input {name} ---", flush=True)
        wall = timed_cli(["reconstruct", str(scan), "-o", str(out), "--center", center] + device)
        tick = time.perf_counter()
        os.sync()
        flush = time.perf_counter() - tick
        results.setdefault(f"{kind} {name}", []).append(wall)
        if args.limits:
            case = bench_io.Case(f"file to {kind}, input {name}",
                                 read=scan.stat().st_size,
                                 written=4 * args.rows * args.size ** 2,
                                 copied=scan.stat().st_size + 4 * args.rows * args.size ** 2,
                                 up=scan.stat().st_size, down=4 * args.rows * args.size ** 2,
                                 format=form, kernel_seconds=kernel_seconds)
            print(f"{name}: " + bench_io.against(case, limits, wall, cached=name == "warm"))
        print(f"{name}: {wall:.2f} s wall, {updates / wall * 1e-9:.3g} GU/s, "
              f"{100 * (updates / wall) / (updates / memory['wall']):.0f}% of in memory, "
              f"{100 * kernel_seconds / wall:.0f}% of the kernel's speed; "
              f"then sync of the output to disk {flush:.2f} s "
              f"({args.rows * args.size ** 2 * 4 / max(flush, 1e-9) * 1e-9:.2f} GB/s)")
        remove(out)
    summary = "; ".join(f"{key} " + ", ".join(f"{w:.2f}" for w in walls) + " s"
                        for key, walls in results.items())
    if args.quick:
        print(f"summary: in memory {memory['wall']:.2f} s ({memory['gups']:.0f} GU/s, kernel "
              f"only {memory['kernel_gups']:.0f}, {kernel_seconds:.2f} s); file to "
              f"{summary}")
        if not args.keep_scan:
            scan.unlink()
        return

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
          f"only {memory['kernel_gups']:.0f}); file to {summary}")
    if not args.keep_scan:
        scan.unlink()


if __name__ == "__main__":
    main()
