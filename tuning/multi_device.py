"""One GPU against every GPU of the machine, in one run (issue 11): the volume from
memory to memory through one device, through the multi-device path
(``pybp.reconstruct(devices=...)``) and through a Dask cluster of one worker per
device in this process (``client=``); then, with ``--file``, from a DXchange file to
a folder of TIFF slices through ``pybp reconstruct`` with ``--device``, ``--devices``
and ``--scheduler local`` (worker processes).

    python tuning/multi_device.py --size 2048 --rows 2048 --repeats 3
    python tuning/multi_device.py --size 2048 --rows 2048 --file --folder /local/disk
    pybp bench --io --json limits.json && python tuning/multi_device.py ... --limits limits.json

Each volume is checked slice by slice against the one-device volume (bit for bit:
the same kernels on the same kind of GPU), after ``out`` was filled with NaN, so a
slice missing or written twice with other values shows. Wall times are medians of
``--repeats`` after a warm-up; kernel-only GU/s of one device and silx's FBP per slice
are measured in the same run for scale. With ``--limits`` (``pybp bench --io --json``), each
in-memory wall time beside its bound (issue 53): the host's copies of the counts into
page-locked staging and of the slices out, the bus up and down, the kernels shared among
the devices.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tifffile

import pybp
from pybp.bench import io as bench_io, volume as bench_pipeline
from pybp.stream import sources
from pybp.bench.kernels import rate
from pybp.cl.device import all_devices
from pybp.distributed import device_list, local_cluster
from pybp.io.demo import write_dxchange
from pybp.api.sinograms import Backprojector
from pybp.tune.search import gups
from pybp.api.volumes import reconstruct
from pybp.parallel.volumes import Reconstructor


def fill(array, value):
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda block: block.fill(value), np.array_split(array, 64)))


def differing_slices(a, b):
    with ThreadPoolExecutor(16) as pool:
        same = list(pool.map(lambda i: np.array_equal(a[i], b[i]), range(len(a))))
    return [i for i, s in enumerate(same) if not s]


def timed(label, run, repeats, out, reference, updates):
    """Median wall of ``repeats`` runs into ``out`` (NaN first); checks the last."""
    walls = []
    for _ in range(repeats):
        fill(out, np.nan)
        tick = time.perf_counter()
        run()
        walls.append(time.perf_counter() - tick)
    wall = float(np.median(walls))
    bad = differing_slices(out, reference) if reference is not None else \
        [i for i in range(len(out)) if not np.isfinite(out[i]).all()]
    print(f"{label:34s} {wall:7.2f} s  {rate(updates / wall * 1e-9):>6s} GU/s  "
          f"(runs {', '.join(f'{w:.2f}' for w in walls)}); slices differing from one "
          f"device: {len(bad)}{' ' + str(bad[:8]) if bad else ''}", flush=True)
    return wall


def from_memory(args, devices):
    angles, projections, flats, darks = bench_pipeline.make_scan(args.size, args.size, args.rows,
                                                                 20)
    out = np.empty((args.rows, args.size, args.size), np.float32)
    reference = np.empty_like(out)
    fill(out, 0.0)
    fill(reference, 0.0)
    updates = float(args.size) * args.size * args.size * args.rows
    print(f"scan: {args.size} x {args.rows} x {args.size} uint16 "
          f"({projections.nbytes / 2**30:.1f} GiB), volume {out.nbytes / 2**30:.1f} GiB", flush=True)

    with Backprojector(args.size, angles, filter="ramp", device=devices[0]) as bp:
        stack = np.random.default_rng(1).random((4 * bp.slices_per_pass, args.size, args.size),
                                                np.float32)
        kernel = gups(bp, stack, 5)
        print(f"kernel only, one device: {rate(kernel)} GU/s ({bp.params.key()})", flush=True)
        if not args.no_silx:
            sinogram = np.ascontiguousarray(stack[0])
            silx = bench_pipeline.silx_fbp_seconds(bp.cl_device, angles, sinogram)
            if silx:
                print(f"silx filtered_backprojection: {silx * 1e3:.1f} ms per slice", flush=True)

    scan = dict(projections=projections, angles=angles, flats=flats, darks=darks, progress=False)
    data = dict(projections=projections, flats=flats, darks=darks, progress=False)
    warm = dict(scan, rows=(0, min(64, args.rows)))
    from distributed import Client
    results = {}
    with local_cluster(devices) as cluster, Client(cluster) as client:
        ways = [("1 device", dict(device=devices[0])),
                (f"{len(devices)} devices", dict(devices=devices)),
                (f"Dask, {len(devices)} workers", dict(client=client))]
        print("pybp.reconstruct: each call makes and frees the devices' kernels, memory "
              "and staging", flush=True)
        for label, where in ways:
            first = not results  # the reference volume: one device, one call each time
            into = reference if first else out
            reconstruct(**warm, **where)
            stats = {}
            results["call", label] = timed(label, lambda: reconstruct(
                **scan, out=into, **where, stats=stats), args.repeats, into,
                None if first else reference, updates)
            describe(stats)
        print("pybp.Reconstructor kept between calls (made, and warmed on 64 rows, before "
              "the clock)", flush=True)
        for label, where in ways:
            with Reconstructor(args.size, angles, **where) as rec:
                rec.reconstruct(**data, rows=warm["rows"])
                stats = {}
                results["kept", label] = timed(label, lambda: rec.reconstruct(
                    **data, out=out, stats=stats), args.repeats, out, reference, updates)
                describe(stats)
    for how in ("call", "kept"):
        one, many, dask = (results[how, label] for label, _ in ways)
        print(f"{how}: {len(devices)} devices {one / many:.2f}x one; Dask {one / dask:.2f}x one, "
              f"{dask / many:.3f} of the multi-device wall", flush=True)
        if args.limits:
            limits = bench_io.load(args.limits)
            for (label, _), count in zip(ways, (1, len(devices), len(devices))):
                case = bench_io.Case(label, read=0, written=0,
                                     copied=projections.nbytes + out.nbytes,
                                     up=projections.nbytes, down=out.nbytes, devices=count,
                                     kernel_seconds=updates / (kernel * 1e9))
                print(f"  {how}, {label}: " + bench_io.against(case, limits,
                                                               results[how, label]), flush=True)


def describe(stats):
    """Where the time went: set-up, each device's slices, timeline and back-projection
    time, or the slabs of a Dask run."""
    if "devices" in stats:
        print("  per device: " + "; ".join(
            f"{d['slices']} slices, made {d['built']:.2f} s, streaming from {d['prepare']:.2f} "
            f"for {d['wall']:.2f} s (back-projection {d.get('device_backproject', 0):.2f} s)"
            for d in stats["devices"]), flush=True)
    elif "device_backproject" in stats:
        print(f"  back-projection {stats['device_backproject']:.2f} s", flush=True)
    if "slabs" in stats:
        print(f"  {len(stats['slabs'])} slabs: " + ", ".join(
            f"{s['worker']}:{s['first']}-{s['stop']} {s['wall']:.2f} s" for s in stats["slabs"]),
            flush=True)
    if "setup_staging" in stats:
        print(f"  set-up {stats.get('setup_plan', 0):.2f} s, buffers and staging "
              f"{stats['setup_staging']:.2f} s, stream {stats['setup_stream']:.2f} s, host "
              f"read {stats['host_read']:.2f} s, write {stats['host_write']:.2f} s", flush=True)


def from_file(args, devices):
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scan.h5"
    if not path.exists():
        angles, projections, flats, darks = bench_pipeline.make_scan(args.size, args.size,
                                                                     args.rows, 20)
        tick = time.perf_counter()
        write_dxchange(path, projections, flats, darks, np.degrees(angles))
        print(f"wrote {path} ({path.stat().st_size / 2**30:.1f} GiB) in "
              f"{time.perf_counter() - tick:.1f} s", flush=True)
        del projections, flats, darks
    center = str(args.size / 2 - 0.5)
    indices = ",".join(str(i) for i in args.indices)
    ways = [("1 device", ["--device", str(args.indices[0])]),
            (f"{len(devices)} devices", ["--devices", indices]),
            (f"Dask, {len(devices)} worker processes", ["--scheduler", "local", "--devices", indices])]
    reference = None
    for label, extra in ways:
        output = folder / "slices"
        shutil.rmtree(output, ignore_errors=True)
        command = [sys.executable, "-m", "pybp", "reconstruct", str(path), "-o", str(output),
                   "--center", center, *extra]
        tick = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True,  # (this pybp: see
                              cwd=Path(pybp.__file__).resolve().parent.parent)  # cone_file_speed)
        wall = time.perf_counter() - tick
        if done.returncode:
            print(f"{label}: failed\n{done.stderr[-2000:]}", flush=True)
            continue
        line = [t for t in done.stdout.splitlines() if t.startswith("reconstructed")][-1]
        seconds = float(re.search(r" in ([0-9.]+) s", line).group(1))
        names = sorted(p.name for p in output.glob("slice_*.tif"))
        sample = [names[i] for i in range(0, len(names), max(1, len(names) // 16))]
        values = [tifffile.imread(output / n) for n in sample]
        if reference is None:
            reference = values
        same = all(np.array_equal(a, b) for a, b in zip(values, reference))
        print(f"from file to TIFF, {label:26s} {seconds:6.1f} s reconstructing "
              f"({wall:.1f} s the whole command); {len(names)} slices, 16 sampled "
              f"{'equal to' if same else 'DIFFER from'} one device's", flush=True)
    shutil.rmtree(folder / "slices", ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", default="all")
    parser.add_argument("--file", action="store_true", help="the file runs instead")
    parser.add_argument("--folder", default="/tmp/pybp-multi-device")
    parser.add_argument("--no-silx", action="store_true")
    parser.add_argument("--limits", default=None,
                        help="limits from pybp bench --io --json: each run beside its bound")
    args = parser.parse_args()
    devices = device_list(args.devices)
    args.indices = [all_devices().index(d) for d in devices]
    print("devices: " + "; ".join(d.name for d in devices), flush=True)
    print(f"copy threads per pipeline and direction: {sources.COPY_THREADS}", flush=True)
    (from_file if args.file else from_memory)(args, devices)


if __name__ == "__main__":
    main()
