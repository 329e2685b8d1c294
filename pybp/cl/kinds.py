"""Kinds of device: which devices a row of defaults applies to. Both geometries' tables
of defaults (parallel beam's ``ARCHITECTURES``, pybp/parallel/profiler.py; cone beam's
``DEFAULTS``, pybp/cone/profiler.py) are rows of a :class:`DeviceKind`, matched the
same way, first match winning: one key scheme for every vendor and architecture."""

from __future__ import annotations

from dataclasses import dataclass

from pybp.cl.device import DeviceDescription


@dataclass(frozen=True)
class DeviceKind:
    """``name`` (the row's, as logs and ``pybp info`` say it), ``vendor`` (any of these
    substrings of the vendor or platform, lower case; none: any), ``device_type``
    (``"gpu"``, ``"cpu"``, ...; None: any), NVIDIA compute capabilities from
    ``min_capability`` to ``max_capability``, an AMD gfx target starting with
    ``gfx_prefix``, ``images`` (the device must sample images), and ``source``: where
    the row's values come from."""

    name: str
    vendor: tuple = ()
    device_type: str | None = None
    min_capability: tuple | None = None
    max_capability: tuple | None = None
    gfx_prefix: str | None = None
    images: bool = False
    source: str = ""

    def matches(self, d: DeviceDescription) -> bool:
        names = (d.vendor + " " + d.platform).lower()
        if self.vendor and not any(v in names for v in self.vendor):
            return False
        if self.device_type and d.type != self.device_type:
            return False
        if self.images and not d.image_support:
            return False
        if self.min_capability or self.max_capability:
            if d.compute_capability is None:
                return False
            if self.min_capability and d.compute_capability < self.min_capability:
                return False
            if self.max_capability and d.compute_capability > self.max_capability:
                return False
        if self.gfx_prefix and not (d.gfx_target or "").startswith(self.gfx_prefix):
            return False
        return True


def first_match(rows, device: DeviceDescription):
    """The first of ``rows`` (:class:`DeviceKind` rows, the last matching any device)
    that matches ``device``."""
    return next(row for row in rows if row.matches(device))
