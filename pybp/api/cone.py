"""Cone-beam back-projection (``pybp.ConeBackprojector``, ``pybp.cone_backproject``) in
the geometry of :class:`pybp.ConeGeometry` (ASTRA's conventions)."""

from __future__ import annotations

import numpy as np

from pybp import checks
from pybp.cone.prepare import Unit
from pybp.geometry.cone import ConeGeometry


class ConeBackprojector:
    """The voxel-driven cone-beam back-projection of ``geometry`` on one device, kept
    for any number of calls (kernels and device buffers made once): the sum over
    projections of the bilinear sample where each voxel centre projects, zero outside
    the detector, no weights. ``params``: a :class:`pybp.cone.params.ConeParams` (None:
    the device's); ``device``, ``context`` or ``queue`` as for
    :class:`pybp.Backprojector`."""

    def __init__(self, geometry: ConeGeometry, params=None, device=None, context=None,
                 queue=None):
        if not isinstance(geometry, ConeGeometry):
            raise TypeError(f"geometry: expected a pybp.ConeGeometry, got {type(geometry).__name__}")
        self.geometry = geometry
        self._unit = Unit(geometry, params, device, context, queue)
        self.params, self.device = self._unit.params, self._unit.device

    def __call__(self, projections, out=None):
        """The volume ``(nz, ny, nx)`` of ``projections`` ``(n_angles, n_rows, n_cols)``;
        ``out``: an array for it."""
        if self._unit is None:
            raise RuntimeError("ConeBackprojector: closed; make a new one")
        g = self.geometry
        checks.array_like(projections, "projections", (3,))
        expected = (g.n_angles,) + g.detector_shape
        if tuple(projections.shape) != expected:
            raise ValueError(f"projections: expected (n_angles, n_rows, n_cols) = {expected} "
                             f"(the geometry's), got {tuple(projections.shape)}")
        if out is None:
            out = np.empty(g.volume_shape, np.float32)
        checks.check_output(out, g.volume_shape)
        return self._unit.backproject(projections, out)

    def close(self):
        """Free device memory now (also on leaving a ``with`` block)."""
        if self._unit is not None:
            self._unit.close()
            self._unit = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def cone_backproject(projections, geometry: ConeGeometry, out=None, **options):
    """One-shot :class:`ConeBackprojector` (options as for it)."""
    with ConeBackprojector(geometry, **options) as bp:
        return bp(projections, out)
