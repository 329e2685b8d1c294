"""The matched pair of parallel-beam operators on one device: the forward projection A
and its exact transpose A^T (templates/operators/parallel.cl.mako), on device buffers
of a volume ``(n_rows, ny, nx)`` and projections ``(n_angles, n_rows, n_bins)``. A is
distance-driven (:meth:`pybp.geometry.parallel.ParallelGeometry.footprints`): line integrals in
the geometry's units of length of a volume of attenuation per unit."""

from __future__ import annotations

import copy

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp.cl import codegen, pacing
from pybp.cl.kernel import Arg, global_size, ints
from pybp.geometry.parallel import ParallelGeometry

TABLE = Arg("constants", "__global const long4 *",
            "per angle: cos, -sin, base in 32.32 fixed point; footprint width, amplitude")
SIZES = ints("n_angles", "n_rows", "n_bins", "nx", "ny")
FORWARD_ARGS = (
    Arg("by_rows", "__global const stack *", "groups x ny x nx stacks of ROWS slices"),
    Arg("by_columns", "__global const stack *", "the same, groups x nx x ny"), TABLE,
    Arg("projections", "__global float *", "n_angles x n_rows x n_bins"), *SIZES,
    Arg("first_angle", "const int", "the launch's first angle (pybp/cl/pacing.py)"),
)
BACKWARD_ARGS = (
    Arg("stacks", "__global const stack *", "n_angles x groups x n_bins stacks of ROWS rows"),
    TABLE, Arg("volume", "__global float *", "n_rows x ny x nx"), *SIZES,
    Arg("first_row_group", "const int", "the launch's first group of ROWS rows "
        "(pybp/cl/pacing.py)"),
)
STACK_SLICES_ARGS = (
    Arg("volume", "__global const float *", "n_rows x ny x nx"),
    Arg("by_rows", "__global stack *", "groups x ny x nx"),
    Arg("by_columns", "__global stack *", "groups x nx x ny"), *ints("n_rows", "ny", "nx"),
)
STACK_PROJECTIONS_ARGS = (
    Arg("projections", "__global const float *", "n_angles x n_rows x n_bins"), TABLE,
    Arg("stacks", "__global stack *", "n_angles x groups x n_bins"),
    *ints("n_rows", "n_bins"),
)
TO_PROJECTIONS_ARGS = (
    Arg("sinograms", "__global const float *", "n_rows x n_angles x n_bins"),
    Arg("projections", "__global float *", "n_angles x n_rows x n_bins"),
    *ints("n_angles", "n_rows", "n_bins"),
)
TO_PROJECTIONS_GROUP = (64, 1, 1)
STACK_TILE = 16  # the side of stack_slices's blocks
FLOAT_BYTES = 4
# (angles, runs of BINS_PER_ITEM bins, 1): a warp of neighbouring angles reads nearly the
# same pixels (on the H100, 2048^2 x 64 from 2048 angles: 32 x 4 0.2731 s, 32 x 8 0.2732,
# 16 x 8 0.2730). The first the device runs the kernel with: a device may run fewer
# work-items a group than it could run of a kernel with fewer registers.
FORWARD_GROUPS = ((32, 4, 1), (32, 1, 1))
# A forward work-item's bins, which share its loads: 3 (0.2732 s) against 4 (0.2794),
# 2 (0.3132); 5 and more took more registers and instructions than they saved in
# loads (0.3770 against 0.2751 for 3, in another sweep)
BINS_PER_ITEM = 3
BACKWARD_GROUP = (4, 8, 1)  # a block of pixels of a slice, a warp of NVIDIA's
ROWS_PER_ITEM = 8  # slices a work-item takes: one position and one load serve them all


def rows_per_item(n_rows: int) -> int:
    """Slices a work-item takes for ``n_rows``: a vector's width (1, 2, 4 or 8), the
    fewest at least ``n_rows`` up to :data:`ROWS_PER_ITEM`."""
    rows = 1
    while rows < min(n_rows, ROWS_PER_ITEM):
        rows *= 2
    return rows


