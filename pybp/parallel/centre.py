"""Rotation-axis estimation (docs/design.md, section 1: ``center`` is the axis' detector column,
0-based at the first pixel's centre).

- :func:`vo_center`: Vo's Fourier method (N. T. Vo et al., Opt. Express 22, 2014). A 180
  degree sinogram joined to its mirror (the 180-360 degree half it implies for a trial
  axis) is a consistent 360 degree sinogram only for the right axis; a wrong axis puts
  energy into the double wedge of the 2-D Fourier plane where a consistent sinogram has
  none. The search runs coarse to fine (detector binned for the wide coarse window, full
  resolution near the minimum, a parabola through the best three for the last step).
- :func:`refine_center`: Vo's estimate refined to a tenth of a pixel by a second
  criterion that does not assume a clean phantom: a wrong axis turns every edge of the
  slice into a crescent of negative values, so the trial axis whose FBP slice has the
  least negative mass wins (the criterion of independent FBP studies of real scans).
- :func:`registration_center`: the projection at 180 degrees is the one at 0 mirrored
  about the axis; their cross-correlation's peak gives the axis (a cross-check).
- :func:`find_center`: the public entry, for a sinogram or a scan.
"""

from __future__ import annotations

import importlib

import numpy as np

from pybp import checks
from pybp.geometry.angles import in_radians
from pybp.parallel import prepare
from pybp.stages.normalize import line_integrals_numpy
from pybp.stream.sources import frame_mean

COARSE_BINS = 256      # detector columns of the coarse search
MAX_ANGLES = 720       # sinogram rows used by the metric (more are averaged in groups)
WEDGE_RATIO = 0.5      # the object's width over the detector's (Vo's "ratio")
WEDGE_DROP = 20        # rows around zero angular frequency left out (Vo's "drop")
FINE_STEP = 0.125      # pixels, last search step before the parabola
EDGE_MARGIN = 0.1      # share of the detector not searched at each edge by default
SHADOW_LEVEL = 0.02    # of the largest mean absorption: where the object's shadow ends
REFINE_SPAN = 2.0      # pixels either side of Vo's estimate that the slices compare
REFINE_STEPS = (0.25, 0.05)  # trial axis steps: over the span, then about the best
REFINE_BINS = 1024     # detector columns the slices are made from (wider ones binned)
REFINE_PAD = 16        # columns of edge values around a row while it is shifted
REFINE_SMOOTH = 1.0    # columns (Gaussian sigma) the rows are smoothed over first


def _ndimage():
    """scipy.ndimage, loaded by the first search: importing it costs 0.1-0.2 s, a sixth
    of a whole ``pybp reconstruct`` of a small scan, and most commands are given the
    centre."""
    return importlib.import_module("scipy.ndimage")


def _wedge_mask(n_rows, n_cols, radius, drop):
    """The inverse double wedge: 1 where a consistent 360 degree sinogram has no
    energy (angular frequency beyond what an object of ``radius`` can make)."""
    du, dv = 1.0 / n_cols, (n_rows - 1.0) / (n_rows * 2.0 * np.pi)
    centre_row, centre_col = int(np.ceil(n_rows / 2.0) - 1), int(np.ceil(n_cols / 2.0) - 1)
    drop = min(drop, int(np.ceil(0.05 * n_rows)))
    mask = np.zeros((n_rows, n_cols), np.float32)
    for i in range(n_rows):
        pos = int(np.round(((i - centre_row) * dv / radius) / du))
        low, high = np.clip(np.sort((-pos + centre_col, pos + centre_col)), 0, n_cols - 1)
        mask[i, low:high + 1] = 1.0
    mask[centre_row - drop:centre_row + drop + 1, :] = 0.0
    mask[:, centre_col - 1:centre_col + 2] = 0.0
    return mask


