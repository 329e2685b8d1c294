"""Per-device tuning: candidates, verification, timing; the winners are saved as the
device's profile (``pybp.profiles``), which the profiler reads from then on."""

from __future__ import annotations

import itertools

import numpy as np

from . import verify
from .params import CACHE_MODES, CONSTANT_MODES, ROUNDINGS, SETTINGS, TEXTURE_KERNELS
from .profiles import save_profile, setting_key
from .runner import Backprojector

UNROLLS = (1, 2, 4, 8)


ALU_SHAPES = (dict(square=64, items=256, items_per_row=32),  # n_q = 16
              dict(square=32, items=256, items_per_row=16),  # n_q = 4
              dict(square=32, items=128, items_per_row=16))  # n_q = 8


def candidates(interpolation, families=("texture", "alu")):
    """Parameter candidates: texture (kernel, constant caching, unroll) and ALU
    (square and work-group shape, cached projections, cache mode, rounding, unroll)."""
    if "texture" in families:
        for kernel, constants, unroll in itertools.product(TEXTURE_KERNELS, CONSTANT_MODES, UNROLLS):
            if constants == "local" and kernel != "multiproj":
                continue
            yield dict(kernel=kernel, constants=constants, unroll=unroll)
    if "alu" in families:
        caches = CACHE_MODES if interpolation == "linear" else ("plain",)
        for shape, cached, cache, rounding, unroll in itertools.product(
                ALU_SHAPES, (8, 16, 32), caches, ROUNDINGS, (1, 4)):
            yield dict(kernel="alu", **shape, cached_projections=cached, cache=cache,
                       rounding=rounding, unroll=unroll)


def gups(backprojector, stack, repeats=5):
    """GU/s of one call on ``stack``: the median kernel time of ``repeats`` calls after
    a warm-up (design section 5)."""
    backprojector(stack)
    times = []
    for _ in range(repeats):
        backprojector(stack)
        times.append(backprojector.last_kernel_seconds)
    return backprojector.geometry.updates(len(stack)) / float(np.median(times)) * 1e-9


def tune(device=None, size=2048, settings=None, repeats=5, families=("texture", "alu"),
         log=print):
    """Search the candidates on a device; save and return the winners.

    Every candidate is first judged against the float64 reference on the check case
    (``pybp.verify``); one that fails is reported and skipped, never timed.
    """
    settings = settings or SETTINGS
    rng = np.random.default_rng(0)
    angles = np.linspace(0, np.pi, size, endpoint=False)
    data = rng.random((4, size, size)).astype(np.float32)
    winners = {}
    description = None
    for slices, interpolation, storage in settings:
        best = None
        for values in candidates(interpolation, families):
            forced = {k: v for k, v in values.items() if k != "kernel"}
            options = dict(device=device, interpolation=interpolation, slices_per_pass=slices,
                           precision=storage, kernel=values["kernel"], overrides=forced)
            try:
                verdict, small = verify.check(options, interpolation, storage)
            except ValueError as exc:  # does not fit this device
                log(f"  {values}: skipped ({exc})")
                continue
            description = small.device
            if not verdict.passed:
                log(f"  {small.params.key()}: wrong ({verdict}); skipped")
                continue
            big = Backprojector(size, angles, **options)
            speed = gups(big, data[:slices], repeats)
            log(f"  {big.params.key()}: {speed:8.1f} GU/s")
            if best is None or speed > best[1]:
                best = (values, speed)
        if best is not None:
            key = setting_key(slices, interpolation, storage)
            winners[key] = {"params": best[0], "gups": float(f"{best[1]:.4g}")}
            log(f"{key}: best {best[0]} at {best[1]:.1f} GU/s")
    if description is not None and winners:
        log(f"saved {save_profile(description, winners)}")
    return winners
