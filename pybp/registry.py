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

import importlib
from typing import Protocol

from pybp.cone import kind as whole_kinds
from pybp.fan import kind as fan_kind
from pybp.io import geometry_file
from pybp.parallel import kind as parallel_kind


class Kind(Protocol):
    """What a geometry type brings: ``geometry`` (the type), ``name`` (its public name,
    ``pybp.<name>``); ``what`` (in words, for messages); ``whole`` (its volume is the
    geometry's one volume; else slices of detector rows, each its own problem); ``dims``
    (of one problem: TV's gradient); ``filtered`` (what its filtered back-projection is
    called, or None where it has none); ``advice`` (where its operators do not fit the
    device); ``file_keys`` (the keys of a geometry file that give its trajectory, each
    read by :meth:`reader`) and ``astra_types`` (the types of ASTRA's ``proj_geom`` that
    such a file's ``{"astra": ...}`` makes of this kind, by its ``from_astra``);
    ``flag`` (the option of the developers' commands that picks it, or None: ``--cone``
    of ``pybp demo``, ``bench``, ``render`` and ``tune``, ``--laminography`` of ``pybp
    bench``) and ``commands`` (``(command, "module:function")`` pairs: its runner of
    each ``pybp`` command it has, in pybp/cli/, named so that the kinds import no
    command code). Each kind is one module's (pybp/parallel/kind.py, pybp/cone/kind.py)."""

    geometry: type
    name: str
    what: str
    whole: bool
    dims: int
    filtered: str | None
    advice: str
    file_keys: tuple
    astra_types: tuple
    flag: str | None
    commands: tuple

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

    def reader(self, key):
        """The function ``(value, folder, angles, detector_shape, volume)`` that makes
        this kind's geometry of a geometry file's ``key`` (one of ``file_keys``)."""

    def command_geometry(self, geometry):
        """``geometry`` as the kind's command runner takes it (its own, or the geometry
        it is a case of: a fan-beam slice is cone beam's one plane)."""

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """:func:`pybp.reconstruct` of ``geometry`` (its arguments, each checked here or
        refused by name where the kind has no use for it); ``solve`` runs an iterative
        method of line integrals (pybp/api/iterative.py's ``by_method``)."""


KINDS = (parallel_kind.KIND, whole_kinds.CONE, whole_kinds.PARALLEL_VECTORS, fan_kind.KIND)


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


def for_command(args):
    """The kind a command's arguments pick: the kind of the ``--geometry`` file's key
    (the first kind with a geometry file where the file cannot be read: its runner then
    names the option, in the order of its checks), else the kind whose ``flag`` is set
    (``--cone``), else the first of :data:`KINDS` (parallel beam: the scan's angles and
    its axis)."""
    path = getattr(args, "geometry", None)
    if path is not None:
        with_file = [kind for kind in KINDS if kind.file_keys]
        try:
            spec = geometry_file.load(path)
        except ValueError:  # the runner says what is wrong, after its own checks
            return with_file[0]
        dicts = spec.get("astra")
        proj_geom = dicts.get("proj_geom") if isinstance(dicts, dict) else None
        astra_type = proj_geom.get("type") if isinstance(proj_geom, dict) else None
        for kind in with_file:
            if any(key in spec for key in kind.file_keys) or astra_type in kind.astra_types:
                return kind
        return with_file[0]  # neither: its reading says what is wrong
    for kind in KINDS:
        if kind.flag is not None and getattr(args, kind.flag, False):
            return kind
    return KINDS[0]


def command(kind, name):
    """``kind``'s runner of the command ``name`` (its ``commands``), imported when asked:
    a ``ValueError`` where the kind has none."""
    where = dict(kind.commands).get(name)
    if where is None:
        raise ValueError(f"pybp {name}: {kind.what} has no {name}")
    module, function = where.split(":")
    return getattr(importlib.import_module(module), function)


def read_geometry(path, angles, detector_shape):
    """The geometry of the file ``path`` (pybp/io/geometry_file.py), of the kind whose
    key it gives, for a scan of ``angles`` (radians) and ``detector_shape``."""
    return geometry_file.read(path, angles, detector_shape, KINDS)
