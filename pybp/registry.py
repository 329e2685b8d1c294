"""The geometries pybp reconstructs, in one registry: what each geometry type brings to
the calls above it (pybp/api/, the command, the Dask tasks), so that they ask here and
hold no ``isinstance`` of their own. This module holds the protocol (:class:`Kind`) and
the list; each kind is its own module's (pybp/parallel/kind.py, pybp/cone/kind.py).

A kind says how its volume is cut (slices of detector rows, each slice its own problem,
or one whole volume), its matched pair of operators and their copies on the device,
whether it has a filtered back-projection, and what to do where its operators do not
fit.
"""

from __future__ import annotations

from typing import Protocol

from pybp.cone import kind as whole_kinds
from pybp.parallel import kind as parallel_kind


class Kind(Protocol):
    """What a geometry type brings: ``geometry`` (the type), ``name`` (its public name,
    ``pybp.<name>``); ``what`` (in words, for messages); ``whole`` (its volume is the
    geometry's one volume; else slices of detector rows, each its own problem); ``dims``
    (of one problem: TV's gradient); ``filtered`` (what its filtered back-projection is
    called, or None where it has none); ``advice`` (where its operators do not fit the
    device). Each kind is one module's (pybp/parallel/kind.py, pybp/cone/kind.py)."""

    geometry: type
    name: str
    what: str
    whole: bool
    dims: int
    filtered: str | None
    advice: str

    def shapes(self, geometry, slices=None) -> tuple:
        """``(volume_shape, projection_shape)`` of the pair (``slices`` slices at once
        where the volume is cut in slices)."""

    def scratch_bytes(self, geometry, slices=None) -> int:
        """Device bytes of the pair's own copies."""

    def pair(self, geometry, slices, context, queue, device):
        """The matched pair A and A^T on ``queue``'s device."""


KINDS = (parallel_kind.KIND, whole_kinds.CONE, whole_kinds.PARALLEL_VECTORS)


def kind_of(geometry, name="geometry") -> Kind:
    """The registered kind of ``geometry``'s type; a ``TypeError`` naming ``name`` and
    every registered geometry otherwise."""
    for kind in KINDS:
        if isinstance(geometry, kind.geometry):
            return kind
    names = [f"pybp.{kind.name}" for kind in KINDS]
    raise TypeError(f"{name}: expected a {', a '.join(names[:-1])} or a {names[-1]}, got "
                    f"{type(geometry).__name__}")


def is_whole(geometry) -> bool:
    """Whether ``geometry`` is registered as one whole volume (False for anything else,
    angles included)."""
    return any(isinstance(geometry, kind.geometry) and kind.whole for kind in KINDS)
