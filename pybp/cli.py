"""The ``pybp`` command: devices, demo, render, bench, tune."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import bench, codegen, reference, tuning
from .device import devices
from .filters import FILTERS
from .geometry import Geometry
from .imagefile import write_slice
from .params import (CACHE_MODES, CONSTANT_MODES, INTERPOLATIONS, KERNELS, OFFSET_CACHES,
                     ROUNDINGS, SETTINGS, SLICES_PER_PASS, SOURCES, STORAGES, AluParams,
                     TextureParams)
from .runner import Backprojector


def cmd_devices(args):
    found = devices()
    if not found:
        print("no OpenCL device found; `pip install pybp[pocl]` adds a CPU device")
        return 1
    for d in found:
        print(d.summary())
    return 0


def cmd_demo(args):
    n = args.size
    angles = np.linspace(0, np.pi, args.angles or n, endpoint=False)
    geometry = Geometry.create(n, angles)
    sinogram = reference.shepp_logan_radon(geometry).astype(np.float32)
    start = time.perf_counter()
    bp = Backprojector(n, angles, device=args.device, filter=args.filter,
                       interpolation=args.interpolation, precision=args.precision,
                       slices_per_pass=1)
    slice_ = bp(sinogram)
    wall = time.perf_counter() - start
    phantom = reference.shepp_logan_image(geometry)
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
    try:
        path = write_slice(args.output, slice_, low=0.0, high=1.0, overwrite=args.overwrite)
    except (FileExistsError, ValueError, RuntimeError) as exc:
        print(f"pybp demo: {exc}", file=sys.stderr)
        return 2
    print(f"slice:   written to {path}")
    return 0


def cmd_render(args):
    common = dict(kernel=args.kernel, slices_per_pass=args.slices, interpolation=args.interpolation,
                  storage=args.storage, texel_channels=args.texel_channels or args.slices,
                  source=args.source, unroll=args.unroll)
    try:
        if args.kernel == "alu":
            params = AluParams(**common, square=args.square, items=args.items,
                               cached_projections=args.cached_projections,
                               items_per_row=args.items_per_row, cache=args.cache,
                               rounding=args.rounding, offset_cache=args.offset_cache)
        else:
            params = TextureParams(**common, constants=args.constants)
        source = codegen.render(params)
    except ValueError as exc:
        print(f"pybp render: {exc}", file=sys.stderr)
        return 2
    if args.output in (None, "-"):
        sys.stdout.write(source)
        return 0
    try:
        path = codegen.write_text_new(args.output, source, overwrite=args.overwrite)
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
        share = f", {100 * r['gups'] / r['ceiling']:.0f}% of ceiling" if r.get("ceiling") else ""
        versus = f", {r['gups'] / silx:.2f}x silx" if silx else ""
        print(f"  v{slices} {interpolation:7s} {storage:5s}: {r['kernel']:20s} "
              f"{bench.rate(r['gups']):>7s} GU/s{share}{versus}")
    return 0


def cmd_tune(args):
    settings = _selected(args)
    tuning.tune(device=args.device, size=args.size, repeats=args.repeats, settings=settings,
                families=args.families)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="pybp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("devices", help="list OpenCL devices").set_defaults(func=cmd_devices)

    demo = sub.add_parser("demo", help="reconstruct the built-in phantom, print speed and error")
    demo.add_argument("--size", type=int, default=512, help="detector bins and slice width")
    demo.add_argument("--angles", type=int, default=None, help="projections (default: size)")
    demo.add_argument("--filter", choices=FILTERS, default="ramp")
    demo.add_argument("--interpolation", choices=INTERPOLATIONS, default="linear")
    demo.add_argument("--precision", choices=STORAGES, default="float")
    demo.add_argument("--device", default=None, help="index or name substring (see `pybp devices`)")
    demo.add_argument("--output", default="pybp-demo.png", help=".png, .npy or .tif")
    demo.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    demo.set_defaults(func=cmd_demo)

    render = sub.add_parser("render", help="write a kernel's OpenCL source")
    render.add_argument("--kernel", choices=KERNELS, default="standard")
    render.add_argument("--slices", type=int, choices=SLICES_PER_PASS, default=1)
    render.add_argument("--interpolation", choices=INTERPOLATIONS, default="linear")
    render.add_argument("--storage", choices=STORAGES, default="float")
    render.add_argument("--texel-channels", type=int, choices=(1, 2, 4), default=None)
    render.add_argument("--source", choices=SOURCES, default="image")
    render.add_argument("--constants", choices=CONSTANT_MODES, default="constant",
                        help="multiproj: projection constants in __constant or local memory")
    alu = AluParams()
    render.add_argument("--square", type=int, default=alu.square, help="alu: n_s")
    render.add_argument("--items", type=int, default=alu.items, help="alu: work-group size")
    render.add_argument("--cached-projections", type=int, default=alu.cached_projections,
                        help="alu: s_d")
    render.add_argument("--items-per-row", type=int, default=alu.items_per_row, help="alu: s_t")
    render.add_argument("--cache", choices=CACHE_MODES, default=alu.cache, help="alu")
    render.add_argument("--rounding", choices=ROUNDINGS, default=alu.rounding, help="alu")
    render.add_argument("--offset-cache", choices=OFFSET_CACHES, default=alu.offset_cache,
                        help="alu: hm (per projection) or hx (per pixel column, Sect. 6.8)")
    render.add_argument("--unroll", type=int, default=4)
    render.add_argument("-o", "--output", default=None, help="file (default: standard output)")
    render.add_argument("--overwrite", action="store_true")
    render.set_defaults(func=cmd_render)

    bench_ = sub.add_parser("bench", help="GU/s of every kernel and setting, beside silx")
    bench_.add_argument("--size", type=int, default=2048, help="bins and slice width (2048: the paper's case)")
    bench_.add_argument("--angles", type=int, default=None, help="projections (default: size)")
    bench_.add_argument("--repeats", type=int, default=5)
    bench_.add_argument("--device", default=None)
    bench_.add_argument("--kernels", nargs="*", choices=KERNELS)
    bench_.add_argument("--slices", nargs="*", type=int, choices=SLICES_PER_PASS)
    bench_.add_argument("--interpolation", nargs="*", choices=INTERPOLATIONS)
    bench_.add_argument("--storage", nargs="*", choices=STORAGES)
    bench_.add_argument("--no-silx", action="store_true", help="skip the silx yardstick")
    bench_.add_argument("--hybrid-sweep", action="store_true",
                        help="only: GU/s of the hybrid mode for each texture/ALU split")
    bench_.set_defaults(func=cmd_bench)

    tune = sub.add_parser("tune", help="search kernel parameters for this device; save a profile")
    tune.add_argument("--size", type=int, default=2048)
    tune.add_argument("--repeats", type=int, default=5)
    tune.add_argument("--device", default=None)
    tune.add_argument("--families", nargs="*", choices=("texture", "alu"), default=("texture", "alu"))
    tune.add_argument("--slices", nargs="*", type=int, choices=SLICES_PER_PASS)
    tune.add_argument("--interpolation", nargs="*", choices=INTERPOLATIONS)
    tune.add_argument("--storage", nargs="*", choices=STORAGES)
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    for name in ("size", "angles", "repeats"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            print(f"pybp {args.command}: --{name} must be positive, got {value}", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
