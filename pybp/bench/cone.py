"""``pybp bench --cone``: the RabbitCT-like case of the cone-beam studies (a circular
orbit, source-isocentre 750 mm, source-detector 1200 mm, 0.3 mm pixels, a 256 mm
field of view: 0.5 mm voxels at 512^3), the case ASTRA's FDK_CUDA is measured on
(docs/benchmarks.md's history).

For each parameter set: verified first against the float64 reference (the exact or
texture rule of pybp/parallel/verify.py), then the FDK kernel alone, GUPS = nx * ny *
nz * n_projections / s of its launches (median of ``repeats`` after a warm-up), beside
the fetch-only ceiling of the same run: the texture family with float positions and no
weight, the same voxels per item, projections per pass and work-group, so the same
fetches with the least arithmetic around them. Then FDK end to end with the fastest
verified set: projections in host memory (float32 and uint16) to the volume in host
memory, by a kept :class:`pybp.ConeBackprojector` (its first call, with the set-up,
reported apart); and the same volume with a memory limit of a quarter of it, in
slabs, checked bit for bit against one piece.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pyopencl as cl

from pybp.api.cone import ConeBackprojector
from pybp.cl.device import describe, open_device
from pybp.cone.params import ConeParams
from pybp.tune.cone import geometry, kernel_seconds, verify

def candidates(device) -> list:
    """The parameter sets timed: both families, both kinds of positions (double where
    the device has them), a few shapes."""
    positions = ("double", "float") if "cl_khr_fp64" in device.extensions else ("float",)
    families = ("exact", "texture") if device.image_support else ("exact",)
    sets = []
    for family in families:
        for position in positions:
            for vpi, ppp, group in ((4, 8, (32, 8)), (8, 16, (16, 16)), (16, 16, (32, 8)),
                                    (8, 32, (32, 8))):
                sets.append(ConeParams(family, vpi, ppp, group, position))
    return sets


def projections(g, dtype) -> np.ndarray:
    """Random projections of the scan: float32 line integrals, or uint16 values."""
    rng = np.random.default_rng(2)
    shape = (g.n_angles,) + g.detector_shape
    return rng.random(shape, np.float32) * 3 if dtype == np.float32 else \
        rng.integers(0, 4096, shape, np.uint16)


def end_to_end(g, params, queue, repeats, projections, memory_limit=None) -> dict:
    """FDK from ``projections`` in host memory to the volume in host memory: the first
    call's set-up, then the median of ``repeats`` calls of a kept
    :class:`ConeBackprojector`."""
    out = np.empty(g.volume_shape, np.float32)
    out.fill(0)  # the pages exist before the clock starts, as for a kept output
    tick = time.perf_counter()
    bp = ConeBackprojector(g, params, filter="ramp", memory_limit=memory_limit, queue=queue)
    setup = time.perf_counter() - tick
    try:
        bp(projections, out)
        times = []
        for _ in range(repeats):
            tick = time.perf_counter()
            bp(projections, out)
            times.append(time.perf_counter() - tick)
        return {"setup": setup, "seconds": float(np.median(times)) if times else None,
                "slabs": len(bp.plan.slabs),
                "volume": out}
    finally:
        bp.close()


def run(device=None, size=512, n_projections=496, detector=(960, 1248), repeats=5,
        sets=None, end_to_end_repeats=3, split=4, log=print):
    """Print the tables; return the rows."""
    cl_device, context, _ = open_device(device)
    d = describe(cl_device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    g = geometry(size, n_projections, detector)
    log(f"{d.name}: FDK of {size}^3 from {n_projections} projections of "
        f"{detector[0]} x {detector[1]} ({g.updates() / 1e9:.3g} G voxel updates)")
    log("")
    log("| family | positions | voxels/item | projections/pass | group | verified | GUPS | s | "
        "ceiling GUPS | of ceiling |")
    log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for params in sets or candidates(d):
        rule, error, passed = verify(params, queue)
        row = {"params": params, "rule": rule, "error": error, "passed": passed}
        if passed:
            row["seconds"] = kernel_seconds(g, params, queue, repeats)
            ceiling = ConeParams("texture", params.voxels_per_item, params.projections_per_pass,
                                 params.group, "float") if d.image_support else params
            row["ceiling"] = kernel_seconds(g, ceiling, queue, repeats, distance_weight=False)
            gups, top = g.updates() / row["seconds"] * 1e-9, g.updates() / row["ceiling"] * 1e-9
            row["gups"] = gups
            log(f"| {params.family} | {params.positions} | {params.voxels_per_item} | "
                f"{params.projections_per_pass} | {params.group[0]}x{params.group[1]} | {rule} "
                f"{error:.1e} | {gups:.3g} | {row['seconds']:.3f} | {top:.3g} | {gups / top:.0%} |")
        else:
            log(f"| {params.family} | {params.positions} | {params.voxels_per_item} | "
                f"{params.projections_per_pass} | {params.group[0]}x{params.group[1]} | "
                f"FAILED {rule} {error:.1e} | - | - | - | - |")
        rows.append(row)
    best = {}
    for row in rows:
        if row["passed"] and row["gups"] > best.get(row["params"].family, {"gups": 0})["gups"]:
            best[row["params"].family] = row
    log("")
    for family, row in best.items():
        log(f"best {family}: {row['gups']:.3g} GUPS ({row['params'].key()})")
    if not best or not end_to_end_repeats:
        return rows
    fastest = max(best.values(), key=lambda r: r["gups"])["params"]
    log("")
    log(f"FDK end to end, host memory to host memory ({fastest.key()}):")
    log("| input | set-up s | s (median) | GUPS | slabs |")
    log("| --- | --- | --- | --- | --- |")
    whole, data = None, {}
    for dtype in (np.float32, np.uint16):
        data[dtype] = projections(g, dtype)
        r = end_to_end(g, fastest, queue, end_to_end_repeats, data[dtype])
        whole = r["volume"] if dtype == np.float32 else whole
        log(f"| {np.dtype(dtype).name} | {r['setup']:.2f} | {r['seconds']:.3f} | "
            f"{g.updates() / r['seconds'] * 1e-9:.3g} | {r['slabs']} |")
    if split:
        _split(g, fastest, queue, end_to_end_repeats, split, data[np.float32], whole, log)
    return rows


def _split(g, params, queue, repeats, split, data, whole, log):
    """The end-to-end case with a memory limit of 1/``split`` of the volume (fewer
    projections per pass where their buffers do not fit beside a slab), against one
    piece of the same parameters, bit for bit."""
    limit = 4 * int(np.prod(g.volume_shape)) // split
    original = params
    while True:
        try:
            r = end_to_end(g, params, queue, repeats, data, memory_limit=limit)
            break
        except ValueError as error:
            if params.projections_per_pass == 1:
                log(f"| a memory limit of 1/{split} of the volume: {error} | | | | |")
                return
            params = replace(params, projections_per_pass=params.projections_per_pass // 2)
    if whole is None or params != original:
        whole = end_to_end(g, params, queue, 0, data)["volume"]
    same = "yes" if np.array_equal(r["volume"], whole) else "NO"
    log(f"| float32, memory limit {limit / 2**20:.3g} MiB (1/{split} of the volume), "
        f"{params.projections_per_pass} projections per pass | {r['setup']:.2f} | "
        f"{r['seconds']:.3f} | {g.updates() / r['seconds'] * 1e-9:.3g} | {r['slabs']} "
        f"(bit for bit as one piece: {same}) |")
