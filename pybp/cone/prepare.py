"""One device prepared for a cone-beam geometry: the kernel of a parameter set, the
volume's buffer and a buffer of projections for one pass; :meth:`Unit.backproject`
runs the passes (docs/design.md, section 8)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.device import describe, open_device
from pybp.cone import kernels
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry


def default_params(device) -> ConeParams:
    """The parameter set for ``device`` (a description): positions in double where the
    device has doubles."""
    return ConeParams(positions="double" if "cl_khr_fp64" in device.extensions else "float")


class Unit:
    """``geometry`` on one device (``device``, ``context`` or ``queue``) with ``params``
    (None: :func:`default_params`)."""

    def __init__(self, geometry: ConeGeometry, params: ConeParams | None = None, device=None,
                 context=None, queue=None):
        self.geometry = geometry
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = describe(self.cl_device)
        if params is not None and not isinstance(params, ConeParams):
            raise TypeError(f"params: expected a pybp.cone.params.ConeParams, got "
                            f"{type(params).__name__}")
        self.params = params or default_params(self.device)
        if self.params.positions == "double" and "cl_khr_fp64" not in self.device.extensions:
            raise ValueError(f"params: positions='double' needs doubles, which "
                             f"{self.device.name} does not have; use positions='float'")
        self.queue = queue or cl.CommandQueue(self.context)
        self.kernel = codegen.declared(self.context, self.device,
                                       kernels.backproject_source(self.params),
                                       "cone_backproject", kernels.backproject_args(self.params))
        real = np.float64 if self.params.positions == "double" else np.float32
        self.matrices = np.ascontiguousarray(geometry.voxel_matrices(), real).reshape(
            geometry.n_angles, kernels.MATRIX_VALUES)
        nz, ny, nx = geometry.volume_shape
        n_rows, n_cols = geometry.detector_shape
        per_pass = self.params.projections_per_pass
        self._check_sizes(nz * ny * nx * 4, per_pass * n_rows * n_cols * 4,
                          per_pass * self.matrices.itemsize * kernels.MATRIX_VALUES)
        rw = cl.mem_flags.READ_WRITE
        self._volume = cl.Buffer(self.context, rw, nz * ny * nx * 4)
        self._images = cl.Buffer(self.context, cl.mem_flags.READ_ONLY,
                                 per_pass * n_rows * n_cols * 4)
        self._matrices = cl.Buffer(self.context, cl.mem_flags.READ_ONLY,
                                   per_pass * self.matrices.itemsize * kernels.MATRIX_VALUES)

    def _check_sizes(self, volume, images, matrices):
        """Refuse, naming the argument, what the device cannot hold (the volume in one
        piece until slabs come; one pass of images; the pass's matrices in constant
        memory) before OpenCL fails on it."""
        d, limit = self.device, self.device.max_allocation
        if volume > min(limit, d.global_memory // 2):
            raise ValueError(f"volume_shape: the volume takes {volume / 2**30:.2f} GiB; "
                             f"{d.name} holds at most {min(limit, d.global_memory // 2) / 2**30:.2f}"
                             " GiB in one piece: reconstruct a smaller volume")
        if images > limit:
            raise ValueError(f"params: {self.params.projections_per_pass} projections per "
                             f"pass take {images / 2**30:.2f} GiB, over {d.name}'s largest "
                             "buffer: use fewer projections_per_pass")
        if matrices > d.constant_memory:
            raise ValueError(f"params: the matrices of {self.params.projections_per_pass} "
                             f"projections per pass take {matrices} bytes, over {d.name}'s "
                             f"{d.constant_memory} of constant memory: use fewer "
                             "projections_per_pass")

    def global_size(self) -> tuple:
        nz, ny, nx = self.geometry.volume_shape
        (gx, gy), vpi = self.params.group, self.params.voxels_per_item
        return (-(-nx // gx) * gx, -(-ny // gy) * gy, -(-nz // vpi))

    def upload(self, images):
        """Copy ``images`` (at most a pass of them) into the pass buffer, as float32."""
        cl.enqueue_copy(self.queue, self._images, np.ascontiguousarray(images, np.float32))

    def launch(self, first, count, accumulate):
        """Back-project the ``count`` images in the pass buffer (projections from
        ``first``) into the volume buffer."""
        nz, ny, nx = self.geometry.volume_shape
        n_rows, n_cols = self.geometry.detector_shape
        cl.enqueue_copy(self.queue, self._matrices, self.matrices[first:first + count])
        return self.kernel(self.queue, self.global_size(), self.params.group + (1,),
                           projections=self._images, matrices=self._matrices,
                           n_projections=count, n_rows=n_rows, n_cols=n_cols, nx=nx, ny=ny,
                           first_plane=0, n_planes=nz, accumulate=accumulate,
                           volume=self._volume)

    def backproject(self, projections, out) -> np.ndarray:
        """The back-projection of ``projections`` (checked, ``(n_angles, n_rows,
        n_cols)``) into ``out`` (a float32 array of the volume's shape, or any array the
        result is copied to)."""
        per_pass = self.params.projections_per_pass
        n = self.geometry.n_angles
        for first in range(0, n, per_pass):
            count = min(per_pass, n - first)
            self.upload(projections[first:first + count])
            self.launch(first, count, first > 0)
        volume = out if isinstance(out, np.ndarray) and out.dtype == np.float32 and \
            out.flags.c_contiguous else np.empty(self.geometry.volume_shape, np.float32)
        cl.enqueue_copy(self.queue, volume, self._volume)
        if volume is not out:
            out[...] = volume
        return out

    def close(self):
        self._volume = self._images = self._matrices = None