def _metric(sinogram, mirrored, fill, mask, axis):
    """Energy in the wedge for a trial ``axis`` (columns of ``sinogram``)."""
    n_cols = sinogram.shape[1]
    shift = 2.0 * (axis - (n_cols - 1) / 2.0)
    moved = _ndimage().shift(mirrored, (0, shift), order=3, mode="nearest") \
        if shift != np.round(shift) else np.roll(mirrored, int(shift), axis=1)
    whole = int(np.ceil(abs(shift)))
    if shift > 0:
        moved[:, :whole] = fill[:, :whole]
    elif shift < 0:
        moved[:, n_cols - whole:] = fill[:, n_cols - whole:]
    spectrum = np.abs(np.fft.fftshift(np.fft.fft2(np.vstack((sinogram, moved)))))
    # Per column of real overlap: a trial axis near an edge shifts the mirror off the
    # detector, and the filled columns (the sinogram reversed in angle, to avoid sharp
    # edges) carry little wedge energy: unscaled, far axes would look best.
    return float(np.mean(spectrum * mask)) / max(1.0 - whole / n_cols, 1.0 / n_cols)


class _Search:
    def __init__(self, sinogram):
        self.sinogram = sinogram
        self.mirrored = np.ascontiguousarray(sinogram[:, ::-1])
        self.fill = np.ascontiguousarray(sinogram[::-1])  # avoids false minima at edges
        self.mask = _wedge_mask(2 * sinogram.shape[0], sinogram.shape[1],
                                0.5 * WEDGE_RATIO * sinogram.shape[1], WEDGE_DROP)

    def best(self, axes):
        values = np.array([_metric(self.sinogram, self.mirrored, self.fill, self.mask, a)
                           for a in axes])
        return int(np.argmin(values)), values


def _bin(sinogram, factor):
    if factor <= 1:
        return sinogram
    n = sinogram.shape[1] // factor * factor
    return sinogram[:, :n].reshape(sinogram.shape[0], -1, factor).mean(axis=2)


def half_turn(sinogram, angles):
    """The rows of a 0-180 degree span (a 360 degree scan's first half) in angle order,
    at most :data:`MAX_ANGLES` of them (neighbours averaged), and their angles."""
    angles = np.asarray(angles, np.float64)
    span = angles - angles.min()
    keep = np.flatnonzero(span < np.pi - 1e-9)
    keep = keep[np.argsort(span[keep])]
    sino, kept = sinogram[keep], angles[keep]
    group = int(np.ceil(len(sino) / MAX_ANGLES))
    if group > 1:
        n = len(sino) // group * group
        sino = sino[:n].reshape(-1, group, sino.shape[1]).mean(axis=1)
        kept = kept[:n].reshape(-1, group).mean(axis=1)
    return sino, kept


def _shadow(sinogram):
    """Detector columns of the object's shadow: mean absorption above
    :data:`SHADOW_LEVEL` of its largest."""
    profile = np.abs(np.asarray(sinogram, np.float64)).mean(axis=0)
    return np.flatnonzero(profile > SHADOW_LEVEL * profile.max())


def default_window(sinogram):
    """Where the axis can be, from the data. A half turn's shadow of the object spans
    ``[c - w, c + w]`` about the axis ``c``; where its edges ``L, R`` are on the
    detector, ``c = (L + R) / 2 >= R / 2`` and ``c <= (n - 1 + L) / 2``. Where the
    object runs off one edge, only the other edge bounds ``c``: below ``R / 2`` when
    it runs off the left, above ``(n - 1 + L) / 2`` off the right. Trial axes outside
    mirror the object off the detector, where Vo's metric is small and so falsely
    best. Within the detector less :data:`EDGE_MARGIN` at each edge."""
    n_bins = sinogram.shape[1]
    low, high = EDGE_MARGIN * (n_bins - 1), (1 - EDGE_MARGIN) * (n_bins - 1)
    shadow = _shadow(sinogram)
    if len(shadow):
        left, right = shadow[0] > 0, shadow[-1] < n_bins - 1  # edges on the detector
        mirror_low, mirror_high = shadow[-1] / 2.0, (n_bins - 1 + shadow[0]) / 2.0
        if left and right:
            bounds = (mirror_low, mirror_high)
        elif right:
            bounds = (low, mirror_low)
        elif left:
            bounds = (mirror_high, high)
        else:
            bounds = (low, high)
        if min(high, bounds[1]) > max(low, bounds[0]):
            low, high = max(low, bounds[0]), min(high, bounds[1])
    return low, high


