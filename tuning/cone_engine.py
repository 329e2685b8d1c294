#!/usr/bin/env python3
"""Cone-beam FDK host to host through the public calls, old code beside new:

    PYTHONPATH=OLD_TREE python3 tuning/cone_engine.py old [--multi] [--big]
    python3 tuning/cone_engine.py new [--multi] [--big]

512^3 from 496 float32 projections of 960 x 1248 on device 0: ``pybp.fdk`` (one call,
setup included), a kept ``ConeBackprojector`` in one piece and under a memory limit of
a quarter of the volume (whether it equals one piece bit for bit; its first call,
which pins the store of filtered projections; and, where the code has one, the same
without the store: each slab filtering its windows again), and ``pybp.fdk`` of
uint16 counts with flats; each the median of 5 after a warm-up. ``--multi``: 1024^3
from the same projections with ``devices=[0]`` and ``devices="all"`` (median of 3,
bit for bit). ``--big``: 2048^3 from 2048 projections of 2048 x 2048 (32 GiB in, 32
GiB out), one GPU twice (the first run pays the host's first touches) and all GPUs
once, bit for bit. ``--parallel``: parallel beam unchanged? 256 slices of 2048^2 from
1500 angles through ``pybp.reconstruct`` (median of 3). Prints one line of JSON:
seconds (median, then every run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

if "PYTHONPATH" not in os.environ:  # this tree, unless another is given
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pybp  # noqa: E402
from pybp.tune.cone import geometry  # noqa: E402


def median(call, runs=5):
    call()
    times = []
    for _ in range(runs):
        tick = time.perf_counter()
        call()
        times.append(time.perf_counter() - tick)
    return round(float(np.median(times)), 4), [round(t, 4) for t in times]


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "this"
    found = {}
    g = geometry(512, 496, (960, 1248))
    p = np.random.default_rng(0).random((g.n_angles,) + g.detector_shape, np.float32)
    out = np.empty(g.volume_shape, np.float32)
    found["fdk512"] = median(lambda: pybp.fdk(p, g, out=out, progress=False, device=0))
    one = out.copy()
    with pybp.ConeBackprojector(g, filter="ramp", device=0) as bp:
        found["kept512"] = median(lambda: bp(p, out))
    with pybp.ConeBackprojector(g, filter="ramp", memory_limit=512 ** 3, device=0) as bp:
        tick = time.perf_counter()
        bp(p, out)  # the first call pins the store of filtered projections, if any
        found["quarter_first"] = round(time.perf_counter() - tick, 4)
        found["quarter"] = median(lambda: bp(p, out))
        found["quarter_slabs"] = len(bp.plan.slabs)
        found["quarter_equal"] = bool(np.array_equal(out, one))
        found["quarter_store_bytes"] = getattr(bp, "store_bytes", None)
    if hasattr(bp, "store_bytes"):  # the same without the store: each slab filters again
        from pybp.cone import store
        stored, store.stored = store.stored, lambda *args, **options: None
        with pybp.ConeBackprojector(g, filter="ramp", memory_limit=512 ** 3, device=0) as bp:
            found["quarter_no_store"] = median(lambda: bp(p, out))
            found["quarter_no_store_slabs"] = len(bp.plan.slabs)
            found["quarter_no_store_equal"] = bool(np.array_equal(out, one))
        store.stored = stored
    counts = (np.exp(-p) * 4000).astype(np.uint16)
    flats = np.full((4, 960, 1248), 4000, np.uint16)
    found["fdk512_counts"] = median(lambda: pybp.fdk(counts, g, flats=flats, out=out,
                                                     progress=False, device=0))
    if "--multi" in sys.argv:
        g2 = geometry(1024, 496, (960, 1248))
        out2 = np.empty(g2.volume_shape, np.float32)
        found["fdk1024_1"] = median(lambda: pybp.fdk(p, g2, out=out2, progress=False,
                                                     devices=[0]), 3)
        want = out2.copy()
        found["fdk1024_all"] = median(lambda: pybp.fdk(p, g2, out=out2, progress=False,
                                                       devices="all"), 3)
        found["fdk1024_equal"] = bool(np.array_equal(out2, want))
        del out2, want
    if "--big" in sys.argv:
        g3 = geometry(2048, 2048, (2048, 2048))
        p3 = np.full((g3.n_angles,) + g3.detector_shape, 0.25, np.float32)
        out3 = np.zeros(g3.volume_shape, np.float32)
        want = None
        for devices in ([0], [0], "all"):
            tick = time.perf_counter()
            pybp.fdk(p3, g3, out=out3, devices=devices, progress=False)
            found.setdefault(f"fdk2048_{devices}", []).append(round(time.perf_counter() - tick, 3))
            if want is None:
                want = out3.copy()
        found["fdk2048_equal"] = bool(np.array_equal(out3, want))
    if "--parallel" in sys.argv:
        angles = np.linspace(0, np.pi, 1500, endpoint=False)
        sinograms = np.random.default_rng(0).random((1500, 256, 2048), np.float32)
        slices = np.empty((256, 2048, 2048), np.float32)
        found["parallel"] = median(lambda: pybp.reconstruct(
            sinograms, angles, center=1024, out=slices, progress=False, device=0), 3)
    print(tag, json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
