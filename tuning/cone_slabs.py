#!/usr/bin/env python3
"""Where the time of cone-beam FDK in slabs goes (host memory to host memory).

    python3 tuning/cone_slabs.py [--size 512] [--splits 1 2 4 8] [--repeats 3]

For one piece and for memory limits of 1/SPLIT of the volume: the wall time (median
after a warm-up), the slabs, the detector rows uploaded over those of one piece, and
the device time of each stage and transfer (the executor's profiling queues), beside
the bandwidth of one page-locked upload of 1 GiB on the same device. What the slab
schedule costs is read from these, not guessed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pybp.api.cone import ConeBackprojector  # noqa: E402
from pybp.cl.device import open_device  # noqa: E402
from pybp.cl.staging import Staging  # noqa: E402
from pybp.tune.cone import geometry  # noqa: E402

def upload_bandwidth(context) -> float:
    queue = cl.CommandQueue(context)
    staging = Staging(queue)
    host = staging.array(1 << 28, np.float32)
    host[:] = 1
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, host.nbytes)
    cl.enqueue_copy(queue, buffer, host)
    queue.finish()
    tick = time.perf_counter()
    for _ in range(3):
        cl.enqueue_copy(queue, buffer, host)
    queue.finish()
    seconds = (time.perf_counter() - tick) / 3
    staging.release()
    return host.nbytes / seconds * 1e-9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--projections", type=int, default=496)
    parser.add_argument("--detector", type=int, nargs=2, default=[960, 1248])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    cl_device, context, _ = open_device(args.device)
    g = geometry(args.size, args.projections, tuple(args.detector))
    data = np.random.default_rng(0).random((g.n_angles,) + g.detector_shape, np.float32)
    out = np.empty(g.volume_shape, np.float32)
    print(f"{cl_device.name}: FDK {args.size}^3 from {g.n_angles} x {g.detector_shape}; "
          f"a page-locked upload of 1 GiB: {upload_bandwidth(context):.1f} GB/s")
    stages = ("upload", "preweight", "filter", "backproject")
    print("| limit | slabs | rows uploaded | wall s | "
          + " | ".join(f"device: {name} s" for name in stages) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in stages) + " |")
    volume_bytes = 4 * int(np.prod(g.volume_shape))
    for split in args.splits:
        limit = None if split == 1 else volume_bytes // split
        bp = ConeBackprojector(g, filter="ramp", memory_limit=limit, context=context)
        try:
            plan = bp.plan
            rows = sum(n * count for slab in plan.slabs
                       for (_, count), (_, n) in zip(plan.passes, slab.windows))
            bp(data, out)  # warm-up
            walls, devices = [], []
            executor = bp._recipe.executor
            for _ in range(args.repeats):
                executor.stage_seconds.clear()
                tick = time.perf_counter()
                bp(data, out)
                walls.append(time.perf_counter() - tick)
                devices.append(dict(executor.stage_seconds))
            k = int(np.argsort(walls)[len(walls) // 2])
            print(f"| {'none' if limit is None else f'{limit >> 20} MiB'} | {len(plan.slabs)} | "
                  f"{rows / (g.n_angles * g.detector_shape[0]):.2f}x | {walls[k]:.3f} | "
                  + " | ".join(f"{devices[k].get(name, 0):.3f}" for name in stages) + " |",
                  flush=True)
        finally:
            bp.close()


if __name__ == "__main__":
    main()
