"""The geometries pybp reconstructs, in one registry: what each geometry type brings to
the calls above it (pybp/api/, the command, the Dask tasks), so that they ask here and
hold no ``isinstance`` of their own. A new geometry (laminography, helical) is its own
package beside parallel/ and cone/ plus one :class:`Kind` here (docs/architecture.md).

A kind says how its volume is cut (slices of detector rows, each slice its own problem,
or one whole volume), its matched pair of operators and their copies on the device,
whether it has a filtered back-projection, and what to do where its operators do not
fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybp.cone import project as cone_project
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel import Geometry as ParallelGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry
from pybp.parallel import project as parallel_project


@dataclass(frozen=True)
class Kind:
    """One geometry type's entry: ``name`` (its public name, ``pybp.<name>``); ``what``
    (in words, for messages);
    ``whole`` (its volume is the geometry's one volume, cone beam's pair projecting
    it; else slices of detector rows, each its own problem); ``dims`` (of one problem:
    TV's gradient); ``filtered`` (what its filtered back-projection is called, or None
    where it has none); ``advice`` (where its operators do not fit the device)."""

    geometry: type
    name: str
    what: str
    whole: bool
    dims: int
    filtered: str | None
    advice: str

    def shapes(self, geometry, slices=None) -> tuple:
        """``(volume_shape, projection_shape)`` of the pair: the geometry's volume and
        ``(n_angles, n_rows, n_cols)``, or ``slices`` slices and ``(n_angles, slices,
        n_bins)``."""
        if self.whole:
            return (tuple(geometry.volume_shape),
                    (geometry.n_angles,) + tuple(geometry.detector_shape))
        ny, nx = geometry.slice_shape
        return (slices, ny, nx), (geometry.n_angles, slices, geometry.n_bins)

    def scratch_bytes(self, geometry, slices=None) -> int:
        """Device bytes of the pair's own copies (parallel beam's stacked volumes and
        projections, cone beam's transposed volume where A gathers)."""
        if self.whole:
            return cone_project.scratch_bytes(geometry)
        return parallel_project.scratch_bytes(geometry, slices)

    def pair(self, geometry, slices, context, queue, device):
        """The matched pair A and A^T on ``queue``'s device (``slices`` at once where
        the volume is cut in slices)."""
        if self.whole:
            return cone_project.ConePair(geometry, context, queue, device)
        return parallel_project.ParallelPair(geometry, slices, context, queue, device)


KINDS = (
    Kind(ParallelGeometry, "ParallelGeometry", "parallel beam", whole=False, dims=2, filtered="FBP",
         advice="take fewer rows per call, or a device with more memory"),
    Kind(ConeGeometry, "ConeGeometry", "cone beam", whole=True, dims=3, filtered="FDK",
         advice="make the volume or the scan smaller, or take a device with more memory"),
    # parallel rays along any direction: cone beam's pair with w = 1 (laminography)
    Kind(ParallelVectorGeometry, "ParallelVectorGeometry", "parallel rays along any direction",
         whole=True, dims=3, filtered=None,
         advice="make the volume or the scan smaller, or take a device with more memory"),
)


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
