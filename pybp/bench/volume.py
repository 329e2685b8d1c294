"""``pybp bench --pipeline``: a whole volume from projections in host memory to slices
in host memory (docs/design.md, section 5), beside the kernel-only speed of the same settings
and silx's ``filtered_backprojection`` on the same data, in one run.

The scan: ``n_angles`` projections of ``rows`` x ``size`` uint16 counts (the
Shepp-Logan phantom's sinogram, attenuated between a dark level and a flat level, with
Poisson-like noise; 16 distinct rows repeated), with ``n_flats`` flats and darks. The
volume: ``rows`` float32 slices of ``size`` x ``size``, into an array allocated and
touched before the clock starts (as a caller's output array is).
"""

from __future__ import annotations

import time

import numpy as np

from pybp import phantoms
from pybp.stream import sources
from pybp.bench.kernels import rate, silx_platform_device
from pybp.geometry.parallel import ParallelGeometry
from pybp.api.sinograms import Backprojector
from pybp.tune.search import gups
from pybp.api.volumes import reconstruct

DISTINCT_ROWS = 16
STAGES = ("upload", "normalise", "phase", "rings", "filter", "half", "pack", "backproject",
          "download")
# The Paganin case of ``--phase``: a filter 5.1 pixels long, margins of 77 rows.
BENCH_PHASE = dict(delta_beta=200.0, energy=25.0, distance=0.3, pixel_size=3e-6)


def make_scan(size, n_angles, rows, n_flats, seed=0):
    """``(angles, projections, flats, darks)`` as described in the module docstring."""
    rng = np.random.default_rng(seed)
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    sinogram = phantoms.shepp_logan_radon(ParallelGeometry.create(size, angles)) * (4.0 / size)
    dark, flat = 100.0, 20000.0
    distinct = min(rows, DISTINCT_ROWS)
    base = np.empty((n_angles, distinct, size), np.uint16)
    for r in range(distinct):
        counts = dark + (flat - dark) * np.exp(-sinogram * (0.5 + r / distinct))
        base[:, r] = np.clip(counts + rng.normal(0, 1, counts.shape) * np.sqrt(counts), 0, 65535)
    projections = np.empty((n_angles, rows, size), np.uint16)
    for start in range(0, rows, distinct):
        count = min(distinct, rows - start)
        projections[:, start:start + count] = base[:, :count]
    flats = rng.normal(flat, np.sqrt(flat), (n_flats, rows, size)).astype(np.uint16)
    darks = rng.normal(dark, np.sqrt(dark), (n_flats, rows, size)).astype(np.uint16)
    return angles, projections, flats, darks


