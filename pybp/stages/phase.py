"""Paganin phase retrieval (Paganin et al., J. Microsc. 206, 33, 2002): the options,
the float64 NumPy reference, and the device stage (templates/stages/paganin.cl.mako).

Each flat-field normalised projection I (before ``-log``) is filtered by

    H(f) = 1 / (1 + pi * wavelength * distance * delta_beta * |f|^2)

with ``f`` the spatial frequency in cycles per metre, after padding it by replicating
its edges, and the reconstruction is of ``-log`` of the result. The filter reaches
across detector rows: in continuous space its kernel, summed along the rows, is
``exp(-|y| / l) / (2 l)`` with ``l = sqrt(wavelength * distance * delta_beta / (4 pi))``;
sampled on the detector's grid, the response has a cusp at the Nyquist frequency and
the kernel a tail that falls only as ``1 / n^2`` beyond that (the more so the shorter
``l`` is against a pixel). Chunks read :func:`Paganin.margin_rows` rows beyond their
own on each side (``Stage.margin``), where the tail of the sampled kernel holds less
than ``MARGIN_TOLERANCE`` of its weight, and leave them out, so that chunked results
equal one pass over whole projections to that fraction of the values' spread
(nabu's ``phase_margin``).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.stages.base import Need, Stage
from pybp.stages.filters import four_step, local_points
from pybp.stages.normalize import FLOOR_TRANSMISSION, line_integrals_numpy

PLANCK_EV_M = 1.2398419843320026e-6  # h c in eV m: wavelength = h c / E
MARGIN_TOLERANCE = 1e-5  # of the kernel's weight: what a margin leaves out at most
SCRATCH_BYTES = 256 << 20  # most bytes of padded images transformed at once


def wavelength(energy_kev: float) -> float:
    """Metres, of photons of ``energy_kev``."""
    return PLANCK_EV_M / (energy_kev * 1e3)


@dataclass(frozen=True)
class Paganin:
    """The options of Paganin phase retrieval, checked: ``delta_beta`` (the ratio of
    the refractive index decrement to the absorption index, > 0), ``energy`` (keV),
    ``distance`` (sample to detector, metres) and ``pixel_size`` (metres, at the
    sample), all positive; ``margin``: detector rows read beyond each chunk's own
    (default from the filter: :func:`margin_rows`)."""

    delta_beta: float
    energy: float
    distance: float
    pixel_size: float
    margin: int | None = None

    @classmethod
    def create(cls, phase) -> "Paganin | None":
        """From ``phase``: None, a Paganin, or a dict of its fields."""
        if phase is None or isinstance(phase, Paganin):
            return phase
        if not isinstance(phase, dict):
            raise TypeError(f"phase: expected a dict of delta_beta, energy, distance and "
                            f"pixel_size, got {type(phase).__name__}")
        fields = ("delta_beta", "energy", "distance", "pixel_size", "margin")
        unknown = sorted(set(phase) - set(fields))
        missing = [name for name in fields[:4] if name not in phase]
        if unknown or missing:
            raise ValueError(f"phase: {'unknown ' + ', '.join(unknown) if unknown else ''}"
                             f"{'; ' if unknown and missing else ''}"
                             f"{'missing ' + ', '.join(missing) if missing else ''}; expected "
                             f"delta_beta, energy (keV), distance (m), pixel_size (m)")
        for name in fields[:4]:
            value = phase[name]
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or \
                    not 0 < value < math.inf:
                raise ValueError(f"phase: {name} must be a positive, finite number, got {value!r}")
        margin = phase.get("margin")
        if margin is not None and (isinstance(margin, (bool, np.bool_)) or not isinstance(
                margin, (int, np.integer)) or margin < 0):
            raise ValueError(f"phase: margin must be a whole number of rows >= 0, got {margin!r}")
        made = cls(*(float(phase[name]) for name in fields[:4]),
                   None if margin is None else int(margin))
        if not math.isfinite(made.pixel_strength):
            raise ValueError(f"phase: the filter's strength in pixels (pi x wavelength x "
                             f"distance x delta_beta / pixel_size^2) is beyond any detector "
                             f"for {made}: check the units (energy in keV, distance and "
                             "pixel_size in metres)")
        return made

    @property
    def pixel_strength(self) -> float:
        """``strength / pixel_size^2``: the filter ``1 / (1 + s f^2)`` with ``f`` in
        cycles per pixel (inf where it overflows)."""
        try:
            return (math.sqrt(self.strength) / self.pixel_size) ** 2
        except OverflowError:
            return math.inf

    @property
    def strength(self) -> float:
        """``pi * wavelength * distance * delta_beta``, in square metres."""
        return math.pi * wavelength(self.energy) * self.distance * self.delta_beta

    @property
    def length(self) -> float:
        """The filter's decay length ``l`` in pixels (see the module's note)."""
        return math.sqrt(self.strength) / (2 * math.pi) / self.pixel_size

    def margin_rows(self) -> int:
        """Rows each side beyond which the sampled kernel along the rows holds less than
        ``MARGIN_TOLERANCE`` of its weight (or the ``margin`` given)."""
        if self.margin is not None:
            return self.margin
        return tail_margin(self.pixel_strength, MARGIN_TOLERANCE)

    def __str__(self):
        return (f"Paganin: delta/beta {self.delta_beta:g}, {self.energy:g} keV, "
                f"{self.distance:g} m, {self.pixel_size:g} m pixels")


def tail_margin(strength: float, tolerance: float) -> int:
    """The least ``M`` where the kernel of ``1 / (1 + strength f^2)`` (``f`` in cycles per
    pixel) beyond ``M`` pixels on one side sums (in absolute value) to less than
    ``tolerance``: from the transform on a grid long enough that it does."""
    n, longest = 4096, 1 << 24
    # The continuous kernel decays as exp(-|y| / l), l = sqrt(strength) / (2 pi): its
    # tail needs l ln(1 / tolerance) rows at least; beyond the longest grid, say so now.
    if math.sqrt(strength) / (2 * math.pi) * math.log(1 / tolerance) > longest // 8:
        raise ValueError(f"phase: the filter reaches beyond {longest // 8} rows")
    while True:
        response = 1 / (1 + strength * np.fft.rfftfreq(n) ** 2)
        kernel = np.abs(np.fft.irfft(response, n)[:n // 2])
        tail = np.cumsum(kernel[::-1])[::-1]  # tail[m]: the weight at m and beyond
        below = np.flatnonzero(tail < tolerance)
        if len(below) and below[0] < n // 8:  # the periodic copies are far beyond it
            return max(1, int(below[0]) - 1)
        n *= 2
        if n > longest:
            raise ValueError(f"phase: the filter reaches beyond {longest // 8} rows")


def fft_size(n: int, multiple: int = 2) -> int:
    """The transform length for ``n`` points: the least ``2^a 3^b 5^c`` (the radices of
    templates/stages/fft_lines.cl.mako) that is at least ``n`` and a multiple of
    ``multiple`` (a power of two). Against the next power of two, 2202 points (2048
    bins and margins of 77) take 2304, not 4096, and 282 rows 288, not 512."""
    size = max(n, multiple)
    while True:
        rest = size // multiple if size % multiple == 0 else 0
        for r in (2, 3, 5):
            while rest and rest % r == 0:
                rest //= r
        if rest == 1:
            return size
        size += 1


def divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (at least 1)."""
    return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def placement(n_rows: int, n_bins: int, margin: int) -> tuple[int, int, int, int]:
    """``(pad_y, pad_x, top, left)``: the padded image of ``n_rows`` rows of
    ``n_bins`` with ``margin`` rows and bins of edge values each side at least, and
    where the data start in it. Rows are transformed in two passes of
    :func:`pybp.stages.filters.four_step`, so ``pad_x`` is a multiple of 32."""
    pad_y, pad_x = fft_size(n_rows + 2 * margin), fft_size(n_bins + 2 * margin, 32)
    return (pad_y, pad_x, margin + (pad_y - n_rows - 2 * margin) // 2,
            margin + (pad_x - n_bins - 2 * margin) // 2)


def filter_terms(n: int, phase: Paganin) -> np.ndarray:
    """``strength f^2`` at the ``n`` points of a transform: in cycles per pixel, so that
    no pixel size overflows (the filter is ``1 / (1 + terms_y + terms_x)``)."""
    return phase.pixel_strength * np.fft.fftfreq(n) ** 2


def paganin_numpy(intensity, phase: Paganin) -> np.ndarray:
    """Float64 reference: projections ``(..., n_rows, n_bins)`` of flat-field normalised
    intensity, each padded whole (:func:`placement`), filtered, cropped; then ``-log``
    (the rule of :func:`pybp.stages.normalize.line_integrals_numpy`)."""
    intensity = np.asarray(intensity, np.float64)
    n_rows, n_bins = intensity.shape[-2:]
    pad_y, pad_x, top, left = placement(n_rows, n_bins, phase.margin_rows())
    pad = [(0, 0)] * (intensity.ndim - 2) + [(top, pad_y - n_rows - top),
                                            (left, pad_x - n_bins - left)]
    padded = np.pad(intensity, pad, mode="edge")
    terms = filter_terms(pad_y, phase)[:, None] + filter_terms(pad_x, phase)[None, :]
    retrieved = np.real(np.fft.ifft2(np.fft.fft2(padded) / (1 + terms)))
    retrieved = retrieved[..., top:top + n_rows, left:left + n_bins]
    return line_integrals_numpy(retrieved)


def passes(pad_y: int, pad_x: int, points: int) -> dict:
    """How the kernels cut a padded image: ``a`` x ``b`` points a row (four-step), and the
    lines each work-group transforms at once in each pass (each dividing what it cuts,
    ``points`` at most in local memory)."""
    a, b = four_step(pad_x, points)
    return dict(a=a, b=b, a_lines=divisor_at_most(b, points // a),
                b_lines=divisor_at_most(a, points // b),
                y_lines=divisor_at_most(pad_x, points // pad_y))


@functools.lru_cache(maxsize=16)
def source(pad_y: int, pad_x: int, points: int, items: int) -> str:
    return codegen.render("stages/paganin.cl.mako", KERNELS, pad_y=pad_y, items=items,
                          floor=repr(float(FLOOR_TRANSMISSION)), **passes(pad_y, pad_x, points))


TABLE = Arg("table", "__global const float2 *", "PAD_X/2: exp(-2 pi i m / PAD_X)")
SCRATCH = Arg("scratch", "__global float2 *", "a padded image per pair of projections")
KERNELS = {
    "rows_forward_a": (Arg("intensity", "__global const float *", "n_angles x n_rows x n_bins"),
                       *ints("n_rows", "n_bins", "first_angle"),
                       Arg("stop_angle", "const int", "the block's end"),
                       Arg("row_shift", "const int", "padded row - chunk row"),
                       Arg("first_bin", "const int", "padded column of bin 0"), TABLE, SCRATCH),
    "rows_b": (TABLE, Arg("sign", "const int", "-1 forward, +1 inverse"), SCRATCH),
    "columns_filter": (Arg("table_y", "__global const float2 *", "PAD_Y/2"),
                       Arg("fy2", "__global const float *", "PAD_Y: strength fy^2"),
                       Arg("fx2", "__global const float *", "PAD_X: strength fx^2, permuted"),
                       Arg("scale", "const float", "1 / (PAD_Y PAD_X)"), SCRATCH),
    "rows_inverse_a": (TABLE, SCRATCH, *ints("n_angles", "n_bins", "first_angle"),
                       Arg("stop_angle", "const int", "the block's end"),
                       Arg("first_pad_row", "const int", "padded row of the chunk's first own row"),
                       Arg("first_bin", "const int", "padded column of bin 0"),
                       Arg("counted_first", "const int", "own rows whose replaced values"),
                       Arg("counted_stop", "const int", "are counted (those kept)"),
                       Arg("clipped", "__global uint *", "counts the values replaced"),
                       Arg("sinograms", "__global float *", "own rows x n_angles x n_bins")),
}


class PhaseRetrieval(Stage):
    """Paganin phase retrieval of the chunk's projections (buffer ``intensity``:
    ``n_angles`` x rows x ``n_bins``, normalised, margins included) into ``sinograms``
    (``-log``, the chunk's own rows), counting non-positive values in ``clipped`` (the
    normalisation's counter, which it reports). Frames are cut to lengths of radices
    2, 3 and 5 (:func:`fft_size`); one padded image height is compiled per chunk height (the
    last chunk is shorter)."""

    name = "phase"

    def __init__(self, context, device, n_angles, n_bins, phase: Paganin):
        self.context, self.device, self.phase = context, device, phase
        self.n_angles, self.n_bins = n_angles, n_bins
        self.margin = phase.margin_rows()
        self.points = local_points(device)
        self.items = min(256, self.points // 2, device.max_work_group_size)
        _, pad_x, _, self.first_bin = placement(1, n_bins, self.margin)
        if pad_x > 32 * self.points or fft_size(1 + 2 * self.margin) > self.points:
            raise ValueError(f"phase: the filter reaches {self.margin} rows (delta_beta "
                             f"{phase.delta_beta:g}, distance {phase.distance:g} m, pixel "
                             f"{phase.pixel_size:g} m); padded images of "
                             f"{fft_size(1 + 2 * self.margin)} x {pad_x} points exceed what "
                             f"{device.name} transforms ({self.points} rows, "
                             f"{32 * self.points} columns)")
        self.pad_x = pad_x
        plane = n_angles * n_bins
        self.needs = (Need("intensity", plane * 4), Need("clipped", fixed=4, host=np.dtype(np.uint32)),
                      Need("sinograms", plane * 4))
        self.shared_bytes = SCRATCH_BYTES
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        a, b = four_step(pad_x, self.points)
        fx2 = filter_terms(pad_x, phase)
        self.fx2 = cl.Buffer(context, flags, hostbuf=np.ascontiguousarray(  # k_a + A k_b at k_a B + k_b
            fx2.reshape(b, a).T).astype(np.float32))
        self.table = cl.Buffer(context, flags, hostbuf=np.exp(
            -2j * np.pi * np.arange(pad_x // 2) / pad_x).astype(np.complex64))
        self._heights, self._scratch = {}, None

    @property
    def chunk_rows(self) -> int:
        """Own rows per chunk this stage prefers: a padded image of the most rows the device
        transforms at once, at most eight times the margins."""
        return fft_size(min(self.points, 8 * 2 * self.margin)) - 2 * self.margin

    def _height(self, pad_y):
        """The kernels, y tables, padded images per block and cut (:func:`passes`) of a padded image
        height."""
        if pad_y not in self._heights:
            flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
            code = source(pad_y, self.pad_x, self.points, self.items)
            kernels = {name: codegen.declared(self.context, self.device, code, name, args)
                       for name, args in KERNELS.items()}
            table_y = cl.Buffer(self.context, flags, hostbuf=np.exp(
                -2j * np.pi * np.arange(max(1, pad_y // 2)) / pad_y).astype(np.complex64))
            fy2 = cl.Buffer(self.context, flags,
                            hostbuf=filter_terms(pad_y, self.phase).astype(np.float32))
            pairs = max(1, SCRATCH_BYTES // (8 * pad_y * self.pad_x))
            cut = passes(pad_y, self.pad_x, self.points)
            self._heights[pad_y] = (kernels, table_y, fy2, pairs, cut)
        return self._heights[pad_y]

    def enqueue(self, chunk):
        before, after = chunk.crop
        own = chunk.rows_out
        # The padded image is the grid chunk's (its rows beyond the chunk's own among the
        # margins), so that a row's values do not depend on the rows a run takes.
        lead, trail = chunk.grid
        pad_y, _, top, _ = placement(lead + own + trail, self.n_bins, self.margin)
        counted = (chunk.margins[0] - before, chunk.margins[1] - after)  # own rows not kept
        kernels, table_y, fy2, most, cut = self._height(pad_y)
        if self._scratch is None:
            self._scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, SCRATCH_BYTES)
        b, q, pacer = chunk.buffers, chunk.queue, chunk.pacer
        a_lines, b_lines, y_lines = cut["a_lines"], cut["b_lines"], cut["y_lines"]
        ka, kb = cut["a"], cut["b"]
        cost = pad_y * self.pad_x * int(np.log2(pad_y * self.pad_x))
        events = []
        common = dict(table=self.table, scratch=self._scratch)
        for first, count in pacer.blocks("phase", self.n_angles, cost, 2, 2 * most):
            pairs = -(-count // 2)
            pacer.admit("phase", count * cost, chunk.stop)
            sizes = dict(stop_angle=first + count, n_bins=self.n_bins, first_angle=first,
                         first_bin=self.first_bin)
            launches = [
                kernels["rows_forward_a"](
                    q, (pad_y * (kb // a_lines) * self.items, pairs), (self.items, 1),
                    intensity=b["intensity"], n_rows=chunk.count,
                    row_shift=top - (before - lead), **sizes, **common),
                kernels["rows_b"](q, (pad_y * ka // b_lines * self.items, pairs),
                                  (self.items, 1), sign=-1, **common),
                kernels["columns_filter"](
                    q, (self.pad_x // y_lines * self.items, pairs), (self.items, 1),
                    table_y=table_y, fy2=fy2, fx2=self.fx2,
                    scale=1.0 / (pad_y * self.pad_x), scratch=self._scratch),
                kernels["rows_b"](q, (pad_y * ka // b_lines * self.items, pairs),
                                  (self.items, 1), sign=1, **common),
                kernels["rows_inverse_a"](
                    q, (own * (kb // a_lines) * self.items, pairs), (self.items, 1),
                    n_angles=self.n_angles, first_pad_row=top + lead,
                    counted_first=counted[0],
                    counted_stop=own - counted[1],
                    clipped=b["clipped"], sinograms=b["sinograms"], **sizes, **common)]
            q.flush()
            pacer.launched(launches[-1], "phase", count * cost)
            events += [("phase", event) for event in launches]
        return events

    def close(self):
        self._scratch = None
        self._heights.clear()
