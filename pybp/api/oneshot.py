"""One-shot back-projection and FBP (``pybp.backproject``, ``pybp.fbp``): a
:class:`pybp.Backprojector` made for one call and closed after (its device's
context and built programs are kept for the next), with ``center="auto"`` found by
:func:`pybp.parallel.centre.find_center`."""

from __future__ import annotations

import numpy as np

from pybp.parallel.centre import find_center
from pybp.api.sinograms import Backprojector


def _n_bins(sinograms):
    if np.ndim(sinograms) < 2:
        raise ValueError(f"sinograms: expected (n_angles, n_bins) or (n_slices, n_angles, n_bins), "
                         f"got shape {np.shape(sinograms)}")
    return np.shape(sinograms)[-1]


def backproject(sinograms, angles, **options):
    """One-shot back-projection of the data as given: no filter (giving one is an
    error; use :func:`fbp`). Options as for :class:`Backprojector` (the progress line
    on for calls longer than 2 s); ``out``: an array for the result."""
    if options.get("filter") is not None:
        raise ValueError("filter: pybp.backproject does not filter; use pybp.fbp")
    options.setdefault("progress", True)
    out = options.pop("out", None)
    with Backprojector(_n_bins(sinograms), angles, **options) as bp:  # memory freed at once,
        return bp(sinograms, out=out)                                 # on Ctrl-C too


def fbp(sinograms, angles, filter="ramp", **options):
    """One-shot filtered back-projection; ``filter`` is one of :data:`pybp.stages.filters.FILTERS`
    (default ``"ramp"``), ``padding`` ``"zero"`` (default) or ``"edge"`` (truncated
    scans). Other options as for :class:`Backprojector` (axis at ``(n_bins - 1) / 2``
    unless ``center`` is given; ``circle=True`` zeroes outside the reconstruction
    circle; the progress line on for calls longer than 2 s, within a slice too);
    ``out``: an array for the result."""
    if filter is None:
        raise ValueError("filter: FBP needs a filter; use pybp.backproject for none")
    options.setdefault("progress", True)
    out = options.pop("out", None)
    if isinstance(options.get("center"), str) and options["center"] == "auto":
        stack = np.asarray(sinograms)
        rows = stack if stack.ndim == 2 else stack.mean(axis=0)
        options["center"] = find_center(rows, angles, device=options.get("device"),
                                        angle_unit=options.get("angle_unit"))
    with Backprojector(_n_bins(sinograms), angles, filter=filter, **options) as bp:
        return bp(sinograms, out=out)
