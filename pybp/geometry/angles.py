"""Projection angles on a circle: the gaps between neighbouring directions, and the
angular weight each projection stands for (half the gaps to its neighbours). Parallel
beam folds directions onto a circle of period pi (theta and theta + pi see the same
lines); cone beam's sources lie on one of 2 pi."""

from __future__ import annotations

import numpy as np

# A gap between neighbouring directions wider than this many typical steps is treated as
# missing data (a missing wedge, a run of lost projections): it counts as this many
# typical steps when the projections beside it are weighted (docs/design.md, section 1).
GAP_FACTOR = 4


def circle_gaps(angles, period):
    """``(order, gaps, typical)``: the order of ``angles`` folded onto a circle of
    ``period``, the gap from each (in that order) to the next around the circle, and
    the typical gap: the median of the distinct ones (angles repeated by a scan over
    two periods leave gaps of nearly zero)."""
    folded = np.mod(angles, period)
    order = np.argsort(folded, kind="stable")
    ordered = folded[order]
    gaps = np.diff(np.concatenate([ordered, [ordered[0] + period]]))
    distinct = gaps[gaps > 1e-3 * period / gaps.size]
    typical = period / gaps.size
    if distinct.size:  # the median, spelled out: np.median imports numpy.ma (8 ms of start-up)
        middle = np.sort(distinct)[[(distinct.size - 1) // 2, distinct.size // 2]]
        typical = 0.5 * (middle[0] + middle[1])
    return order, gaps, typical


def gap_weights(angles, period) -> np.ndarray:
    """Each projection's half of the gaps to its neighbours on a circle of ``period``, a
    gap wider than ``GAP_FACTOR`` typical steps counted as that many (the projections
    beside missing data are not weighted to fill it)."""
    order, gaps, typical = circle_gaps(angles, period)
    gaps = np.minimum(gaps, GAP_FACTOR * typical)
    weights_sorted = 0.5 * (gaps + np.roll(gaps, 1))
    weights = np.empty_like(weights_sorted)
    weights[order] = weights_sorted
    return weights
