"""What ring removal and phase retrieval add to a whole volume, each alone and together,
against the plain FBP of the same scan in the same run (``pybp bench --pipeline`` does
one case at a time): wall time, the share of the staging, and device time per stage.

    python tuning/preprocess_cost.py --size 2048 --repeats 2
"""

import argparse
import time

import numpy as np

from pybp.api.volumes import reconstruct
from pybp.bench.volume import BENCH_PHASE, STAGES, make_scan

CASES = {"plain": {}, "phase": dict(phase=BENCH_PHASE), "sort": dict(rings="sort"),
         "fw": dict(rings="fw", ring_options=dict(level=4)),
         "sort+phase": dict(rings="sort", phase=BENCH_PHASE)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2, help="median of")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    rows = args.rows or args.size
    angles, projections, flats, darks = make_scan(args.size, args.size, rows, 20)
    out = np.empty((rows, args.size, args.size), np.float32)
    out.fill(0)  # touched, as a caller's array is: no page faults on the clock
    base = None
    print(f"{args.size} angles x {rows} rows x {args.size} bins; median of {args.repeats}")
    for name in args.cases:
        options = dict(CASES[name], device=args.device, progress=False)
        reconstruct(projections, angles, flats, darks, rows=(0, min(rows, 64)), **options)
        walls, kept = [], None
        for _ in range(args.repeats):
            stats = {}
            tick = time.perf_counter()
            reconstruct(projections, angles, flats, darks, out=out, stats=stats, **options)
            walls.append(time.perf_counter() - tick)
            kept = stats if kept is None or walls[-1] <= min(walls) else kept
        wall = float(np.median(walls))
        base = wall if name == "plain" else base
        added = f" (+{100 * (wall / base - 1):.0f}%)" if base and name != "plain" else ""
        device = "  ".join(f"{s} {kept[f'device_{s}']:.2f}" for s in STAGES
                           if kept.get(f"device_{s}"))
        print(f"{name:11s} {wall:6.2f} s{added}; chunks of {kept['chunk_slices']} x "
              f"{kept['slots']}; plan {kept['setup_plan']:.2f} s, staging {kept['setup_staging']:.2f} s, "
              f"stream {kept['setup_stream']:.2f} s, release {kept['setup_release']:.2f} s; "
              f"device: {device}", flush=True)


if __name__ == "__main__":
    main()
