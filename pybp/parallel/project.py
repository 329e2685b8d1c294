"""The matched pair of parallel-beam operators on one device: the forward projection A
and its exact transpose A^T (templates/operators/parallel.cl.mako), on device buffers
of a volume ``(n_rows, ny, nx)`` and projections ``(n_angles, n_rows, n_bins)``."""

from __future__ import annotations

import copy

import numpy as np
import pyopencl as cl

from pybp.cl import codegen, pacing, transpose
from pybp.cl.kernel import Arg, global_size, ints
from pybp.geometry.parallel import Geometry

TABLE = Arg("constants", "__global const long4 *",
            "per angle: cos, -sin, base, 0 in 32.32 fixed point")
SIZES = ints("n_angles", "n_rows", "n_bins", "nx", "ny")
FORWARD_ARGS = (
    Arg("volume", "__global const float *", "n_rows x ny x nx"),
    Arg("transposed", "__global const float *", "the same, n_rows x nx x ny"), TABLE,
    Arg("projections", "__global float *", "n_angles x n_rows x n_bins"), *SIZES,
    Arg("first_angle", "const int", "the launch's first angle (pybp/cl/pacing.py)"),
)
BACKWARD_ARGS = (
    Arg("projections", "__global const float *", "n_angles x n_rows x n_bins"), TABLE,
    Arg("volume", "__global float *", "n_rows x ny x nx"), *SIZES,
    Arg("first_row_group", "const int", "the launch's first group of ROWS rows "
        "(pybp/cl/pacing.py)"),
)
TO_PROJECTIONS_ARGS = (
    Arg("sinograms", "__global const float *", "n_rows x n_angles x n_bins"),
    Arg("projections", "__global float *", "n_angles x n_rows x n_bins"),
    *ints("n_angles", "n_rows", "n_bins"),
)
TO_PROJECTIONS_GROUP = (64, 1, 1)
FLOAT_BYTES = 4
# (angles, pairs of bins, 1): a warp of neighbouring angles reads nearly the same pixels
FORWARD_GROUP = (32, 2, 1)
BACKWARD_GROUP = (16, 8, 1)  # a tile of pixels of a slice
ROWS_PER_ITEM = 8  # slices a work-item takes: one position serves them all
LAUNCH_ITEMS_PER_UNIT = 8192  # the fewest forward work-items a launch has per compute unit


def source(rows: int) -> str:
    return codegen.render("operators/parallel.cl.mako",
                          {"parallel_forward": FORWARD_ARGS, "parallel_backward": BACKWARD_ARGS,
                           "transpose_slices": transpose.ARGS,
                           "sinograms_to_projections": TO_PROJECTIONS_ARGS},
                          rows=rows, forward_group=FORWARD_GROUP, backward_group=BACKWARD_GROUP,
                          tile=transpose.TILE, to_projections_group=TO_PROJECTIONS_GROUP)


