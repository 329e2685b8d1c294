"""Cone beam's developers' commands (the cone kind's ``commands``, pybp/cone/kind.py):
bench and tune of its kernels and standard case. Their own module, loaded only when one
of them runs, so that ``pybp reconstruct --geometry`` does not import the benchmarks and
the tuner."""

from __future__ import annotations

from pybp.bench import cone as bench_cone, iterative as bench_iterative
from pybp.tune import cone as cone_tuning


def bench(args):
    """``pybp bench --cone``: FDK's kernels and FDK end to end on the RabbitCT-like case
    (512^3 from 496 x 960 x 1248), or with --forward or --iterative its pair and methods."""
    if args.forward or args.iterative:
        scan = cone_tuning.laminography if args.laminography else cone_tuning.geometry
        given = dict(n_projections=args.projections, detector=args.detector)
        geometry = scan(args.size or 512, pitch=args.pitch,
                        **{k: v for k, v in given.items() if v is not None})
        bench_iterative.run(geometry, None, device=args.device, repeats=args.repeats,
                            iterations=args.iterations, iterative=args.iterative)
        return 0
    if args.pitch is not None or args.laminography:
        raise ValueError("--pitch and --laminography: with --forward or --iterative (FDK's "
                         "bench is the RabbitCT-like case)")
    bench_cone.run(device=args.device, size=args.size or 512,
                   n_projections=args.projections or 496,
                   detector=args.detector or (960, 1248), repeats=args.repeats)
    return 0


def tune(args):
    """``pybp tune --cone``: FDK's kernels searched on this device."""
    best = cone_tuning.tune(device=args.device, size=args.size, repeats=args.repeats,
                            budget=args.budget)
    if best is None:
        raise RuntimeError("tune --cone: no parameter set passed its verification")
    print(f"cone-beam profile: {best.key()}")
    return 0
