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
from .params import CONSTANT_MODES, TEXTURE_KERNELS

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


def candidates(slices_per_pass):
    """Texture parameter candidates (kernel family, constant caching, unroll)."""
    for kernel, constants, unroll in itertools.product(TEXTURE_KERNELS, CONSTANT_MODES, UNROLLS):
        if constants == "local" and kernel != "multiproj":
            continue
        yield dict(kernel=kernel, constants=constants, unroll=unroll)


def kernel_seconds(backprojector, stack, repeats=5):
    """Median kernel time of one call on ``stack``, after a warm-up call."""
    backprojector(stack)
    times = []
    for _ in range(repeats):
        backprojector(stack)
        times.append(backprojector.last_kernel_seconds)
    return float(np.median(times))


def tune(device=None, size=2048, settings=None, repeats=5, log=print):
    """Search the texture candidates on a device; save and return the winners.

    Every candidate is first checked against the float64 reference on a small case;
    one that fails is reported and skipped, never timed.
    """
    from . import reference
    from .runner import Backprojector

    settings = settings or [(n, i, s) for n in (1, 2, 4) for i in ("nearest", "linear")
                            for s in ("float", "half")]
    rng = np.random.default_rng(0)
    check_angles = np.linspace(0, np.pi, 64, endpoint=False)
    check = rng.random((4, 64, 96)).astype(np.float32)
    angles = np.linspace(0, np.pi, size, endpoint=False)
    data = rng.random((4, size, size)).astype(np.float32)
    winners = {}
    description = None
    for slices, interpolation, storage in settings:
        best = None
        for values in candidates(slices):
            options = dict(device=device, interpolation=interpolation, slices_per_pass=slices,
                           precision=storage, kernel=values["kernel"],
                           overrides=dict(constants=values["constants"], unroll=values["unroll"]))
            small = Backprojector(96, check_angles, **options)
            description = small.device
            got = small(check[:slices])
            want = reference.backproject(check[:slices], small.geometry, interpolation)
            error = np.linalg.norm(got - want) / np.linalg.norm(want)
            if error > 2e-2:
                log(f"  {small.params.key()}: wrong (relative error {error:.2e}); skipped")
                continue
            big = Backprojector(size, angles, **options)
            seconds = kernel_seconds(big, data[:slices], repeats)
            gups = size * size * size * slices / seconds * 1e-9
            log(f"  {big.params.key()}: {gups:8.1f} GU/s")
            if best is None or gups > best[1]:
                best = (values, gups)
        if best is not None:
            key = setting_key(slices, interpolation, storage)
            winners[key] = {"params": best[0], "gups": float(f"{best[1]:.4g}")}
            log(f"{key}: best {best[0]} at {best[1]:.1f} GU/s")
    if description is not None and winners:
        log(f"saved {save_profile(description, winners)}")
    return winners
