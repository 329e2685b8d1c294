"""Projection angles on a circle: the gaps between neighbouring directions, and the
angular weight each projection stands for (half the gaps to its neighbours). Parallel
beam folds directions onto a circle of period pi (theta and theta + pi see the same
lines); cone beam's sources lie on one of 2 pi."""

from __future__ import annotations

import numpy as np

from pybp.checks import float_array

ANGLE_UNITS = ("rad", "deg")
TURN = 2 * np.pi * (1 + 1e-6)  # a span beyond one turn of radians (and rounding) looks like degrees
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


def in_radians(angles, angle_unit=None, name="angles") -> np.ndarray:
    """``angles`` as finite float64 radians, one rule for every public call:
    ``angle_unit="deg"`` converts degrees; ``"rad"`` takes radians as they are; None
    (the default) takes radians too, but refuses angles that span more than one turn
    (2 pi): degrees given as radians would reconstruct garbage, silently. A scan of
    several turns in radians passes ``angle_unit="rad"``."""
    if angle_unit is not None and angle_unit not in ANGLE_UNITS:
        raise ValueError(f"angle_unit: expected 'rad', 'deg' or None, got {angle_unit!r}")
    values = float_array(angles, name, 1)
    if angle_unit == "deg":
        return np.radians(values)
    span = float(np.ptp(values))
    if angle_unit is None and span > TURN:
        raise ValueError(f"{name}: they span {span:.6g}, more than one turn (2 pi) of radians: "
                         "degrees? Give np.radians of them, or angle_unit='deg'; "
                         "angle_unit='rad' takes them as radians (a scan of several turns)")
    return values
