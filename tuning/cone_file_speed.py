"""A cone-beam scan from a DXchange file to a volume on disk, the whole command, beside
the same FDK from the same counts in memory (docs/benchmarks.md): the RabbitCT-like case
of ``pybp bench --cone`` (496 projections of 960 x 1248 uint16 counts, 20 flats and
darks) into 512^3.

    python tuning/cone_file_speed.py [--folder /tmp/cone] [--size 512] [--output vol.h5]

The large case of issue 37, a volume larger than the device's memory limit streamed from
the file to the disk (the whole command only, the scan made block by block):

    python tuning/cone_file_speed.py --size 2048 --projections 2048 --detector 2048 2048 \
        --memory-limit 8G --output volume.npy --no-memory --runs 1

With ``--limits`` (``pybp bench --io --json FILE`` in the same folder), each whole
command beside its bound (issue 53): the file read from the page cache, the volume
written to the disk, the counts up and the volume down the bus, and the kernels where
``--kernel-seconds`` gives them (``--kernel`` measures them first). With
``PYTHONPATH=OLD_TREE``, the command runs that tree's pybp too (from its folder).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import pybp
from pybp.bench import io as bench_io
from pybp.cone.kind import write_circular
from pybp.io.demo import write_dxchange
from pybp.tune.cone import FIELD, PIXEL, SOURCE_DETECTOR, SOURCE_ORIGIN, geometry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="/tmp/pybp-cone")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--output", default="volume.h5", help="in --folder: .h5, .npy or a folder")
    parser.add_argument("--projections", type=int, default=496)
    parser.add_argument("--detector", type=int, nargs=2, default=[960, 1248], metavar=("ROWS", "COLS"))
    parser.add_argument("--memory-limit", default=None, help="passed to the command (e.g. 8G)")
    parser.add_argument("--no-memory", action="store_true",
                        help="only the whole command (not FDK from the counts in memory)")
    parser.add_argument("--runs", type=int, default=2, help="whole commands, one after another")
    parser.add_argument("--limits", default=None,
                        help="limits from pybp bench --io --json: each run beside its bound")
    parser.add_argument("--kernel-seconds", type=float, default=None,
                        help="with --limits: the kernels' seconds on one device")
    parser.add_argument("--kernel", action="store_true",
                        help="measure those first: the back-projection kernel alone over the "
                             "volume (its passes on the first slab of the volume in one piece)")
    args = parser.parse_args()
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    g = geometry(args.size, args.projections, tuple(args.detector))
    n, (rows, cols) = g.n_angles, g.detector_shape
    rng = np.random.default_rng(0)
    tick = time.perf_counter()
    flats = rng.integers(24000, 26000, (20, rows, cols), dtype=np.uint16)
    darks = rng.integers(90, 110, (20, rows, cols), dtype=np.uint16)
    scan = folder / "scan.h5"
    counts = None
    if args.no_memory:
        if not scan.exists():
            _write_blocks(scan, rng, (n, rows, cols), flats, darks, np.degrees(g.angles) % 360)
    else:
        counts = rng.integers(1000, 20000, (n, rows, cols), dtype=np.uint16)
        if not scan.exists():
            write_dxchange(scan, counts, flats, darks, np.degrees(g.angles) % 360)
    write_circular(folder / "cone.json", SOURCE_ORIGIN, SOURCE_DETECTOR - SOURCE_ORIGIN, PIXEL,
                   g.volume_shape, FIELD / args.size)
    print(f"scan: {scan} ({scan.stat().st_size / 2**30:.2f} GiB), made in "
          f"{time.perf_counter() - tick:.1f} s", flush=True)
    if args.kernel:
        args.kernel_seconds = _kernel_seconds(g)

    if counts is not None:
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
    if args.memory_limit:
        command += ["--memory-limit", args.memory_limit]
    for attempt in ("first", "second")[:args.runs]:
        tick = time.perf_counter()
        # From the folder above the pybp this script imported: ``-m`` puts the current
        # folder first on the path, which would run this checkout's pybp instead of an
        # older tree given on PYTHONPATH.
        subprocess.run(command, check=True, cwd=Path(pybp.__file__).resolve().parent.parent)
        wall = time.perf_counter() - tick
        print(f"whole command ({attempt}; the file in the page cache): {wall:.2f} s "
              f"({g.updates() / wall * 1e-9:.0f} GUPS): {' '.join(command[1:])}", flush=True)
        if args.limits:
            volume = 4 * int(np.prod(g.volume_shape))
            suffix = Path(args.output).suffix
            case = bench_io.Case("cone, file to file", read=scan.stat().st_size,
                                 written=volume, copied=scan.stat().st_size + volume,
                                 up=scan.stat().st_size, down=volume,
                                 format={".npy": "npy", ".h5": "hdf5"}.get(suffix, "tiff"),
                                 kernel_seconds=args.kernel_seconds)
            print(f"{attempt}: " + bench_io.against(case, bench_io.load(args.limits), wall),
                  flush=True)


def _kernel_seconds(g) -> float:
    """The back-projection kernel alone over ``g``'s volume on the chosen device
    (``PYBP_DEVICE``), its profiler's parameters: median of 2 after a warm-up."""
    import pyopencl as cl

    from pybp.cl.device import describe, open_device
    from pybp.cone.profiler import default_params
    from pybp.tune.cone import kernel_seconds

    device, context, _ = open_device(None)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    params = default_params(describe(device))
    seconds = kernel_seconds(g, params, queue, 2)
    print(f"the back-projection kernel alone ({params}): {seconds:.2f} s "
          f"({g.updates() / seconds * 1e-9:.0f} GUPS)", flush=True)
    return seconds


def _write_blocks(path, rng, shape, flats, darks, degrees):
    """A DXchange file of random uint16 counts written a block of projections at a time
    (a scan larger than this machine's memory)."""
    import h5py

    with h5py.File(path, "w") as f:
        data = f.create_dataset("exchange/data", shape, np.uint16, chunks=(1,) + shape[1:])
        for a in range(0, shape[0], 64):
            b = min(shape[0], a + 64)
            data[a:b] = rng.integers(1000, 20000, (b - a,) + shape[1:], dtype=np.uint16)
        f["exchange/data_white"] = flats
        f["exchange/data_dark"] = darks
        f.create_dataset("exchange/theta", data=np.asarray(degrees, np.float64))
        f["exchange/theta"].attrs["units"] = "degrees"


if __name__ == "__main__":
    main()