def vo_center(sinogram, angles, search=None) -> float:
    """The axis of one (normalised, ``-log``) sinogram ``(n_angles, n_bins)`` of a 180
    or 360 degree scan. ``search=(low, high)`` bounds it (default:
    :func:`default_window`)."""
    sinogram = np.asarray(sinogram, np.float64)
    sino, _ = half_turn(sinogram, angles)
    low, high = search if search is not None else default_window(sino)
    coarse_sino = _ndimage().gaussian_filter(sino, (3, 1), mode="reflect")
    fine_sino = _ndimage().gaussian_filter(sino, (2, 2), mode="reflect")
    # Coarse: detector binned to about COARSE_BINS columns, every binned column.
    factor = max(1, sino.shape[1] // COARSE_BINS)
    binned = _bin(coarse_sino, factor)
    to_binned = lambda c: (c - (factor - 1) / 2.0) / factor  # noqa: E731
    axes = np.arange(np.ceil(to_binned(low)), np.floor(to_binned(high)) + 1)
    if not len(axes):
        raise ValueError(f"search: the window {low}..{high} holds no candidate axis")
    i, _ = _Search(binned).best(axes)
    guess = axes[i] * factor + (factor - 1) / 2.0
    # Fine: full resolution around the guess, halving the step down to FINE_STEP.
    search, step, radius = _Search(fine_sino), max(1.0, factor / 2.0), factor + 1.0
    while True:
        axes = np.clip(np.arange(guess - radius, guess + radius + step / 2, step), low, high)
        i, values = search.best(axes)
        guess = axes[i]
        if step <= FINE_STEP:
            break
        radius, step = step, step / 2
    if 0 < i < len(axes) - 1:  # the vertex of the parabola through the best three
        left, mid, right = values[i - 1:i + 2]
        curvature = left - 2 * mid + right
        if curvature > 0:
            guess += 0.5 * step * (left - right) / curvature
    return float(np.clip(guess, low, high))


def negative_mass(slices):
    """Per slice, the share of its absolute mass that is negative."""
    slices = np.asarray(slices, np.float64).reshape(len(slices), -1)
    return -np.minimum(slices, 0).sum(axis=1) / np.maximum(np.abs(slices).sum(axis=1), 1e-30)


def _shifted(sinogram, shifts):
    """``sinogram`` moved by each of ``shifts`` columns (a Fourier shift, exact for a
    band-limited row; edge values padded so nothing wraps round)."""
    padded = np.pad(sinogram, ((0, 0), (REFINE_PAD, REFINE_PAD)), mode="edge")
    spectrum = np.fft.rfft(padded, axis=1)
    k = np.fft.rfftfreq(padded.shape[1])
    moved = [np.fft.irfft(spectrum * np.exp(-2j * np.pi * k * d), padded.shape[1], axis=1)
             for d in shifts]
    return np.stack(moved)[:, :, REFINE_PAD:-REFINE_PAD].astype(np.float32)


def truncated(sinogram) -> bool:
    """Whether the object's shadow reaches an edge of the detector (a sample wider than
    the field of view), from the rows' mean absorption."""
    shadow = _shadow(sinogram)
    return not len(shadow) or shadow[0] == 0 or shadow[-1] == np.shape(sinogram)[1] - 1


def refine_center(sinogram, angles, guess, span=REFINE_SPAN, device=None):
    """The axis within ``guess +- span`` whose FBP slice of ``sinogram`` (normalised,
    ``-log``; a mean of rows is fine) has the least negative mass, or None for a sample
    wider than the field of view (its slice's negative values come from the
    truncation, not the axis). Made from the first half turn (a wrong axis doubles
    edges into crescents there; :func:`half_turn`), rows smoothed by :data:`REFINE_SMOOTH` column and the
    Hann window, so that noise does not hide the crescents: trial axes every
    ``REFINE_STEPS[0]`` pixel, then every ``REFINE_STEPS[1]`` about the best, and the
    vertex of a parabola through the best three. Each trial is the sinogram shifted to
    one axis, all back-projected in one call (rows padded with their edge values; pixels
    outside the reconstruction circle left out). At most :data:`REFINE_BINS` columns
    are used (wider rows binned)."""
    sinogram = np.asarray(sinogram, np.float64)
    if truncated(sinogram):
        return None
    sinogram, angles = half_turn(sinogram, angles)
    factor = int(np.ceil(sinogram.shape[1] / REFINE_BINS))
    binned = _ndimage().gaussian_filter1d(_bin(sinogram, factor), REFINE_SMOOTH, axis=1)
    to_binned = lambda c: (c - (factor - 1) / 2.0) / factor  # noqa: E731
    base = float(np.round(to_binned(guess)))
    n_bins = binned.shape[1]
    if not 0 <= base <= n_bins - 1:
        raise ValueError(f"center: {guess} is off the detector")
    recipe = prepare.recipe(dict(n_bins=n_bins, angles=angles, center=base, filter="hann",
                             padding="edge", circle=True, device=device))
    try:
        def best(axes):
            stack = np.ascontiguousarray(_shifted(binned, base - to_binned(axes)), np.float32)
            slices = np.empty((len(stack),) + recipe.geometry.slice_shape, np.float32)
            values = negative_mass(recipe.sinograms(stack, slices))
            i = int(np.argmin(values))
            if 0 < i < len(axes) - 1:  # the vertex of the parabola through the best three
                left, mid, right = values[i - 1:i + 2]
                curvature = left - 2 * mid + right
                if curvature > 0:
                    return axes[i] + 0.5 * (axes[1] - axes[0]) * (left - right) / curvature
            return axes[i]

        coarse, fine = REFINE_STEPS
        found = best(guess + np.arange(-span, span + coarse / 2, coarse))
        found = best(found + np.arange(-coarse, coarse + fine / 2, fine))
    finally:
        recipe.close()
    return float(np.clip(found, guess - span, guess + span))


def find_center(data, angles, flats=None, darks=None, rows=None, search=None, log=True,
                refine=True, device=None, angle_unit=None) -> float:
    """The rotation axis (detector column, 0-based at the first pixel's centre) of a
    sinogram ``(n_angles, n_bins)`` of line integrals, or of a scan's projections
    ``(n_angles, n_rows, n_bins)`` with ``flats`` and ``darks`` (or none for normalised
    data) as :func:`pybp.reconstruct` takes them. Vo's method (on the mean sinogram of
    a few middle rows of ``rows=(first, stop)``) within ``search=(low, high)``, refined
    by the least negative FBP slice (:func:`refine_center`, on ``device``) unless
    ``refine=False``. ``angles`` in radians (``angle_unit="deg"``: degrees; radians
    spanning more than one turn are refused unless ``angle_unit="rad"`` says so), a 180
    or 360 degree scan::

        center = pybp.find_center(projections, angles, flats, darks)
        volume = pybp.reconstruct(projections, angles, flats, darks, center=center)
    """
    angles = in_radians(angles, angle_unit)
    if np.ndim(data) == 2:
        try:
            sinogram = np.asarray(data, np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"data: expected real numbers, got {np.asarray(data).dtype}") from None
        if not np.isfinite(sinogram).all():
            raise ValueError("data: contains NaN or Inf")
        angles = _checked_angles(angles, sinogram.shape[0])
        vo = vo_center(sinogram, angles, search)
        refined = refine_center(sinogram, angles, vo, device=device) if refine else None
        return vo if refined is None else refined
    if np.ndim(data) != 3:
        raise ValueError(f"data: expected a sinogram (n_angles, n_bins) or projections "
                         f"(n_angles, n_rows, n_bins), got shape {np.shape(data)}")
    return estimate_center(data, angles, flats, darks, rows=rows, search=search, log=log,
                           refine=refine, device=device)["center"]


def _checked_angles(angles, n_angles):
    angles = np.asarray(angles, np.float64)
    if angles.ndim != 1 or len(angles) != n_angles:
        raise ValueError(f"angles: expected one per projection ({n_angles}), got shape "
                         f"{angles.shape}")
    if not np.isfinite(angles).all():
        raise ValueError("angles: contains NaN or Inf")
    return angles


def _angle_index(angles, target):
    gaps = np.abs(np.angle(np.exp(1j * (np.asarray(angles) - target))))
    i = int(np.argmin(gaps))
    return i, float(gaps[i])


def registration_center(projections_0, projections_180) -> float:
    """The axis from two normalised (``-log``) frames ``(n_rows, n_bins)`` 180 degrees
    apart: the second mirrored is the first shifted by ``2 * center - (n_bins - 1)``.
    Correlates the detector-direction gradients (edges, not the background) of all rows
    and fits a parabola to the peak."""
    a = np.gradient(np.atleast_2d(np.asarray(projections_0, np.float64)), axis=1)
    b = np.gradient(np.atleast_2d(np.asarray(projections_180, np.float64))[:, ::-1], axis=1)
    n_bins = a.shape[1]
    size = 2 * n_bins
    spectrum = np.conj(np.fft.rfft(a, size, axis=1)) * np.fft.rfft(b, size, axis=1)
    correlation = np.fft.irfft(spectrum.sum(axis=0), size)
    peak = int(np.argmax(correlation))
    left, mid, right = correlation[[(peak - 1) % size, peak, (peak + 1) % size]]
    curvature = left - 2 * mid + right
    offset = 0.5 * (left - right) / curvature if curvature < 0 else 0.0
    shift = peak + offset
    shift = shift - size if shift > size / 2 else shift
    # b(h) = a(h + d) with d = 2 c - (n - 1); the correlation peaks at -d.
    return float(((n_bins - 1) - shift) / 2.0)


def opposite_frames(angles):
    """Indices of the projections nearest 0 and 180 degrees (from the first angle), and
    how far (radians) the pair is from exactly opposite."""
    first, _ = _angle_index(angles, angles[0])
    second, miss = _angle_index(angles, angles[0] + np.pi)
    return first, second, miss


VO_ROWS = 10            # detector rows averaged into the sinogram Vo's method reads
REGISTRATION_ROWS = 64  # detector rows the 0/180 degree registration compares
DISAGREE_PIXELS = 1.0   # the registration further from the axis is reported as such
AGREE_PIXELS = 0.25     # Vo's estimate and the refined one further apart are both printed


def normalised_rows(projections, flats, darks, first, stop, frames=slice(None), log=True):
    """``-log((p - dark) / (flat - dark))`` of detector rows ``[first, stop)`` of the
    ``frames`` asked for, in float64 on the host: ``(n_frames, stop - first, n_bins)``;
    the rule of every path (:func:`pybp.stages.normalize.line_integrals_numpy`)."""
    data = np.asarray(projections[frames, first:stop] if isinstance(frames, slice)
                      else np.stack([projections[i][first:stop] for i in frames]), np.float64)
    if flats is not None:
        dark = frame_mean(darks, first, stop)
        with np.errstate(divide="ignore", invalid="ignore"):  # the rule says what follows
            data = (data - dark) / (frame_mean(flats, first, stop) - dark)
    if log:
        data = line_integrals_numpy(data)
    return data


def estimate_center(projections, angles, flats=None, darks=None, rows=None, search=None,
                    log=True, refine=True, device=None) -> dict:
    """The axis of a scan (arrays as :func:`pybp.reconstruct` takes them): Vo's method
    on the mean sinogram of :data:`VO_ROWS` rows in the middle of ``rows=(first,
    stop)`` (default all), refined by :func:`refine_center` (unless ``refine=False``),
    and, where the scan has frames 180 degrees apart (within 2 degrees), their
    registration as a cross-check. Returns ``dict(center, vo, refined, registration,
    row)``; ``center`` is the refined axis (else Vo's), ``registration`` None without
    such a pair."""
    angles = _checked_angles(angles, projections.shape[0])
    flats, darks = checks.flat_field_frames(flats, darks, tuple(projections.shape[1:]))
    n_rows = projections.shape[1]
    first, stop = rows if rows is not None else (0, n_rows)
    middle = (first + stop) // 2
    a, b = max(first, middle - VO_ROWS // 2), min(stop, middle + (VO_ROWS + 1) // 2)
    sinogram = normalised_rows(projections, flats, darks, a, b, log=log).mean(axis=1)
    if not np.isfinite(sinogram).all():
        raise ValueError("projections: the rows the axis is found from hold NaN or Inf")
    vo = vo_center(sinogram, angles, search)
    refined = refine_center(sinogram, angles, vo, device=device) if refine else None
    zero, half, miss = opposite_frames(np.asarray(angles, np.float64))
    registration = None
    if miss <= np.deg2rad(2.0):
        a, b = (max(first, middle - REGISTRATION_ROWS // 2),
                min(stop, middle + REGISTRATION_ROWS // 2))
        pair = normalised_rows(projections, flats, darks, a, b, frames=(zero, half), log=log)
        registration = registration_center(pair[0], pair[1])
    return dict(center=vo if refined is None else refined, vo=vo, refined=refined,
                registration=registration, row=middle)
