"""The parallel-beam back-projection as stages of the stream: a chunk's sinograms
packed into texels (interleaved slices, Sect. 5.2) piece by piece, back-projected in
tiles paced by the executor's pacer (pybp/cl/pacing.py), and, with ``circle``, the
pixels outside the reconstruction circle zeroed."""

from __future__ import annotations

import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.images import CHANNEL_ORDERS, CHANNEL_TYPES
from pybp.parallel import kernels
from pybp.parallel.plan import Plan
from pybp.stages.base import Need, Stage


class Backproject(Stage):
    """Every pass of ``plan`` over a chunk's sinograms into its slices. A chunk's
    slices go in passes of the memory plan's ``pass_width`` (narrower than the plan's
    where memory is short); each pass packs and back-projects its pieces, later pieces
    adding to what the first wrote."""

    name = "backproject"

    def __init__(self, context, device, plan: Plan):
        self.context, self.device, self.plan = context, device, plan
        g = plan.geometry
        ny, nx = g.slice_shape
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._tables = {width: [cl.Buffer(context, flags, hostbuf=table) for table in p.tables]
                        for width, p in plan.passes.items()}
        self._texels = cl.Buffer(context, cl.mem_flags.READ_WRITE, plan.texel_bytes)
        self._images = {}
        self._kernels = {width: self._build(p.params) for width, p in plan.passes.items()}
        self.needs = (Need("sinograms", g.n_angles * g.n_bins * 4), Need("scales", 4),
                      Need("slices", ny * nx * 4))
        self.shared_bytes = 2 * plan.texel_bytes  # the texels, and their image

    def _build(self, params):
        """The ``pack`` and ``backproject`` kernels of a parameter set (a build error
        comes here, before any work)."""
        pack_params = kernels.pack_params(params)
        return (codegen.declared(self.context, self.device, kernels.pack_source(params), "pack",
                                 kernels.pack_args(pack_params)),
                codegen.declared(self.context, self.device, kernels.backproject_source(params),
                                 "backproject", kernels.backproject_args(params)))

    def enqueue(self, chunk):
        g, plan, q, pacer = self.plan.geometry, self.plan, chunk.queue, chunk.pacer
        ny, nx = g.slice_shape
        b, stages = chunk.buffers, []
        width = chunk.memory.pass_width
        for start in range(0, chunk.count, width):
            n = min(width, chunk.count - start)
            pass_width = plan.width_for(n)
            pass_plan = plan.passes[pass_width]
            params = pass_plan.params
            pack, backproject = self._kernels[pass_width]
            for index, (piece, table) in enumerate(zip(pass_plan.pieces, self._tables[pass_width])):
                items = kernels.PACK_ITEMS
                stages.append(("pack", pack(
                    q, (-(-piece.n_bins // items) * items, piece.n_angles), (items, 1),
                    sinograms=b["sinograms"], first_slice=start, n_slices=n,
                    n_angles=g.n_angles, n_bins=g.n_bins, first_angle=piece.first_angle,
                    first_bin=piece.first_bin, piece_angles=piece.n_angles,
                    piece_bins=piece.n_bins, scales=b["scales"], texels=self._texels)))
                texels = self._texels
                if params.source == "image":
                    texels, copy = self._load_image(q, params, piece)
                    stages.append(("pack", copy))
                for x, y, columns, rows in pacer.tiles(g.slice_shape, params.group_side,
                                                       piece.n_angles * n):
                    updates = columns * rows * piece.n_angles * n
                    pacer.admit("backproject", updates, chunk.stop)
                    event = backproject(
                        q, params.global_size((rows, columns)), params.local_size,
                        sinogram=texels, projection=table, n_angles=piece.n_angles,
                        n_bins=piece.n_bins, nx=nx, ny=ny, accumulate=index > 0,
                        first_plane=start, first_column=x, first_row=y, out=b["slices"])
                    q.flush()  # the pacer waits on it
                    pacer.launched(event, "backproject", updates)
                    stages.append(("backproject", event))
        return stages

    def _load_image(self, queue, params, piece):
        """Copy the packed texels of a piece into its image, made once per shape.

        Images are exactly the piece's size: their clamp-to-zero border is the edge."""
        shape = (piece.n_bins, piece.n_angles * params.texel_rows)
        key = (params.texel_channels, params.storage, shape)
        if key not in self._images:
            fmt = cl.ImageFormat(CHANNEL_ORDERS[params.texel_channels], CHANNEL_TYPES[params.storage])
            self._images[key] = cl.create_image(self.context, cl.mem_flags.READ_ONLY, fmt, shape=shape)
        copy = cl.enqueue_copy(queue, self._images[key], self._texels, offset=0,
                               origin=(0, 0), region=shape)
        return self._images[key], copy

    def close(self):
        self._images.clear()
        self._texels = None


class Circle(Stage):
    """Zero the pixels outside the reconstruction circle of ``radius`` pixels about the
    axis (None: the circle every projection sees; pybp.geometry.parallel.ParallelGeometry.circle_columns)."""

    name = "circle"

    def __init__(self, context, device, geometry, radius=None):
        self.slice_shape = geometry.slice_shape
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._inside = cl.Buffer(context, flags, hostbuf=geometry.circle_columns(radius))
        self.kernel = codegen.declared(context, device, kernels.circle_source(),
                                       "outside_circle", kernels.CIRCLE_ARGS)
        ny, nx = self.slice_shape
        self.needs = (Need("slices", ny * nx * 4),)

    def enqueue(self, chunk):
        ny, nx = self.slice_shape
        items = kernels.CIRCLE_ITEMS
        return [(self.name, self.kernel(
            chunk.queue, (-(-nx // items) * items, ny, chunk.count), (items, 1, 1),
            slices=chunk.buffers["slices"], nx=nx, ny=ny, inside=self._inside))]