def silx_fbp_seconds(cl_device, angles, sinogram, repeats=3):
    """Wall time per slice of silx's ``filtered_backprojection`` (host to host), median
    of ``repeats`` after a warm-up; None without silx."""
    try:
        from silx.opencl.backprojection import Backprojection
    except Exception:  # not installed, or broken
        return None
    pid, did = silx_platform_device(cl_device)
    silx = Backprojection(sinogram.shape, angles=angles, platformid=pid, deviceid=did)
    silx.filtered_backprojection(sinogram)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        silx.filtered_backprojection(sinogram)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(device=None, size=2048, n_angles=None, rows=2048, n_flats=20, interpolation="linear",
        precision="float", repeats=5, with_silx=True, log=print, rings=None, phase=None):
    """Measure and print; return a dict of the figures. With ``rings`` or ``phase``
    (options of :func:`pybp.reconstruct`), the volume is also made with them, and
    their cost reported."""
    n_angles = n_angles or size
    tick = time.perf_counter()
    angles, projections, flats, darks = make_scan(size, n_angles, rows, n_flats)
    out = np.empty((rows, size, size), np.float32)
    with sources.copy_pools() as (pool, _):  # touched, as a caller's array is: no page
        for future in [pool.submit(block.fill, 0.0) for block in np.array_split(out, 64)]:
            future.result()                  # faults on the clock
    log(f"scan: {n_angles} x {rows} x {size} uint16 ({projections.nbytes / 2**30:.2f} GiB), "
        f"{n_flats} flats and darks; volume {rows} x {size} x {size} float32 "
        f"({out.nbytes / 2**30:.2f} GiB); made in {time.perf_counter() - tick:.1f} s")

    options = dict(device=device, interpolation=interpolation, precision=precision)
    bp = Backprojector(size, angles, filter="ramp", **options)
    width = bp.slices_per_pass
    stack = np.random.default_rng(1).random((4 * width, n_angles, size)).astype(np.float32)
    kernel_gups = gups(bp, stack, repeats)
    log(f"device: {bp.device.name}; kernel {bp.params.key()}")
    log(f"kernel only: {rate(kernel_gups)} GU/s (back-projection launches, median of {repeats})")
    cl_device = bp.cl_device
    bp.close()

    def timed(**more):
        """``(wall, stats)`` of the whole volume after a warm-up (builds, caches, first
        allocations) of a few passes."""
        reconstruct(projections, angles, flats, darks, rows=(0, min(rows, 4 * width)),
                    progress=False, **options, **more)
        stats = {}
        start = time.perf_counter()
        reconstruct(projections, angles, flats, darks, out=out, progress=False, stats=stats,
                    **options, **more)
        return time.perf_counter() - start, stats

    wall, stats = timed()
    if rings or phase:
        plain = wall
        wall, stats = timed(rings=rings, phase=phase)
        added = " and ".join(([f"rings={rings}"] if rings else []) + (["phase"] if phase else []))
        log(f"with {added}: {wall:.2f} s wall against {plain:.2f} s without, "
            f"+{100 * (wall / plain - 1):.1f}%")
    updates = float(size) * size * n_angles * rows
    end_to_end = updates / wall * 1e-9
    result = dict(wall=wall, gups=end_to_end, kernel_gups=kernel_gups, stats=stats)
    log(f"end to end: {wall:.2f} s wall for {rows} slices, {rate(end_to_end)} GU/s, "
        f"{100 * end_to_end / kernel_gups:.0f}% of kernel only "
        f"(chunks of {stats['chunk_slices']} slices, {stats['slots']} in flight)")
    inside = stats.get("device_backproject")
    if inside:
        log(f"back-projection launches inside this run: {inside:.2f} s, "
            f"{rate(updates / inside * 1e-9)} GU/s")
    log("share of the wall time (stages overlap, so shares add to more than 100%):")
    for stage in STAGES:
        seconds = stats.get(f"device_{stage}")
        if seconds:
            log(f"  device {stage:12s} {seconds:7.3f} s  {100 * seconds / wall:5.1f}%")
    for name in ("read", "write"):
        seconds = stats[f"host_{name}"]
        log(f"  host {name:14s} {seconds:7.3f} s  {100 * seconds / wall:5.1f}%  (copies on threads)")
    seconds = stats["host_wait_device"]
    log(f"  writer waiting for the device {seconds:7.3f} s  {100 * seconds / wall:5.1f}%")
    log("the call, step by step (these add up to the wall time):")
    steps = (("plan", "plan, kernels built or loaded"),
             ("staging", "device buffers, page-locked staging"),
             ("stream", "streaming the volume"), ("release", "releasing memory"))
    for name, what in steps:
        seconds = stats[f"setup_{name}"]
        log(f"  {what:36s} {seconds:7.3f} s  {100 * seconds / wall:5.1f}%")
    if with_silx:
        sinogram = np.ascontiguousarray(
            -np.log((projections[:, 0].astype(np.float32) - darks[:, 0].mean(0))
                    / (flats[:, 0].mean(0) - darks[:, 0].mean(0)))).astype(np.float32)
        silx = silx_fbp_seconds(cl_device, angles, sinogram)
        if silx is not None:
            ours = wall / rows
            result["silx_seconds"] = silx
            log(f"silx filtered_backprojection: {silx * 1e3:.1f} ms per slice (same device, "
                f"host to host); pybp {ours * 1e3:.2f} ms per slice end to end: "
                f"{silx / ours:.1f}x")
    return result
