"""What pybp keeps per device, as JSON files: tuned profiles (the winners of ``pybp
tune``), probes (whether the device builds and runs kernels, and whether its profiling
timers can be trusted) and verdicts (which parameter sets gave right results there).

Records live in the user's cache directory (``PYBP_CACHE_DIR`` overrides), named after
the device; their header holds the full device identity, so a record made for another
device or driver is ignored. Files are written atomically. The profiler reads profiles
(``pybp.parallel.profiler``), the tuner writes them (``pybp.tune.search``); ``pybp.cl.device`` keeps the
probes and ``pybp.parallel.prepare`` the verdicts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pybp.cl.cache import cache_dir, write_text_new

FORMAT_VERSION = 1


def setting_key(slices_per_pass, interpolation, storage) -> str:
    return f"v{slices_per_pass}-{interpolation}-{storage}"


def record_path(device, kind: str) -> Path:
    """The file of one kind of record (``profile``, ``probe``, ``verified``) for a device."""
    digest = hashlib.sha1(device.identity.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() else "_" for c in device.name)[:40]
    return cache_dir() / f"{kind}-{safe}-{digest}.json"


def profile_path(device) -> Path:
    return record_path(device, "profile")


def read_record(device, kind: str) -> dict:
    """The entries of ``kind`` for exactly this device and driver, or ``{}``."""
    try:
        data = json.loads(record_path(device, kind).read_text())
    except (OSError, ValueError):
        return {}
    if data.get("format") != FORMAT_VERSION or data.get("device") != device.identity:
        return {}
    return data.get("settings", {})


def update_record(device, kind: str, entries: dict) -> Path:
    """Merge ``entries`` into the device's record of ``kind``, atomically."""
    path = record_path(device, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = dict(read_record(device, kind), **entries)
    text = json.dumps({"format": FORMAT_VERSION, "device": device.identity,
                       "settings": merged}, indent=2, sort_keys=True)
    return write_text_new(path, text, overwrite=True)


def _entries(device) -> dict:
    """Setting key -> ``{"params": ..., "gups": ...}`` for exactly this device and
    driver, or ``{}``."""
    return read_record(device, "profile")


def load_profile(device) -> dict:
    """Tuned settings for exactly this device and driver, or ``{}``."""
    return {key: entry["params"] for key, entry in _entries(device).items()}


def load_speeds(device) -> dict:
    """Setting key -> GU/s measured by the tuner for this device and driver."""
    return {key: entry["gups"] for key, entry in _entries(device).items() if "gups" in entry}


def save_profile(device, settings: dict) -> Path:
    """Merge ``settings`` (key -> {"params": ..., "gups": ...}) into the device's profile."""
    return update_record(device, "profile", settings)
