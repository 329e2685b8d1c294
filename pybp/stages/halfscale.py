"""Half storage at any data scale, and the float32 range of results.

Half floats hold 11 significant bits between 6.1e-5 and 65504. Sinograms scaled by 1e-4
(or FBP's angular weight of pi/n times a small signal) fall into half's subnormals and
lose their bits; values over 65504 become inf. So each slice is multiplied by a power of
two before packing, chosen on the device from its largest texel (after filtering) so
that it lands near ``HALF_TARGET``,
and the back-projection is multiplied back by its inverse: both exact, and any finite
float32 sinogram keeps half's precision. What float32 itself cannot hold (a
back-projection summing past 3.4e38) is refused before any work.
"""

from __future__ import annotations

import functools

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg
from pybp.stages.base import Need, Stage, Zeros

HALF_TARGET = 2.0 ** 14  # a slice's largest possible texel after scaling; half tops at 65504
FLOAT32_MAX = float(np.finfo(np.float32).max)
PEAK_ITEMS = 256  # work-items of a slice's peak search (one work-group per 64 at most)
PEAK_GROUPS = 64  # work-groups per slice of the peak search
UNSCALE_ITEMS = 256  # work-items per row of the unscaling launch
# Powers of two whose inverse is also a normal float32.
_EXPONENTS = (-126, 126)


def half_scales(bounds) -> np.ndarray:
    """Per slice, the power of two that brings ``bounds`` (the largest absolute value a
    texel of that slice can take) to at most ``HALF_TARGET``; 1 for an all-zero slice."""
    bounds = np.asarray(bounds, np.float64)
    exponents = np.zeros(bounds.shape)
    positive = bounds > 0
    exponents[positive] = np.floor(np.log2(HALF_TARGET / bounds[positive]))
    return 2.0 ** np.clip(exponents, *_EXPONENTS)


def half_round(values, scales) -> np.ndarray:
    """What half storage keeps of ``values`` (slices first), as float64: the reference's
    view of the texels."""
    values = np.asarray(values, np.float64)
    shape = (-1,) + (1,) * (values.ndim - 1)
    scales = np.asarray(scales, np.float64).reshape(shape)
    return (values * scales).astype(np.float16).astype(np.float64) / scales


def check_range(bounds, name="sinograms", what="back-projection"):
    """Refuse data whose results could overflow float32: ``bounds`` are, per slice, the
    largest absolute value any intermediate or output can reach."""
    bounds = np.asarray(bounds, np.float64)
    worst = float(bounds.max()) if bounds.size else 0.0
    if worst >= FLOAT32_MAX / 2:
        raise ValueError(f"{name}: values this large could overflow float32 in the {what} "
                         f"(up to {worst:.3g}, float32 holds 3.4e38); scale the data down")


def result_bound(n_angles, weights=None, filter_gain=None, points=None) -> float:
    """Per unit of a slice's largest absolute value, the largest value any stage of
    the back-projection can reach. Filtering grows a row by at most the filter's gain
    (its kernel's L1 norm) before each angle's weight, and its transform of ``points``
    (the padded row) sums as many values into one frequency on the way (a row of 48
    values of 1e37 made inf there: FBP gave NaN); a plain back-projection sums at most
    ``n_angles`` values."""
    if filter_gain is None:
        return float(n_angles)
    return max(filter_gain * max(1.0, float(np.asarray(weights, np.float64).sum())),
               float(points or 0))


KERNELS = {
    "slice_peaks": (Arg("planes", "__global const float *"),
                    Arg("plane", "const int", "values per plane"),
                    Arg("peaks", "__global uint *")),
    "half_scales": (Arg("peaks", "__global const uint *"),
                    Arg("bound", "const float"),
                    Arg("target", "const float"),
                    Arg("n_planes", "const int"),
                    Arg("scales", "__global float *")),
    "unscale": (Arg("slices", "__global float *", "a chunk's planes of `plane` pixels"),
                Arg("plane", "const int"),
                Arg("scales", "__global const float *", "per plane")),
}


@functools.lru_cache(maxsize=1)
def source() -> str:
    return codegen.render("stages/halfscale.cl.mako", KERNELS, peak_items=PEAK_ITEMS)


def kernels(context, device) -> dict:
    return {name: codegen.declared(context, device, source(), name, args)
            for name, args in KERNELS.items()}


class HalfScale(Stage):
    """Before packing into half texels: per slice of the chunk's sinograms (after the
    filter), the power of two that brings its largest value to ``HALF_TARGET``
    (``scales``, read by the back-projection's packing)."""

    name = "half"

    def __init__(self, context, device, n_angles, n_bins):
        self.plane = n_angles * n_bins
        self.kernels = kernels(context, device)
        self.needs = (Need("sinograms", self.plane * 4), Need("peaks", 4), Need("scales", 4))
        self._zeros = Zeros()

    def enqueue(self, chunk):
        b, q, count, k = chunk.buffers, chunk.queue, chunk.count, self.kernels
        groups = min(PEAK_GROUPS, -(-self.plane // PEAK_ITEMS))
        return [("half", cl.enqueue_copy(q, b["peaks"], self._zeros(count), is_blocking=False)),
                ("half", k["slice_peaks"](q, (groups * PEAK_ITEMS, count), (PEAK_ITEMS, 1),
                                          planes=b["sinograms"], plane=self.plane,
                                          peaks=b["peaks"])),
                ("half", k["half_scales"](q, (count,), None, peaks=b["peaks"], bound=1.0,
                                          target=HALF_TARGET, n_planes=count,
                                          scales=b["scales"]))]


class Unscale(Stage):
    """After the back-projection of half texels: each slice divided by its scale."""

    name = "half"

    def __init__(self, context, device, slice_shape):
        self.pixels = int(slice_shape[0]) * int(slice_shape[1])
        self.kernel = kernels(context, device)["unscale"]
        self.needs = (Need("slices", self.pixels * 4), Need("scales", 4))

    def enqueue(self, chunk):
        b, items = chunk.buffers, UNSCALE_ITEMS
        return [("half", self.kernel(chunk.queue, (-(-self.pixels // items) * items, chunk.count),
                                     (items, 1), slices=b["slices"], plane=self.pixels,
                                     scales=b["scales"]))]
