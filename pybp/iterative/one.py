"""One device's pair for the iterative methods, as :class:`pybp.iterative.team.Team`
gives a whole volume's devices to them: the pair, the vector steps, the arrays (the
methods' own allocator), TV's kernels. Parallel beam's slices run on one device so; its
several devices share slices out through the stream instead."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from pybp.iterative.tv import Variation
from pybp.iterative.vectors import Vectors


class OneDevice:
    """``pair`` on the device of ``context`` and ``queue`` (``description``: the
    device's :func:`pybp.cl.device.describe`)."""

    def __init__(self, pair, context, queue, description):
        self.pair, self.context, self.queue = pair, context, queue
        self.description = description
        self.descriptions = [description]
        self.vectors = Vectors(context, queue, description)
        self.allocate = None

    def upload(self, values) -> cla.Array:
        return cla.to_device(self.queue, np.ascontiguousarray(values))

    def fetch(self, array) -> np.ndarray:
        return array.get(queue=self.queue)

    def variation(self, dims) -> Variation:
        return Variation(self.context, self.queue, self.description, self.pair.volume_shape,
                         dims)

    def close(self):
        pass
