"""Cone beam's developers' commands (the cone kind's ``commands``, pybp/cone/kind.py):
bench and tune of its kernels and standard case. Their own module, loaded only when one
of them runs, so that ``pybp reconstruct --geometry`` does not import the benchmarks and
the tuner."""

from __future__ import annotations

from pybp.bench import cone as bench_cone, iterative as bench_iterative
from pybp.tune import cone as cone_tuning


def bench(args):
    """``pybp bench --cone``: FDK's kernels and FDK end to end on the RabbitCT-like case
    (512^3 from 496 x 960 x 1248), or with --forward or --iterative its pair and methods
    (a voxel ``--pitch`` pixels wide at the isocentre)."""
    if args.forward or args.iterative:
        return _pair(args, cone_tuning.geometry)
    if args.pitch is not None:
        raise ValueError("--pitch: with --forward or --iterative (FDK's bench is the "
                         "RabbitCT-like case)")
    bench_cone.run(device=args.device, size=args.size or 512,
                   n_projections=args.projections or 496,
                   detector=args.detector or (960, 1248), repeats=args.repeats)
    return 0


def bench_laminography(args):
    """``pybp bench --laminography --forward`` or ``--iterative``: the pair and methods of
    the bench's laminography scan (:func:`pybp.tune.cone.laminography`), which has no
    filtered back-projection."""
    if not (args.forward or args.iterative):
        raise ValueError("--laminography: with --forward or --iterative (the pair and its "
                         "methods; laminography has no filtered back-projection)")
    return _pair(args, cone_tuning.laminography)


def _pair(args, scan):
    """``pybp bench --forward`` or ``--iterative`` of ``scan(size, ...)``: the command's
    --projections, --detector and --pitch where given, else the scan's defaults."""
    given = dict(n_projections=args.projections, detector=args.detector, pitch=args.pitch)
    geometry = scan(args.size or 512, **{k: v for k, v in given.items() if v is not None})
    bench_iterative.run(geometry, None, device=args.device, repeats=args.repeats,
                        iterations=args.iterations, iterative=args.iterative)
    return 0


def tune(args):
    """``pybp tune --cone``: FDK's kernels searched on this device."""
    best = cone_tuning.tune(device=args.device, size=args.size, repeats=args.repeats,
                            budget=args.budget)
    if best is None:
        raise RuntimeError("tune --cone: no parameter set passed its verification")
    print(f"cone-beam profile: {best.key()}")
    return 0
