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

import numpy as np

HALF_TARGET = 2.0 ** 14  # a slice's largest possible texel after scaling; half tops at 65504
FLOAT32_MAX = float(np.finfo(np.float32).max)
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


def result_bound(n_angles, weights=None, filter_gain=None) -> float:
    """Per unit of a slice's largest absolute value, the largest value any stage of
    the back-projection can reach. Filtering grows a row by at most the filter's gain
    (its kernel's L1 norm) before each angle's weight; a plain back-projection sums at
    most ``n_angles`` values."""
    if filter_gain is None:
        return float(n_angles)
    return filter_gain * max(1.0, float(np.asarray(weights, np.float64).sum()))
