#!/usr/bin/env python3
"""Where cone beam's slabs spend the host's time (512^3 from 496 float32 projections of
960 x 1248, device 0), and what the same copies take alone:

    python3 tuning/cone_slab_copies.py [--slots]

For one piece and a memory limit of a quarter of the volume, after a warm-up: the
wall time, the seconds the stream's reader spent copying windows into page-locked
staging (and how many copies), the store's fill (where there is one), the slabs'
streams and read-backs, and the device time of each stage (the slabs', the fill's).
``--slots``: the same limit with 2 or 3 chunks in flight in the fill and the slabs. Then 16
projections' windows of 960 and of 176 rows copied into page-locked memory alone, as the
reader copies them (over its pool of threads), and by one thread.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pybp  # noqa: E402
from pybp.cl.device import open_device  # noqa: E402
from pybp.cl.staging import Staging  # noqa: E402
from pybp.cone import backproject, store  # noqa: E402
from pybp.stream import pipeline  # noqa: E402
from pybp.stream.sources import COPY_THREADS  # noqa: E402
from pybp.tune.cone import geometry  # noqa: E402

SECONDS, CALLS = defaultdict(float), defaultdict(int)


def timed(owner, name, key):
    call = getattr(owner, name)

    def wrapped(*args, **kwargs):
        tick = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            SECONDS[key] += time.perf_counter() - tick
            CALLS[key] += 1
    setattr(owner, name, wrapped)


def main():
    copier = backproject.copier

    def timed_copier(pool):
        copy = copier(pool)

        def run(destination, window):
            tick = time.perf_counter()
            copy(destination, window)
            SECONDS["copy"] += time.perf_counter() - tick
            CALLS["copy"] += 1
        return run

    backproject.copier = timed_copier
    timed(pipeline, "stream", "streams")
    timed(backproject.SlabRun, "end", "read-backs")
    timed(store.StoreFill, "run", "fill")
    g = geometry(512, 496, (960, 1248))
    data = np.random.default_rng(0).random((g.n_angles,) + g.detector_shape, np.float32)
    out = np.empty(g.volume_shape, np.float32)
    for limit in (None, 512 ** 3):
        with pybp.ConeBackprojector(g, filter="ramp", memory_limit=limit, device=0) as bp:
            bp(data, out)
            executor = bp._recipe.executor
            SECONDS.clear()
            CALLS.clear()
            executor.stage_seconds.clear()
            if bp._fill is not None:
                bp._fill.executor.stage_seconds.clear()
            tick = time.perf_counter()
            bp(data, out)
            wall = time.perf_counter() - tick
            plan = bp.plan
            rows = sum(n * count for slab in plan.slabs
                       for (_, count), (_, n) in zip(plan.passes, slab.windows))
            fill = {} if bp._fill is None else bp._fill.executor.stage_seconds
            print(f"limit {limit}: {len(plan.slabs)} slabs, rows {rows / (g.n_angles * 960):.2f}x, "
                  f"store {bp.store_bytes / 2**30:.2f} GiB, wall {wall:.3f} s; host s "
                  f"{dict((k, round(v, 3)) for k, v in SECONDS.items())} calls {dict(CALLS)}; "
                  f"device s {dict((k, round(v, 3)) for k, v in executor.stage_seconds.items())}"
                  f", the fill's {dict((k, round(v, 3)) for k, v in fill.items())}", flush=True)
    if "--slots" in sys.argv:  # chunks in flight of the store's fill and of the slabs
        for fill_slots, pass_slots in ((2, 2), (3, 2), (2, 3)):
            store.FILL_SLOTS, backproject.PASS_SLOTS = fill_slots, pass_slots
            with pybp.ConeBackprojector(g, filter="ramp", memory_limit=512 ** 3, device=0) as bp:
                bp(data, out)
                times = []
                for _ in range(5):
                    tick = time.perf_counter()
                    bp(data, out)
                    times.append(time.perf_counter() - tick)
                print(f"fill slots {fill_slots}, pass slots {pass_slots}: {len(bp.plan.slabs)} "
                      f"slabs, fill chunks of {bp._fill.memory.chunk_slices}, median "
                      f"{np.median(times):.3f} s", flush=True)
        store.FILL_SLOTS, backproject.PASS_SLOTS = 2, 2
    _, context, _ = open_device(0)
    staging = Staging(cl.CommandQueue(context))
    for rows in (960, 176):
        first = 0 if rows == 960 else 100
        target = staging.array(16 * rows * 1248, np.float32).reshape(16, rows, 1248)
        with ThreadPoolExecutor(COPY_THREADS) as pool:
            for name, copy in (
                    ("the reader's copy", lambda a: backproject.copier(pool)(
                        target, backproject.Window(data, a, 16, slice(first, first + rows)))),
                    ("one thread", lambda a: np.copyto(target, data[a:a + 16, first:first + rows]))):
                for a in range(0, 480, 16):
                    copy(a)
                tick = time.perf_counter()
                for a in range(0, 480, 16):
                    copy(a)
                seconds = time.perf_counter() - tick
                print(f"{rows} rows, {name}: {seconds / 30 * 1e3:.2f} ms a copy, "
                      f"{target.nbytes * 30 / seconds / 1e9:.1f} GB/s", flush=True)
    staging.release()


if __name__ == "__main__":
    main()
