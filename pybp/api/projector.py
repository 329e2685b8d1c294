"""The matched operator pair as users call it (``pybp.Projector``): the forward
projection of a geometry (parallel or cone beam) and its exact transpose, on NumPy arrays or on pyopencl
arrays that stay on the device, and as a ``scipy.sparse.linalg.LinearOperator`` (as
ASTRA's ``OpTomo``)."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp import checks, registry
from pybp.cl.device import describe, open_device
from pybp.stream import memory

FLOAT_BYTES = 4
ROWS_AXIS = {"volume": 0, "projections": 1}  # dropped for one slice


def fits(device, volume_shape, projection_shape, *, volumes, projections, scratch, what,
         budget=None, advice):
    """An error naming what it would take, and ``advice``, unless ``volumes`` volumes,
    ``projections`` sets of projections and ``scratch`` bytes (the pair's copies:
    :meth:`pybp.registry.Kind.scratch_bytes`) fit ``budget`` (a
    :class:`pybp.stream.memory.Budget`; None: the device's share)."""
    need = FLOAT_BYTES * (volumes * int(np.prod(volume_shape))
                          + projections * int(np.prod(projection_shape))) + scratch
    budget = budget or memory.Budget.of(device)
    have = budget.allowed
    if need > have:
        lent = "memory_limit allows" if budget.limited else f"it lends ({device.label()})"
        raise MemoryError(f"{what}: {volumes} volume(s) {tuple(volume_shape)} and "
                          f"{projections} set(s) of projections {tuple(projection_shape)} of "
                          f"float32, with the operators' copies "
                          f"({memory.size_text(scratch)}), take {memory.size_text(need)} on the "
                          f"device, more than the {memory.size_text(have)} {lent}; {advice}")


class Projector:
    """A and A^T of ``geometry`` on one device. Parallel beam (a
    :class:`pybp.ParallelGeometry`), ``slices`` slices at once (default 1; ``rows=``,
    its old name, warns): ``forward(volume)`` takes ``(slices, ny, nx)`` (or ``(ny,
    nx)`` where ``slices`` is 1) to projections ``(n_angles, slices, n_bins)`` (or
    ``(n_angles, n_bins)``): line
    integrals in the geometry's unit of length of a volume of attenuation per unit, each
    voxel's shadow a box whose rays are as long as its chord (distance-driven:
    :meth:`pybp.geometry.parallel.ParallelGeometry.footprints`). Cone beam (a
    :class:`pybp.ConeGeometry`, no ``slices``): the volume ``(nz, ny, nx)`` to
    projections ``(n_angles, n_rows, n_cols)``, distance-driven too (each voxel's shadow a
    box on the detector: :mod:`pybp.cone.reference`); a
    :class:`pybp.ParallelVectorGeometry` (any ray direction and detector: laminography)
    likewise.
    ``backward(projections)`` is the exact transpose: each weight comes from the same
    floats in both kernels, so <A x, y> = <x, A^T y> to the rounding of the sums. Unlike
    :func:`pybp.backproject` and :func:`pybp.fdk`, ``backward`` has no filter and no
    weights.

    NumPy arrays in give NumPy arrays out (NaN and Inf refused, as the methods refuse
    them); pyopencl arrays of this projector's ``context`` give pyopencl arrays on its
    ``queue``, so that a loop stays on the device. ``shape`` is ``(projection values,
    volume values)``, as a matrix's.

    As ASTRA's ``OpTomo``: ``P @ x`` and ``P * x`` are ``forward(x)``, ``P.T @ y`` and
    ``P.T * y`` are ``backward(y)``; a flattened array gives a flattened result, a shaped
    one a shaped result. ``close()``, or leaving a ``with`` block, releases its device
    memory."""

    def __init__(self, geometry, slices=None, device=None, *, rows=None):
        self.kind = kind = registry.kind_of(geometry)
        self.geometry = geometry
        if rows is not None:  # the name before pybp.reconstruct's rows, a range, had it
            if slices is not None:
                raise TypeError("rows: give slices (rows is its old name)")
            warnings.warn("rows: a Projector's slices are slices= (rows is a range of "
                          "detector rows, as pybp.reconstruct takes it)", DeprecationWarning,
                          stacklevel=2)
            slices = rows
        self.slices = kind.cut(geometry, slices)
        cl_device, self.context, _ = open_device(device)
        self.device = describe(cl_device)
        self.volume_shape, self.projection_shape = kind.shapes(geometry, self.slices)
        fits(self.device, self.volume_shape, self.projection_shape, volumes=1, projections=1,
             scratch=kind.scratch_bytes(geometry, self.slices), what="Projector",
             advice=kind.advice)
        self.queue = cl.CommandQueue(self.context)
        self.pair = kind.pair(geometry, self.slices, self.context, self.queue, self.device)
        self.shape = (int(np.prod(self.projection_shape)), int(np.prod(self.volume_shape)))
        self._lock = threading.Lock()
        self._closed = False

    def forward(self, volume):
        """A volume: projections of ``volume`` (see the class)."""
        return self._apply(volume, "volume", self.volume_shape, self.projection_shape,
                           "forward")

    def backward(self, projections):
        """A^T projections: the exact transpose of :meth:`forward`."""
        return self._apply(projections, "projections", self.projection_shape,
                           self.volume_shape, "backward")

    @property
    def T(self):
        """The transpose, as ASTRA's ``OpTomo.T``: ``P.T @ y`` is ``backward(y)``."""
        return _Transposed(self)

    def __matmul__(self, given):
        return self._times(given, self.volume_shape, self.forward)

    __mul__ = __matmul__

    def _times(self, given, shape, operator):
        """``operator(given)``; a flattened ``given`` (of ``shape``'s size) gives a
        flattened result."""
        if len(getattr(given, "shape", ())) == 1 and given.shape[0] == int(np.prod(shape)):
            return operator(given.reshape(shape)).reshape(-1)
        return operator(given)

    def close(self):
        """Release the device memory now (also on leaving a ``with`` block); a call
        after is an error."""
        with self._lock:
            self._closed = True
            self.pair = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _apply(self, given, name, shape, result_shape, which):
        """The pair's ``which`` (forward or backward) of ``given``, checked."""
        if self._closed:
            raise RuntimeError("Projector: closed (by close() or its with block); make a new "
                               "one")
        operator = getattr(self.pair, which)
        result_name = "projections" if name == "volume" else "volume"
        out_shape = result_shape
        if self.slices == 1 and len(getattr(given, "shape", shape)) == len(shape) - 1:
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
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(given.shape)}"
                             f"{self._rows_hint(given, name)}")
        values = np.ascontiguousarray(given, np.float32)
        if not np.isfinite(values).all():
            raise ValueError(f"{name}: contains NaN or Inf")
        with self._lock:
            source = cla.to_device(self.queue, values)
            out = cla.empty(self.queue, result_shape, np.float32)
            operator(source.data, out.data)
            return out.get(queue=self.queue).reshape(out_shape)

    def _rows_hint(self, given, name):
        """Where ``given`` holds another number of slices than this parallel-beam
        Projector's ``rows``, but is otherwise of its shape: what to make instead."""
        full = self.volume_shape if name == "volume" else self.projection_shape
        axis = ROWS_AXIS[name]
        if self.slices is None or len(given.shape) != 3 or \
                _dropped(given.shape, axis) != _dropped(full, axis):
            return ""
        return (f": {given.shape[axis]} slices, where this Projector takes {self.slices}; "
                f"make one with slices={given.shape[axis]}")

    def as_linear_operator(self):
        """A ``scipy.sparse.linalg.LinearOperator`` (as ASTRA's ``OpTomo``): ``matvec`` the
        forward projection of a flattened volume, ``rmatvec`` its transpose, so that
        ``scipy.sparse.linalg.lsqr``, ``lsmr`` and other solvers can use it. Its dtype is
        float64: the solvers keep their vectors and norms in it (with float32 ones,
        ``lsmr`` cast its 1e100 start to float32 and warned of an overflow), and the
        device computes in float32, each product rounded to float32 on the way in."""
        from scipy.sparse.linalg import LinearOperator  # 0.6 s of imports here: for this call only

        def apply(operator, v, shape):
            return operator(np.reshape(v, shape).astype(np.float32)).ravel().astype(np.float64)

        return LinearOperator(
            self.shape, dtype=np.float64,
            matvec=lambda v: apply(self.forward, v, self.volume_shape),
            rmatvec=lambda v: apply(self.backward, v, self.projection_shape))


def _dropped(shape, axis):
    return tuple(s for i, s in enumerate(shape) if i != axis)


class _Transposed:
    """A Projector's transpose (``Projector.T``): ``@`` and ``*`` apply its backward,
    ``.T`` is the Projector again, ``shape`` is reversed."""

    def __init__(self, projector: Projector):
        self.T = projector
        self.shape = projector.shape[::-1]

    def __matmul__(self, given):
        return self.T._times(given, self.T.projection_shape, self.T.backward)

    __mul__ = __matmul__
