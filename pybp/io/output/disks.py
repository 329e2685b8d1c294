"""The writer threads that did best on each disk. ``pybp bench --io`` keeps, for the
mount point it measured, the count of threads that wrote each format (``.npy``, HDF5,
TIFF) fastest to the disk; an output on that mount point is then written by that many
(cone beam's slabs written behind, a folder's TIFF files). Where a disk was not
measured, the writers keep their defaults. Kept as JSON in the user's cache directory
(``PYBP_CACHE_DIR`` overrides), keyed by the mount point and its file system type, so
that another disk mounted there later is not taken for this one."""

from __future__ import annotations

import json
import os

from pybp.cl.cache import cache_dir, write_text_new

FILE = "disks.json"
FORMAT_VERSION = 1
MOST_WRITERS = 256  # a count beyond this is not one the bench measured


def mount(path) -> tuple:
    """``(mount point, file system type)`` of ``path`` (which need not exist):
    ``/proc/mounts``'s longest mount point above it, or ``("", "unknown")``."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) >= 3:
                    point = fields[1]
                    inside = real == point or real.startswith(point.rstrip("/") + "/")
                    if inside and len(point) > len(best):
                        best, kind = point, fields[2]
    except OSError:
        pass
    return best, kind


def _read() -> dict:
    try:
        data = json.loads((cache_dir() / FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        return {}
    disks = data.get("disks")
    return disks if isinstance(disks, dict) else {}


def record(folder, writers: dict):
    """Keep ``writers`` (format -> threads) for the disk ``folder`` lies on, beside the
    other formats' and disks'; the file path, or None where the mount point is unknown."""
    point, kind = mount(folder)
    if not point:
        return None
    disks = _read()
    entry = disks.get(point) if isinstance(disks.get(point), dict) else {}
    if entry.get("filesystem") != kind:
        entry = {}
    counts = dict(entry.get("writers", {}), **{k: int(n) for k, n in writers.items()})
    disks[point] = dict(filesystem=kind, writers=counts)
    path = cache_dir() / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_new(path, json.dumps(dict(format=FORMAT_VERSION, disks=disks), indent=1,
                                           sort_keys=True), overwrite=True)


def writers(path, form: str):
    """The writer threads kept for ``form`` on the disk ``path`` lies on, or None."""
    point, kind = mount(path)
    entry = _read().get(point) if point else None
    if not isinstance(entry, dict) or entry.get("filesystem") != kind:
        return None
    count = entry.get("writers", {}).get(form)
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MOST_WRITERS:
        return count
    return None
