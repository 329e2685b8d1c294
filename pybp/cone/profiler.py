"""The cone-beam kernels' defaults per kind of device (docs/design.md, section 8): the
caller's parameters win; then the set ``pybp tune --cone`` saved for exactly this
device and driver (pybp/tune/cone.py); otherwise the first row of ``DEFAULTS`` that
matches.

Measured on the H100 (``pybp bench --cone``, 512^3 from 496 projections of 960 x 1248,
docs/benchmarks.md's history): the texture family with float positions, 16 voxels per item and
16 projections per pass, at 684 GUPS, 100% of its fetch-only ceiling; the best exact
set 558 GUPS. On PoCL the exact family is faster than its software images. GPUs of
other vendors take the H100's row until they are measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybp.cl import profiles
from pybp.cl.device import DeviceDescription
from pybp.cl.kinds import DeviceKind, first_match
from pybp.cone.params import ConeParams

RECORD, KEY = "cone", "fdk"  # where pybp tune --cone saves its winner (pybp.cl.profiles)


@dataclass(frozen=True)
class Default(DeviceKind):
    """A row: the parameters for the devices its :class:`pybp.cl.kinds.DeviceKind`
    fields match (positions in double where asked and the device has doubles)."""

    params: ConeParams | None = None


# First match wins (the key scheme of parallel beam's ARCHITECTURES). Keep the generic
# row last.
DEFAULTS = (
    Default("gpu-images", device_type="gpu", images=True,
            params=ConeParams("texture", 16, 16, (32, 8), "float"),
            source="H100, pybp bench --cone (2026-11-23)"),
    Default("gpu", device_type="gpu", params=ConeParams("exact", 16, 16, (32, 8), "double"),
            source="H100, exact family, pybp bench --cone (2026-11-23)"),
    Default("generic", params=ConeParams("exact", 16, 16, (32, 8), "double"),
            source="PoCL, pybp bench --cone --size 64 (2026-11-23)"),
)


def tuned(device: DeviceDescription) -> ConeParams | None:
    """The set ``pybp tune --cone`` saved for exactly this device and driver, or None
    (also for a record this version cannot read)."""
    entry = profiles.read_record(device, RECORD).get(KEY)
    try:
        return ConeParams(**dict(entry["params"], group=tuple(entry["params"]["group"])))
    except (TypeError, KeyError, ValueError):
        return None


def default_params(device: DeviceDescription, tuned_first: bool = True) -> ConeParams:
    """The tuned set (``tuned_first``), else the first row of :data:`DEFAULTS` for
    ``device`` (positions in float where it has no doubles)."""
    saved = tuned(device) if tuned_first else None
    if saved is not None:
        return saved
    params = first_match(DEFAULTS, device).params
    if params.positions == "double" and "cl_khr_fp64" not in device.extensions:
        params = ConeParams(params.family, params.voxels_per_item, params.projections_per_pass,
                            params.group, "float")
    return params
