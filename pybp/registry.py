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

    def describe(self, geometry, slices=None) -> str:
        """The case in words (``pybp bench --forward``'s heading)."""

    def takes_in_place(self, geometry) -> bool:
        """Whether :func:`pybp.reconstruct` takes ``geometry``, of no registered type, as
        this kind's (parallel beam: the angles)."""

    def cut(self, geometry, slices) -> int | None:
        """A :class:`pybp.Projector`'s ``slices`` checked: what :meth:`pair` takes."""

    def method_data(self, geometry, projections, circle) -> tuple:
        """``(data, single)`` for an iterative method: ``projections`` checked against
        ``geometry`` and copied into float32 of the pair's projection layout; ``single``
        where the volume is one slice of its own shape (a sinogram in). ``circle`` is
        refused where the kind has no reconstruction circle."""

    def method_devices(self, method, geometry, slices, device, devices, check):
        """The devices an iterative method runs on: ``pair``, ``vectors``, ``upload``,
        ``fetch``, ``variation``, ``allocate``, ``descriptions`` and ``close``, as
        :class:`pybp.iterative.team.Team` has them, each device's pair made after
        ``check(description, slices)`` (which raises where the method does not fit)."""

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """:func:`pybp.reconstruct` of ``geometry`` (its arguments, each checked here or
        refused by name where the kind has no use for it); ``solve`` runs an iterative
        method of line integrals (pybp/api/iterative.py's ``by_method``)."""


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


def taking(geometry) -> Kind:
    """The kind whose :func:`pybp.reconstruct` takes ``geometry``: its type's, else the
    one that takes it in place of a geometry (the angles)."""
    for kind in KINDS:
        if isinstance(geometry, kind.geometry):
            return kind
    for kind in KINDS:
        if kind.takes_in_place(geometry):
            return kind
    return kind_of(geometry)


def names() -> str:
    """The registered geometries' public names, for messages."""
    return ", ".join(f"pybp.{kind.name}" for kind in KINDS)
