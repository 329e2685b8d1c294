"""The matched operator pair as users call it (``pybp.Projector``): the forward
projection of a geometry (parallel or cone beam) and its exact transpose, on NumPy arrays or on pyopencl
arrays that stay on the device, and as a ``scipy.sparse.linalg.LinearOperator`` (as
ASTRA's ``OpTomo``)."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp import checks
from pybp.cl.device import describe, open_device
from pybp.cone import project as cone_project
from pybp.cone.project import ConePair
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel import Geometry
from pybp.parallel import project
from pybp.stream import memory

FLOAT_BYTES = 4
ROWS_AXIS = {"volume": 0, "projections": 1}  # dropped for one slice


def check_geometry(geometry):
    if not isinstance(geometry, (Geometry, ConeGeometry)):
        raise TypeError(f"geometry: expected a pybp.ParallelGeometry or a pybp.ConeGeometry, "
                        f"got {type(geometry).__name__}")


def scratch_bytes(geometry, rows=None) -> int:
    """Device bytes of the pair's own copies for ``geometry`` (and ``rows`` slices of a
    parallel beam): parallel beam's stacked volumes and projections
    (:func:`pybp.parallel.project.scratch_bytes`), cone beam's transposed volume where
    its forward projection gathers (:func:`pybp.cone.project.scratch_bytes`)."""
    if isinstance(geometry, ConeGeometry):
        return cone_project.scratch_bytes(geometry)
    return project.scratch_bytes(geometry, rows)


def fits(device, volume_shape, projection_shape, *, volumes, projections, scratch, what):
    """An error naming what it would take unless ``volumes`` volumes, ``projections``
    sets of projections and ``scratch`` bytes (:func:`scratch_bytes`) fit the device's
    share (:func:`pybp.stream.memory.budget`)."""
    need = FLOAT_BYTES * (volumes * int(np.prod(volume_shape))
                          + projections * int(np.prod(projection_shape))) + scratch
    have = memory.budget(device)
    if need > have:
        raise MemoryError(f"{what}: {volumes} volume(s) {tuple(volume_shape)} and "
                          f"{projections} set(s) of projections {tuple(projection_shape)} of "
                          f"float32, with the operators' copies "
                          f"({memory.size_text(scratch)}), take {memory.size_text(need)} on the "
                          f"device, more than the {memory.size_text(have)} it lends "
                          f"({device.label()}); take fewer rows per call, or a device with "
                          "more memory")


class Projector:
    """A and A^T of ``geometry`` on one device. Parallel beam (a
    :class:`pybp.ParallelGeometry`), ``rows`` slices at once (default 1):
    ``forward(volume)`` takes ``(rows, ny, nx)`` (or ``(ny, nx)`` where ``rows`` is 1)
    to projections ``(n_angles, rows, n_bins)`` (or ``(n_angles, n_bins)``): line
    integrals in the geometry's unit of length of a volume of attenuation per unit, each
    voxel's shadow a box whose rays are as long as its chord (distance-driven:
    :meth:`pybp.geometry.parallel.Geometry.footprints`). Cone beam (a :class:`pybp.ConeGeometry`, no
    ``rows``): the volume ``(nz, ny, nx)`` to projections ``(n_angles, n_rows,
    n_cols)``, bilinear interpolation, as :func:`pybp.cone_backproject` samples.
    ``backward(projections)`` is the exact transpose: each weight comes from the same
    floats in both kernels, so <A x, y> = <x, A^T y> to the rounding of the sums. Unlike
    :func:`pybp.backproject` and :func:`pybp.fdk`, ``backward`` has no filter and no
    weights.

    NumPy arrays in give NumPy arrays out; pyopencl arrays of this projector's
    ``context`` give pyopencl arrays on its ``queue``, so that a loop stays on the
    device. ``shape`` is ``(projection values, volume values)``, as a matrix's."""

    def __init__(self, geometry, rows=None, device=None):
        check_geometry(geometry)
        self.geometry = geometry
        cone = isinstance(geometry, ConeGeometry)
        if cone and rows is not None:
            raise ValueError("rows: a cone-beam volume is the geometry's (nz, ny, nx); give "
                             "no rows")
        self.rows = None if cone else 1 if rows is None else checks.positive_int(rows, "rows")
        cl_device, self.context, _ = open_device(device)
        self.device = describe(cl_device)
        if cone:
            self.volume_shape = tuple(geometry.volume_shape)
            self.projection_shape = (geometry.n_angles,) + tuple(geometry.detector_shape)
        else:
            ny, nx = geometry.slice_shape
            self.volume_shape = (self.rows, ny, nx)
            self.projection_shape = (geometry.n_angles, self.rows, geometry.n_bins)
        fits(self.device, self.volume_shape, self.projection_shape, volumes=1, projections=1,
             scratch=scratch_bytes(geometry, self.rows), what="Projector")
        self.queue = cl.CommandQueue(self.context)
        self.pair = ConePair(geometry, self.context, self.queue, self.device) if cone else \
            project.ParallelPair(geometry, self.rows, self.context, self.queue, self.device)
        self.shape = (int(np.prod(self.projection_shape)), int(np.prod(self.volume_shape)))
        self._lock = threading.Lock()

    def forward(self, volume):
        """A volume: projections of ``volume`` (see the class)."""
        return self._apply(volume, "volume", self.volume_shape, self.projection_shape,
                           self.pair.forward)

    def backward(self, projections):
        """A^T projections: the exact transpose of :meth:`forward`."""
        return self._apply(projections, "projections", self.projection_shape,
                           self.volume_shape, self.pair.backward)

    def _apply(self, given, name, shape, result_shape, operator):
        result_name = "projections" if name == "volume" else "volume"
        out_shape = result_shape
        if self.rows == 1 and len(getattr(given, "shape", shape)) == len(shape) - 1:
            shape = _dropped(shape, ROWS_AXIS[name])  # one slice, without its axis of rows
            out_shape = _dropped(result_shape, ROWS_AXIS[result_name])
        if isinstance(given, cla.Array):
            if given.context != self.context:
                raise ValueError(f"{name}: a pyopencl array of another context; make it on "
                                 "this projector's queue (Projector.queue)")
            if tuple(given.shape) != shape or given.dtype != np.float32 \
                    or not given.flags.c_contiguous:
                raise ValueError(f"{name}: expected a contiguous float32 array of shape "
                                 f"{shape}, got {given.dtype} {tuple(given.shape)}")
            if given.queue is not None and given.queue != self.queue:
                given.queue.finish()  # written on another queue: done before we read it
            out = cla.empty(self.queue, result_shape, np.float32)
            with self._lock:
                operator(given.data, out.data)
            return out.reshape(out_shape)
        checks.array_like(given, name, (len(shape),))
        if tuple(given.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(given.shape)}")
        with self._lock:
            source = cla.to_device(self.queue, np.ascontiguousarray(given, np.float32))
            out = cla.empty(self.queue, result_shape, np.float32)
            operator(source.data, out.data)
            return out.get(queue=self.queue).reshape(out_shape)

    def as_linear_operator(self):
        """A ``scipy.sparse.linalg.LinearOperator`` of float32 (as ASTRA's ``OpTomo``):
        ``matvec`` the forward projection of a flattened volume, ``rmatvec`` its
        transpose, so that ``scipy.sparse.linalg.lsqr`` and other solvers can use it."""
        from scipy.sparse.linalg import LinearOperator  # 0.6 s of imports here: for this call only
        return LinearOperator(
            self.shape, dtype=np.float32,
            matvec=lambda v: self.forward(np.reshape(v, self.volume_shape)).ravel(),
            rmatvec=lambda v: self.backward(np.reshape(v, self.projection_shape)).ravel())


def _dropped(shape, axis):
    return tuple(s for i, s in enumerate(shape) if i != axis)
