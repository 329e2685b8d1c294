"""Parallel beam's developers' commands (the parallel kind's ``commands``,
pybp/parallel/kind.py): demo, render, bench and tune of its kernels and standard case.
Loaded only when one of them runs."""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import fields as dataclass_fields
from pathlib import Path

import numpy as np

from pybp import checks, phantoms
from pybp.api.sinograms import Backprojector
from pybp.bench import iterative as bench_iterative
from pybp.bench import kernels as bench_kernels
from pybp.bench import volume as bench_pipeline
from pybp.cl import cache
from pybp.cl.device import select_device
from pybp.cli.writing import EXIT_INTERRUPTED
from pybp.geometry.parallel import ParallelGeometry
from pybp.io.demo import phantom_scan, write_dxchange
from pybp.io.images import SLICE_SUFFIXES, write_slice
from pybp.io.readers import HDF5_SUFFIXES
from pybp.io.writers import check_output_file
from pybp.parallel import kernels, speed
from pybp.parallel.params import SETTINGS, AluParams, family_of
from pybp.tune import search as tuning


def write_scan(args):
    """``pybp demo --write-scan``: a DXchange file of the 3-D phantom."""
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


def demo(args):
    """``pybp demo``: the phantom's FBP (or, with --write-scan, its scan on disk)."""
    if args.write_scan:
        return write_scan(args)
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
    geometry = ParallelGeometry.create(n, angles)
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
RENDER_FIELDS = {f.name for f in dataclass_fields(AluParams)}

def render(args):
    """``pybp render``: a parallel-beam parameter set's OpenCL source."""
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


def bench(args):
    """``pybp bench``: the kernels, the pipeline, the pair and the methods of parallel
    beam's standard case (2048 angles x 2048^2)."""
    if args.pitch is not None:
        raise ValueError("--pitch: with --cone or --laminography (a voxel's side in pixels "
                         "at the isocentre)")
    if args.forward or args.iterative:
        size = args.size or 2048
        geometry = ParallelGeometry(np.linspace(0, np.pi, args.angles or size,
                                                endpoint=False), size)
        bench_iterative.run(geometry, args.rows or 64, device=args.device,
                            repeats=args.repeats, iterations=args.iterations,
                            iterative=args.iterative)
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
        bench_kernels.hybrid_sweep(device=args.device, size=args.size, repeats=args.repeats,
                                   settings=_selected(args, bench_kernels.HYBRID_SETTINGS))
        return 0
    settings = _selected(args)
    variants = [v for v in bench_kernels.VARIANTS if not args.kernels or v[1] in args.kernels]
    rows, silx = bench_kernels.run(device=args.device, size=args.size, n_angles=args.angles,
                                   repeats=args.repeats, settings=settings, variants=variants,
                                   with_silx=not args.no_silx)
    print()
    print(bench_kernels.format_table(rows, silx))
    print()
    print("best verified kernel per setting:")
    best = bench_kernels.best_per_setting(rows)
    for (slices, interpolation, storage), r in sorted(best.items()):
        share = f", {100 * r['gups'] / r['ceiling']:.0f}% of texture ceiling" if r.get("ceiling") else ""
        if r.get("local_ceiling"):
            share += (f", {100 * r['gups'] / r['local_ceiling']:.0f}% of local-memory ceiling "
                      f"{bench_kernels.rate(r['local_ceiling'])}")
        versus = f", {r['gups'] / silx:.2f}x silx" if silx else ""
        print(f"  v{slices} {interpolation:7s} {storage:5s}: {r['kernel']:20s} "
              f"{bench_kernels.rate(r['gups']):>7s} GU/s{share}{versus}")
    return 0


def tune(args):
    """``pybp tune``: parallel beam's kernels searched on this device."""
    settings = _selected(args)
    if not settings:
        raise ValueError("--slices/--interpolation/--storage: no setting left to tune")
    try:
        tuning.tune(device=args.device, size=args.size, repeats=args.repeats, settings=settings,
                    families=args.families, budget=args.budget, progress=not args.quiet)
    except KeyboardInterrupt:  # the tuner said what it kept
        return EXIT_INTERRUPTED
    return 0
