"""Per-device tuning: candidates, verification, timing, and tuned profile files.

A profile is a JSON file in the user's cache directory (``PYBP_CACHE_DIR`` overrides),
named after the device; its header holds the full device identity, so a profile made
for another device or driver is ignored. Files are written atomically.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import numpy as np

from .codegen import write_text_new
from .params import CACHE_MODES, CONSTANT_MODES, ROUNDINGS, SETTINGS, TEXTURE_KERNELS

FORMAT_VERSION = 1
UNROLLS = (1, 2, 4, 8)


def setting_key(slices_per_pass, interpolation, storage) -> str:
    return f"v{slices_per_pass}-{interpolation}-{storage}"


def cache_dir() -> Path:
    if os.environ.get("PYBP_CACHE_DIR"):
        return Path(os.environ["PYBP_CACHE_DIR"])
    import platformdirs  # a pyopencl dependency

    return Path(platformdirs.user_cache_dir("pybp"))


def profile_path(device) -> Path:
    digest = hashlib.sha1(device.identity.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() else "_" for c in device.name)[:40]
    return cache_dir() / f"profile-{safe}-{digest}.json"


def load_profile(device) -> dict:
    """Tuned settings for exactly this device and driver, or ``{}``."""
    path = profile_path(device)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if data.get("format") != FORMAT_VERSION or data.get("device") != device.identity:
        return {}
    return {key: entry["params"] for key, entry in data.get("settings", {}).items()}


def save_profile(device, settings: dict) -> Path:
    """Merge ``settings`` (key -> {"params": ..., "gups": ...}) into the device's profile."""
    path = profile_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
        if data.get("device") != device.identity:
            data = {}
    except (OSError, ValueError):
        data = {}
    merged = dict(data.get("settings", {}), **settings)
    text = json.dumps({"format": FORMAT_VERSION, "device": device.identity,
                       "settings": merged}, indent=2, sort_keys=True)
    return write_text_new(path, text, overwrite=True)


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


def verify(options, interpolation, storage):
    """Run a parameter set on a small random case against the float64 reference.

    Returns ``(error, within_tolerance, backprojector)``: the relative RMS error for
    linear interpolation (exact arithmetic's tolerance for ALU kernels and buffers, the
    texture engine's otherwise), the share of pixels that picked another bin for nearest;
    oversampling, an approximation, on the FBP of the Shepp-Logan phantom.
    """
    from . import reference
    from .geometry import Geometry
    from .runner import Backprojector

    if options.get("overrides", {}).get("cache") == "oversample":
        # An approximation: judged on the phantom's FBP, not on random data.
        geometry = Geometry.create(255, np.linspace(0, np.pi, 256, endpoint=False))
        small = Backprojector(255, geometry.angles, filter="ramp", **options)
        data = np.repeat(reference.shepp_logan_radon(geometry).astype(np.float32)[None],
                         small.slices_per_pass, 0)
        error = reference.relative_rms(small(data), reference.fbp(data, geometry))
        return error, error <= reference.RTOL_OVERSAMPLE, small
    rng = np.random.default_rng(1)
    angles = np.linspace(0, np.pi, 90, endpoint=False)
    small = Backprojector(128, angles, **options)
    data = rng.random((small.slices_per_pass, 90, 128)).astype(np.float32)
    got = small(data)
    if storage == "half":
        data = data.astype(np.float16)
    want = reference.backproject(data, small.geometry, interpolation)
    if interpolation == "nearest":
        share = reference.mismatch_share(got, want)
        return share, share <= reference.NEAREST_MISMATCH_SHARE, small
    error = reference.relative_rms(got, want)
    exact = small.params.source == "buffer" or (small.params.family == "alu"
                                                and not small.params.approximate)
    return error, error <= (reference.RTOL_EXACT if exact else reference.RTOL_TEXTURE), small


def tune(device=None, size=2048, settings=None, repeats=5, families=("texture", "alu"),
         log=print):
    """Search the candidates on a device; save and return the winners.

    Every candidate is first checked against the float64 reference on a small case;
    one that fails is reported and skipped, never timed.
    """
    from .runner import Backprojector

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
                error, good, small = verify(options, interpolation, storage)
            except ValueError as exc:  # does not fit this device
                log(f"  {values}: skipped ({exc})")
                continue
            description = small.device
            if not good:
                log(f"  {small.params.key()}: wrong (error {error:.2e}); skipped")
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