def stacked_rows(n_rows: int) -> int:
    """Rows of the pair's stacked copies: ``n_rows`` up to a whole group."""
    rows = rows_per_item(n_rows)
    return -(-n_rows // rows) * rows


def scratch_bytes(geometry: ParallelGeometry, n_rows: int) -> int:
    """Device bytes of the pair's own copies for ``n_rows`` slices: the volume stacked
    two ways and the projections stacked once (:class:`ParallelPair`)."""
    ny, nx = geometry.slice_shape
    return FLOAT_BYTES * stacked_rows(n_rows) * (2 * ny * nx + geometry.n_angles * geometry.n_bins)


def span(geometry: ParallelGeometry) -> int:
    """The most bins a voxel's footprint covers at any of ``geometry``'s angles:
    ``ceil(width) + 1`` of the widest (2 where voxels are no wider than bins)."""
    return int(np.ceil(geometry.footprints()[0].max())) + 1


def source(rows: int, forward_group, bins_spanned: int) -> str:
    return codegen.render("operators/parallel.cl.mako",
                          {"parallel_forward": FORWARD_ARGS, "parallel_backward": BACKWARD_ARGS,
                           "stack_slices": STACK_SLICES_ARGS,
                           "stack_projections": STACK_PROJECTIONS_ARGS,
                           "sinograms_to_projections": TO_PROJECTIONS_ARGS},
                          rows=rows, bins=BINS_PER_ITEM, span=bins_spanned,
                          forward_group=forward_group,
                          backward_group=BACKWARD_GROUP,
                          tile=STACK_TILE, projection_group=TO_PROJECTIONS_GROUP,
                          to_projections_group=TO_PROJECTIONS_GROUP)


class ParallelPair:
    """A and A^T of ``geometry`` for ``n_rows`` slices on ``queue``'s device. Launches
    last at most about :data:`pacing.LAUNCH_SECONDS` at the device type's first rate,
    one queued ahead of another, so that Ctrl-C acts between them.

    Both kernels read stacks of :func:`rows_per_item` slices, each pixel's values side
    by side, so that one vector load serves them all: before each forward projection the
    volume is copied stacked along rows and along columns, before each transpose the
    projections are (:func:`scratch_bytes` in all). ``allocate(shape)``: the float32
    device arrays for those copies (default: arrays of their own on ``queue``)."""

    # 4-byte loads an update takes (pybp bench --forward's ceiling): A^T the two bins of
    # its sample, A about two candidates per pixel on a line
    loads = 2
    method = None  # one way of A (cone beam's pair gathers or scatters, by the geometry)

    def __init__(self, geometry: ParallelGeometry, n_rows: int, context, queue, device, allocate=None):
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
        self.rows_per_item = rows_per_item(n_rows)
        self.row_groups = -(-n_rows // self.rows_per_item)
        self.span = span(geometry)
        for group in FORWARD_GROUPS:
            text = source(self.rows_per_item, group, self.span)
            try:
                self._forward = codegen.declared(context, device, text, "parallel_forward",
                                                 FORWARD_ARGS)
                break
            except codegen.BuildError:
                if group == FORWARD_GROUPS[-1]:
                    raise
        self.forward_group = group
        self._backward = codegen.declared(context, device, text, "parallel_backward",
                                          BACKWARD_ARGS)
        self._stack_slices = codegen.declared(context, device, text, "stack_slices",
                                              STACK_SLICES_ARGS)
        self._stack_projections = codegen.declared(context, device, text, "stack_projections",
                                                   STACK_PROJECTIONS_ARGS)
        self._to_projections = codegen.declared(context, device, text, "sinograms_to_projections",
                                                TO_PROJECTIONS_ARGS)
        allocate = allocate or (lambda shape: cla.empty(queue, shape, np.float32))
        rows = stacked_rows(n_rows)
        # kept as arrays: their buffers live as long as the pair
        self._copies = [allocate((rows, ny, nx)), allocate((rows, nx, ny)),
                        allocate((geometry.n_angles, rows, geometry.n_bins))]
        self._by_rows, self._by_columns, self._stacks = (array.data for array in self._copies)
        rate = pacing.FIRST_RATE.get(device.type, pacing.OTHER_RATE)
        self._launch_updates = max(1, int(rate * pacing.LAUNCH_SECONDS))
        self._launch_items = pacing.launch_items(device)
        self.sizes = dict(n_angles=geometry.n_angles, n_rows=n_rows, n_bins=geometry.n_bins,
                          nx=nx, ny=ny)

    def updates(self) -> int:
        """Pixel updates of one application of either operator (the numerator of GU/s)."""
        ny, nx = self.geometry.slice_shape
        return ny * nx * self.sizes["n_angles"] * self.n_rows

    def restricted(self, angles) -> ParallelPair:
        """The pair of the projections at indices ``angles`` alone (their rows of A, the
        same floats): the same kernels and stacked copies, a table of those angles, and
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
        tiles = (STACK_TILE, STACK_TILE, 1)
        wait_for = [self._stack_slices(
            self.queue, global_size((nx, ny, self.row_groups), tiles), tiles,
            wait_for=wait_for, volume=volume, by_rows=self._by_rows,
            by_columns=self._by_columns, n_rows=self.n_rows, ny=ny, nx=nx)]
        n_angles = self.sizes["n_angles"]
        per_angle = self.updates() // n_angles
        items = (-(-self.geometry.n_bins // BINS_PER_ITEM), self.row_groups)
        # Enough angles that a launch fills the device (few slices give few items per
        # angle: 16 slices of 1024^2 at the launch duration's share ran at a quarter of
        # the rate), in whole groups of angles (a launch's last group would otherwise
        # overlap the next).
        angles = self.forward_group[0]
        filling = -(-self._launch_items // (items[0] * items[1]))
        wanted = max(self._launch_updates // max(1, per_angle), filling)
        step = angles * max(1, min(n_angles, wanted) // angles)
        return pacing.launches(
            lambda first, count, wait: self._forward(
                self.queue, global_size((count, *items), self.forward_group),
                self.forward_group,
                wait_for=wait, by_rows=self._by_rows, by_columns=self._by_columns,
                constants=self.constants, projections=projections, first_angle=first,
                **self.sizes),
            n_angles, step, wait_for)

    def backward(self, projections, volume, wait_for=None):
        """volume = A^T projections (device buffers); the last launch's event."""
        n_angles, n_bins = self.sizes["n_angles"], self.sizes["n_bins"]
        wait_for = [self._stack_projections(
            self.queue, global_size((n_bins, n_angles, self.row_groups), TO_PROJECTIONS_GROUP),
            TO_PROJECTIONS_GROUP, wait_for=wait_for, projections=projections,
            constants=self.constants, stacks=self._stacks, n_rows=self.n_rows, n_bins=n_bins)]
        per_group = self.updates() // self.row_groups
        step = max(1, min(self.row_groups, self._launch_updates // max(1, per_group)))
        ny, nx = self.geometry.slice_shape
        return pacing.launches(
            lambda first, count, wait: self._backward(
                self.queue, global_size((nx, ny, count), BACKWARD_GROUP), BACKWARD_GROUP,
                wait_for=wait, stacks=self._stacks, constants=self.constants,
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