class ParallelPair:
    """A and A^T of ``geometry`` for ``n_rows`` slices on ``queue``'s device. Launches
    last at most about :data:`pacing.LAUNCH_SECONDS` at the device type's first rate,
    one queued ahead of another, so that Ctrl-C acts between them. ``transposed``: a
    buffer of a volume's bytes for the forward projection's transposed copy (default:
    its own)."""

    def __init__(self, geometry: Geometry, n_rows: int, context, queue, device, transposed=None):
        self.geometry, self.n_rows, self.queue = geometry, n_rows, queue
        ny, nx = geometry.slice_shape
        self.volume_shape = (n_rows, ny, nx)
        self.projection_shape = (geometry.n_angles, n_rows, geometry.n_bins)
        # independent problems for the methods (pybp/iterative/methods.py): each slice, its
        # elements in runs of a slice and of a projection row
        self.problems, self.volume_block, self.projection_block = n_rows, ny * nx, geometry.n_bins
        self._table = geometry.fixed_constants()
        self.constants = cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                   hostbuf=self._table)
        self.rows_per_item = min(ROWS_PER_ITEM, n_rows)
        self.row_groups = -(-n_rows // self.rows_per_item)
        text = source(self.rows_per_item)
        self._forward = codegen.declared(context, device, text, "parallel_forward", FORWARD_ARGS)
        self._backward = codegen.declared(context, device, text, "parallel_backward",
                                          BACKWARD_ARGS)
        self._transpose = codegen.declared(context, device, text, "transpose_slices",
                                           transpose.ARGS)
        self._to_projections = codegen.declared(context, device, text, "sinograms_to_projections",
                                                TO_PROJECTIONS_ARGS)
        self._transposed = transposed or cl.Buffer(context, cl.mem_flags.READ_WRITE,
                                                   FLOAT_BYTES * n_rows * ny * nx)
        rate = pacing.FIRST_RATE.get(device.type, pacing.OTHER_RATE)
        self._launch_updates = max(1, int(rate * pacing.LAUNCH_SECONDS))
        self._launch_items = LAUNCH_ITEMS_PER_UNIT * device.compute_units
        self.sizes = dict(n_angles=geometry.n_angles, n_rows=n_rows, n_bins=geometry.n_bins,
                          nx=nx, ny=ny)

    def updates(self) -> int:
        """Pixel updates of one application of either operator (the numerator of GU/s)."""
        ny, nx = self.geometry.slice_shape
        return ny * nx * self.sizes["n_angles"] * self.n_rows

    def restricted(self, angles) -> ParallelPair:
        """The pair of the projections at indices ``angles`` alone (their rows of A, the
        same floats): the same kernels and transposed copy, a table of those angles, and
        projections ``(len(angles), n_rows, n_bins)`` (SART's subsets)."""
        part = copy.copy(self)
        table = np.ascontiguousarray(self._table[np.asarray(angles)])
        part._table = table
        part.constants = cl.Buffer(self.queue.context,
                                   cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                   hostbuf=table)
        part.sizes = dict(self.sizes, n_angles=len(table))
        part.projection_shape = (len(table),) + self.projection_shape[1:]
        return part

    def forward(self, volume, projections, wait_for=None):
        """projections = A volume (device buffers); the last launch's event."""
        ny, nx = self.geometry.slice_shape
        wait_for = [transpose.launch(self._transpose, self.queue, volume, self._transposed,
                                     self.n_rows, ny, nx, wait_for)]
        n_angles = self.sizes["n_angles"]
        per_angle = self.updates() // n_angles
        items = ((self.geometry.n_bins + 1) // 2, self.row_groups)
        # Enough angles that a launch fills the device (few slices give few items per
        # angle: 16 slices of 1024^2 at the launch duration's share ran at a quarter of
        # the rate), in whole groups of angles (a launch's last group would otherwise
        # overlap the next).
        angles = FORWARD_GROUP[0]
        filling = -(-self._launch_items // (items[0] * items[1]))
        wanted = max(self._launch_updates // max(1, per_angle), filling)
        step = angles * max(1, min(n_angles, wanted) // angles)
        return pacing.launches(
            lambda first, count, wait: self._forward(
                self.queue, global_size((count, *items), FORWARD_GROUP), FORWARD_GROUP,
                wait_for=wait, volume=volume, transposed=self._transposed, constants=self.constants, projections=projections, first_angle=first,
                **self.sizes),
            n_angles, step, wait_for)

    def backward(self, projections, volume, wait_for=None):
        """volume = A^T projections (device buffers); the last launch's event."""
        per_group = self.updates() // self.row_groups
        step = max(1, min(self.row_groups, self._launch_updates // max(1, per_group)))
        ny, nx = self.geometry.slice_shape
        return pacing.launches(
            lambda first, count, wait: self._backward(
                self.queue, global_size((nx, ny, count), BACKWARD_GROUP), BACKWARD_GROUP,
                wait_for=wait, projections=projections, constants=self.constants,
                volume=volume, first_row_group=first, **self.sizes),
            self.row_groups, step, wait_for)

    def from_sinograms(self, sinograms, projections, wait_for=None):
        """projections ``(n_angles, n_rows, n_bins)`` of sinograms ``(n_rows, n_angles,
        n_bins)`` (the stream's layout; device buffers); the event."""
        sizes = dict(n_angles=self.sizes["n_angles"], n_rows=self.n_rows,
                     n_bins=self.sizes["n_bins"])
        return self._to_projections(
            self.queue, global_size((sizes["n_bins"], sizes["n_angles"], self.n_rows),
                                    TO_PROJECTIONS_GROUP),
            TO_PROJECTIONS_GROUP, wait_for=wait_for, sinograms=sinograms,
            projections=projections, **sizes)
