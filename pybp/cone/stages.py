"""FDK's weights as a stage of the stream: a chunk's line integrals (sinograms of its
detector rows, as normalisation, phase retrieval and ring removal leave them) times
the cosine of each ray and its column's weight (pybp/geometry/cone_weights.py), in
place, before the shared row filter (templates/cone/preweight.cl.mako: the weight
function of the passes' pre-weighting, so a pixel gets the same bits either way)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cone import kernels
from pybp.geometry import cone_weights
from pybp.stages.base import Need, Stage
from pybp.stages.normalize import FLOOR_TRANSMISSION

COLUMN_ITEMS = 64  # work-items along a projection row


class Weight(Stage):
    """FDK's pre-weighting of ``geometry``'s projections (``short_scan`` as for
    :func:`pybp.geometry.cone_weights.column_weights`) on a chunk's sinograms, which
    must start at the detector row :attr:`pybp.stages.base.Chunk.first_row`."""

    name = "preweight"
    # Rows per chunk: filtering a row is cheap beside its transfers, so chunks of many
    # rows (parallel beam's 4 are sized for the back-projection's slices) keep the
    # per-chunk costs small.
    chunk_rows = 32

    def __init__(self, context, device, geometry, short_scan=None):
        self.n_angles, self.n_cols = geometry.n_angles, geometry.detector_shape[1]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        poses = np.ascontiguousarray(cone_weights.poses(geometry).packed(), np.float32)
        columns = np.ascontiguousarray(cone_weights.column_weights(geometry, short_scan),
                                       np.float32)
        self.poses = cl.Buffer(context, flags, hostbuf=poses)
        self.columns = cl.Buffer(context, flags, hostbuf=columns)
        self.shared_bytes = poses.nbytes + columns.nbytes
        self.kernel = codegen.declared(context, device,
                                       kernels.weight_rows_source(FLOOR_TRANSMISSION),
                                       "cone_weight_rows", kernels.WEIGHT_ROWS_ARGS)
        self.needs = (Need("sinograms", self.n_angles * self.n_cols * 4),)

    def enqueue(self, chunk):
        grid = (-(-self.n_cols // COLUMN_ITEMS) * COLUMN_ITEMS, self.n_angles, chunk.count)
        return [(self.name, self.kernel(
            chunk.queue, grid, (COLUMN_ITEMS, 1, 1), sinograms=chunk.buffers["sinograms"],
            poses=self.poses, column_weights=self.columns, first_row=chunk.first_row,
            n_angles=self.n_angles, n_cols=self.n_cols))]

    def close(self):
        self.poses = self.columns = None
