"""The developers' commands: demo, render, bench and tune. Loaded only when one of them
runs (pybp/cli/commands.py names them by module), so that ``pybp reconstruct`` does not
import the benchmarks, the tuner and the cone-beam code (0.1 s of its start-up)."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import fields as dataclass_fields
from pathlib import Path

import numpy as np

from pybp import checks, distributed, phantoms
from pybp.api.sinograms import Backprojector
from pybp.bench import cone as bench_cone, io as bench_io, iterative as bench_iterative
from pybp.bench import kernels as bench
from pybp.bench import volume as bench_pipeline
from pybp.cl import cache
from pybp.cl.device import select_device
from pybp.cli import cone as cone_cli
from pybp.cli.writing import EXIT_INTERRUPTED
from pybp.geometry.parallel import Geometry, ParallelGeometry
from pybp.io.demo import phantom_scan, write_dxchange
from pybp.io.output import disks
from pybp.io.images import SLICE_SUFFIXES, write_slice
from pybp.io.readers import HDF5_SUFFIXES
from pybp.io.writers import check_output_file
from pybp.parallel import kernels, speed
from pybp.parallel.params import SETTINGS, AluParams, family_of
from pybp.tune import cone as cone_tuning, search as tuning
from pybp.tune.cone import geometry as cone_geometry

def cmd_write_scan(args):
    path = args.write_scan
    check_output_file(path, args.overwrite, HDF5_SUFFIXES, "--write-scan")
    n_bins = args.size or 256
    # line integrals, counts and the noise's temporaries: about 40 bytes a sample
    checks.check_demo_memory(40 * (args.angles or n_bins) * max(1, n_bins // 4) * n_bins,
                             f"a scan of {n_bins} bins")
    degrees, projections, flats, darks, center, _ = phantom_scan(
        n_bins, n_rows=max(1, n_bins // 4), n_angles=args.angles)
    write_dxchange(path, projections, flats, darks, degrees, overwrite=args.overwrite)
    print(f"wrote {path}: DXchange scan of the 3-D Shepp-Logan phantom, {len(degrees)} "
          f"projections over 180 degrees of {projections.shape[1]} x {n_bins} (uint16), "
          f"{len(flats)} flats and darks; rotation axis at {center:.2f}")
    print(f"next: pybp reconstruct {path} -o {Path(path).stem}-slices")
    return 0


def cmd_demo(args):
    if args.cone:
        return cone_cli.demo(args)
    if args.write_scan:
        return cmd_write_scan(args)
    args.output = args.output or "pybp-demo.png"
    check_output_file(args.output, args.overwrite, SLICE_SUFFIXES)  # before any work
    if (Path(args.output).suffix.lower() in (".tif", ".tiff")
            and importlib.util.find_spec("tifffile") is None):
        raise RuntimeError("--output: writing TIFF needs tifffile (pybp's io extra: "
                           "pip install tifffile)")
    if args.device is None:
        speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
    device = select_device(args.device)  # a wrong one is reported before any work
    n = args.size or 512
    checks.check_demo_memory(40 * (args.angles or n) * n + 16 * n * n, f"a slice of {n}^2")
    angles = np.linspace(0, np.pi, args.angles or n, endpoint=False)
    geometry = Geometry.create(n, angles)
    try:
        sinogram = phantoms.shepp_logan_radon(geometry).astype(np.float32)
        start = time.perf_counter()
        with Backprojector(n, angles, device=device, filter=args.filter,
                           interpolation=args.interpolation, precision=args.precision,
                           slices_per_pass=1) as bp:
            slice_ = bp(sinogram)
        wall = time.perf_counter() - start
        phantom = phantoms.shepp_logan_image(geometry)
    except KeyboardInterrupt:
        print("pybp demo: interrupted; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    error = float(np.sqrt(np.mean((slice_ - phantom) ** 2)))
    gups = geometry.updates() / bp.last_kernel_seconds * 1e-9
    print(f"device:  {bp.device.name} ({bp.device.platform})")
    print(f"kernel:  {bp.params.key()}")
    print(f"case:    Shepp-Logan phantom, {angles.size} angles x {n} bins -> {n}x{n}, "
          f"FBP with the {args.filter} filter")
    print(f"speed:   {gups:.2f} GU/s back-projection kernel time "
          f"({bp.last_kernel_seconds * 1e3:.1f} ms; filter {bp.last_filter_seconds * 1e3:.1f} ms; "
          f"{wall:.2f} s in all, with set-up)")
    print(f"error:   RMS {error:.4f} against the phantom (values 0..1)")
    path = write_slice(args.output, slice_, low=0.0, high=1.0, overwrite=args.overwrite)
    print(f"slice:   written to {path}")
    return 0


# The ALU family's fields include every field of the texture family.
# The ALU family's fields include every field of the texture family.
RENDER_FIELDS = {f.name for f in dataclass_fields(AluParams)}

def cmd_render(args):
    if args.output not in (None, "-"):
        check_output_file(args.output, args.overwrite)  # before any work
    if args.cone:
        return cone_cli.render(args)
    family = family_of(args.kernel or "standard")
    names = {f.name for f in dataclass_fields(family)}
    given = {name: value for name, value in vars(args).items()
             if name in RENDER_FIELDS and value is not None}
    stray = sorted(set(given) - names)
    try:
        if stray:
            raise ValueError(f"{', '.join('--' + s.replace('_', '-') for s in stray)}: not a "
                             f"parameter of the {family.family} family")
        values = dict(given)
        values.setdefault("texel_channels", values.get("slices_per_pass", 1))
        params = family(**values)
        source = kernels.backproject_source(params)
    except (ValueError, TypeError) as exc:
        print(f"pybp render: {exc}", file=sys.stderr)
        return 2
    if args.output in (None, "-"):
        sys.stdout.write(source)
        return 0
    try:
        path = cache.write_text_new(args.output, source, overwrite=args.overwrite)
    except FileExistsError as exc:
        print(f"pybp render: {exc} (--overwrite)", file=sys.stderr)
        return 2
    print(f"wrote {path} ({params.key()})")
    return 0


def _selected(args, settings=SETTINGS):
    """The settings that the --slices, --interpolation and --storage filters leave."""
    return [(n, i, s) for n, i, s in settings
            if (not args.slices or n in args.slices)
            and (not args.interpolation or i in args.interpolation)
            and (not args.storage or s in args.storage)]


def cmd_bench(args):
    if args.io:
        return _bench_io(args)
    if args.forward or args.iterative:
        if args.cone:
            geometry, slices = cone_geometry(args.size or 512, args.projections,
                                             args.detector), None
        else:
            size = args.size or 2048
            geometry = ParallelGeometry(np.linspace(0, np.pi, args.angles or size,
                                                    endpoint=False), size)
            slices = args.rows or 64
        bench_iterative.run(geometry, slices, device=args.device,
                            repeats=args.repeats, iterations=args.iterations,
                            iterative=args.iterative)
        return 0
    if args.cone:
        bench_cone.run(device=args.device, size=args.size or 512,
                       n_projections=args.projections, detector=args.detector,
                       repeats=args.repeats)
        return 0
    args.size = args.size or 2048
    if args.pipeline:
        bench_pipeline.run(device=args.device, size=args.size, n_angles=args.angles,
                           rows=args.rows or 2048, n_flats=args.flats,
                           interpolation=(args.interpolation or ["linear"])[0],
                           precision=(args.storage or ["float"])[0], repeats=args.repeats,
                           with_silx=not args.no_silx, rings=args.rings,
                           phase=bench_pipeline.BENCH_PHASE if args.phase else None)
        return 0
    if args.hybrid_sweep:
        bench.hybrid_sweep(device=args.device, size=args.size, repeats=args.repeats,
                           settings=_selected(args, bench.HYBRID_SETTINGS))
        return 0
    settings = _selected(args)
    variants = [v for v in bench.VARIANTS if not args.kernels or v[1] in args.kernels]
    rows, silx = bench.run(device=args.device, size=args.size, n_angles=args.angles,
                           repeats=args.repeats, settings=settings, variants=variants,
                           with_silx=not args.no_silx)
    print()
    print(bench.format_table(rows, silx))
    print()
    print("best verified kernel per setting:")
    for (slices, interpolation, storage), r in sorted(bench.best_per_setting(rows).items()):
        share = f", {100 * r['gups'] / r['ceiling']:.0f}% of texture ceiling" if r.get("ceiling") else ""
        if r.get("local_ceiling"):
            share += (f", {100 * r['gups'] / r['local_ceiling']:.0f}% of local-memory ceiling "
                      f"{bench.rate(r['local_ceiling'])}")
        versus = f", {r['gups'] / silx:.2f}x silx" if silx else ""
        print(f"  v{slices} {interpolation:7s} {storage:5s}: {r['kernel']:20s} "
              f"{bench.rate(r['gups']):>7s} GU/s{share}{versus}")
    return 0


def _bench_io(args):
    """``pybp bench --io``: the limits, then the standard cases' bounds on one device
    and on all of them."""
    if args.folder is not None and not Path(args.folder).is_dir():
        raise ValueError(f"--folder: {args.folder} is not a folder")
    if not args.gib > 0:
        raise ValueError(f"--gib: expected a positive size, got {args.gib}")
    if args.json and Path(args.json).exists():
        raise FileExistsError(f"--json: {args.json} exists; give another name (or remove it)")
    size = args.size or 2048
    n_bytes = int(args.gib * 2 ** 30)
    shape = (max(2, n_bytes // (4 * size ** 2)), size, size)
    # before any is timed: the copies' two arrays, the files' volume and its read-back
    checks.check_demo_memory(2 * n_bytes, "copying --gib", "--gib")
    checks.check_demo_memory(8 * int(np.prod(shape, dtype=np.int64)),
                             f"a volume of {shape[0]} slices of {size}^2", "--size")
    bench_io.check_folder(args.folder or tempfile.gettempdir(), 4 * int(np.prod(shape)))
    devices = distributed.device_list(args.devices or "all")
    # the files: --gib of the cases' float32 slices (TIFF's cost is a file's, per slice)
    limits = bench_io.measure(devices, args.folder, n_bytes, shape, args.repeats)
    cases = bench_io.standard_cases(size) + (
        bench_io.standard_cases(size, len(devices)) if len(devices) > 1 else [])
    print(bench_io.report(limits, cases))
    folder = args.folder or tempfile.gettempdir()
    kept = bench_io.keep_writers(folder, limits["files"])
    point = disks.mount(folder)[0]
    if kept is not None:
        counts = ", ".join(f"{form} {n}" for form, n in bench_io.writer_counts(
            limits["files"]).items())
        print(f"writer threads kept for outputs under {point}: {counts} ({kept})")
    else:
        print(f"writer threads not kept for {point}: the files were "
              f"{limits['files']['bytes'] / 2 ** 20:.0f} MiB, under "
              f"{bench_io.KEEP_BYTES >> 20} MiB (--gib)")
    if args.json:
        Path(args.json).write_text(json.dumps(limits, indent=1))
        print(f"wrote {args.json}")
    return 0


def cmd_tune(args):
    if args.cone:
        best = cone_tuning.tune(device=args.device, size=args.size, repeats=args.repeats,
                                budget=args.budget)
        if best is None:
            raise RuntimeError("tune --cone: no parameter set passed its verification")
        print(f"cone-beam profile: {best.key()}")
        return 0
    settings = _selected(args)
    if not settings:
        raise ValueError("--slices/--interpolation/--storage: no setting left to tune")
    try:
        tuning.tune(device=args.device, size=args.size, repeats=args.repeats, settings=settings,
                    families=args.families, budget=args.budget, progress=not args.quiet)
    except KeyboardInterrupt:  # the tuner said what it kept
        return EXIT_INTERRUPTED
    return 0
