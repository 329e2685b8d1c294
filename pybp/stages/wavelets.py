"""Münch et al.'s Fourier-wavelet ring removal (Opt. Express 17, 8567, 2009; tomopy's
``remove_stripe_fw``): each sinogram, padded along the angles with zeros, is split by
a 2-D wavelet transform of ``level`` levels; in each level's vertical details (low-pass
along the angles, high-pass across the columns: where a stripe's energy lies) the
Fourier components along the angles are damped by ``1 - exp(-k^2 / (2 sigma^2))``
(``k`` the signed frequency index), which removes what is constant along the angles;
the inverse transform gives the sinogram back.

The wavelet transforms are PyWavelets' ``dwt2`` and ``idwt2`` with its default mode
("symmetric": the signal mirrored as d c b a | a b c d), written out; the Daubechies
filters are computed here from their defining polynomial (they equal PyWavelets').
The damping is applied on the device as the signal less its Gaussian low-pass, from
the few frequencies where the Gaussian is not negligible
(templates/stages/wavelets.cl.mako).
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints

GAUSSIAN_FLOOR = 1e-12  # frequencies where exp(-k^2 / (2 sigma^2)) is below this are left
SCRATCH_BYTES = 512 << 20  # most bytes of wavelet coefficients at once
# Work-groups of the transforms, by device type: on the H100 16 x 16; on CPUs wide rows
# of work-items, which their runtimes run as vectors (a 1024^2 sinogram at level 9: 29
# against 42-67 ms on Intel's runtime, 91-120 against 133-135 on PoCL, 2 cores; NumPy and
# PyWavelets, tomopy's formula, 87 ms: rings_speed.py@82c47bc).
GROUPS = {"cpu": (128, 2)}
GROUP = (16, 16)
# Parts of each column's rows summed by work-items of their own in the low-pass: with
# one work-item per column (a few hundred per level), the low-pass took 64% of the
# method's time on the H100 (rings_speed.py@82c47bc).
DAMP_PARTS = 16


def daubechies(order: int) -> np.ndarray:
    """The reconstruction low-pass filter of ``db<order>`` (2 ``order`` taps, summing to
    sqrt 2): the roots of its polynomial inside the unit circle (extremal phase)."""
    polynomial = [math.comb(order - 1 + k, k) for k in range(order)]
    zeros = []
    for y in np.roots(polynomial[::-1]):  # y = sin^2(w / 2) = (2 - z - 1/z) / 4
        b = 2 - 4 * y
        root = (b + np.sqrt(b * b - 4 + 0j)) / 2
        zeros.append(root if abs(root) < 1 else 1 / root)
    taps = np.poly(np.concatenate([-np.ones(order), zeros])).real
    return taps * math.sqrt(2) / taps.sum()


def filter_bank(name: str) -> tuple:
    """``(dec_lo, dec_hi, rec_lo, rec_hi)`` of wavelet ``name`` ("haar", "db1" to "db20")."""
    order = 1 if name == "haar" else None
    if isinstance(name, str) and name.startswith("db") and name[2:].isdigit():
        order = int(name[2:])
    if order is None or not 1 <= order <= 20:
        raise ValueError(f"ring_options: wavelet must be 'haar' or 'db1' to 'db20', got {name!r}")
    rec_lo = daubechies(order)
    rec_hi = rec_lo[::-1] * (-1.0) ** np.arange(len(rec_lo))
    return rec_lo[::-1], rec_hi[::-1], rec_lo, rec_hi


def coefficients(n: int, taps: int) -> int:
    """Length of one level's coefficients of ``n`` values (symmetric mode)."""
    return (n + taps - 1) // 2


def mirror(i, n):
    """Indices ``i`` mirrored into ``[0, n)`` as d c b a | a b c d, as often as needed."""
    i = np.asarray(i)
    while np.any((i < 0) | (i >= n)):
        i = np.where(i < 0, -i - 1, np.where(i >= n, 2 * n - i - 1, i))
    return i


def dwt(x, dec_lo, dec_hi, axis):
    """One level along ``axis``: ``(approximation, detail)``."""
    axis = axis % x.ndim
    n, taps = x.shape[axis], len(dec_lo)
    index = mirror(2 * np.arange(coefficients(n, taps))[:, None] + 1 - np.arange(taps)[None], n)
    taken = np.moveaxis(np.take(x, index, axis=axis), axis + 1, -1)  # (..., m, ..., taps)
    return taken @ dec_lo, taken @ dec_hi


def idwt(a, d, rec_lo, rec_hi, axis):
    """The inverse of :func:`dwt` along ``axis``: ``2 m - taps + 2`` values."""
    axis = axis % a.ndim
    m, taps = a.shape[axis], len(rec_lo)
    n = 2 * m - taps + 2
    out = np.zeros(a.shape[:axis] + (n,) + a.shape[axis + 1:])
    for j in range(taps):
        # x[i] += a[k] rec[j] where i = 2 k + j - taps + 2
        k = np.arange(m)
        i = 2 * k + j - taps + 2
        keep = (i >= 0) & (i < n)
        index = [slice(None)] * a.ndim
        index[axis] = i[keep]
        source = [slice(None)] * a.ndim
        source[axis] = k[keep]
        out[tuple(index)] += a[tuple(source)] * rec_lo[j] + d[tuple(source)] * rec_hi[j]
    return out


def defaults(n_angles: int, n_bins: int) -> dict:
    """tomopy's defaults."""
    return dict(level=int(math.ceil(math.log2(max(n_angles, n_bins, 2)))), wavelet="db5",
                sigma=2.0, pad=True)


def check(params: dict, n_angles: int, n_bins: int):
    level, sigma = params["level"], params["sigma"]
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer)) or \
            level < 1:
        raise ValueError(f"ring_options: level must be a whole number >= 1, got {level!r}")
    if isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, numbers.Real) or \
            not 0 < sigma < math.inf:
        raise ValueError(f"ring_options: sigma must be a positive, finite number, got {sigma!r}")
    if not isinstance(params["pad"], bool):
        raise ValueError(f"ring_options: pad must be True or False, got {params['pad']!r}")
    filter_bank(params["wavelet"])


def padding(n_angles: int, pad: bool) -> tuple[int, int]:
    """``(rows, first)``: the padded angle count (tomopy's eighth more) and where the
    sinogram starts in it."""
    rows = n_angles + n_angles // 8 if pad else n_angles
    return rows, (rows - n_angles) // 2


def gaussian(k, sigma: float) -> np.ndarray:
    """``exp(-k^2 / (2 sigma^2))``, written so that no sigma gives NaN: a sigma whose
    square underflows (1e-200) keeps k = 0 alone, a huge one every k."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(-0.5 * (np.asarray(k, np.float64) / sigma) ** 2)


def damping(m: int, sigma: float) -> np.ndarray:
    """``1 - exp(-k^2 / (2 sigma^2))`` at the ``m`` frequencies of a transform."""
    return 1 - gaussian(np.fft.fftfreq(m) * m, sigma)


def fw_numpy(sinograms, level: int, wavelet: str = "db5", sigma: float = 2.0,
             pad: bool = True) -> np.ndarray:
    """Float64 reference of ``"fw"`` on sinograms ``(..., n_angles, n_bins)``."""
    sinograms = np.asarray(sinograms, np.float64)
    dec_lo, dec_hi, rec_lo, rec_hi = filter_bank(wavelet)
    n_angles, n_bins = sinograms.shape[-2:]
    rows, first = padding(n_angles, pad)
    approximation = np.zeros(sinograms.shape[:-2] + (rows, n_bins))
    approximation[..., first:first + n_angles, :] = sinograms
    details = []
    for _ in range(level):
        low, high = dwt(approximation, dec_lo, dec_hi, -1)       # across the columns
        approximation, horizontal = dwt(low, dec_lo, dec_hi, -2)   # along the angles
        vertical, diagonal = dwt(high, dec_lo, dec_hi, -2)
        spectrum = np.fft.fft(vertical, axis=-2) * damping(vertical.shape[-2], sigma)[:, None]
        details.append((horizontal, np.real(np.fft.ifft(spectrum, axis=-2)), diagonal))
    for horizontal, vertical, diagonal in details[::-1]:
        approximation = approximation[..., :horizontal.shape[-2], :horizontal.shape[-1]]
        low = idwt(approximation, horizontal, rec_lo, rec_hi, -2)
        high = idwt(vertical, diagonal, rec_lo, rec_hi, -2)
        approximation = idwt(low, high, rec_lo, rec_hi, -1)
    return approximation[..., first:first + n_angles, :n_bins]


KERNELS = {
    "place": (Arg("sinograms", "__global const float *", "rows x n_angles x n_bins"),
              *ints("n_angles", "n_bins", "first", "rows", "first_row"),
              Arg("out_plane", "const long"), Arg("out", "__global float *", "rows x n_bins")),
    **{f"dwt_{name}": (Arg("in", "__global const float *"),
                       *ints("in_rows", "in_cols", "in_stride"), Arg("in_plane", "const long"),
                       Arg("lo", "__global float *"), Arg("hi", "__global float *"),
                       *ints("out_rows", "out_cols", "out_stride"), Arg("out_plane", "const long"))
       for name in ("rows", "columns")},
    **{f"idwt_{name}": (Arg("lo", "__global const float *"), Arg("hi", "__global const float *"),
                        Arg("in_stride", "const int"), Arg("in_plane", "const long"),
                        Arg("m", "const int", "coefficients along the line"),
                        Arg("out", "__global float *"),
                        *ints("out_rows", "out_cols", "out_stride"), Arg("out_plane", "const long"))
       for name in ("rows", "columns")},
    "damp_sums": (Arg("details", "__global const float *"), *ints("rows", "cols", "stride"),
                  Arg("plane", "const long"), Arg("n_freqs", "const int"),
                  Arg("cosines", "__global const float *", "n_freqs x rows"),
                  Arg("sines", "__global const float *", "n_freqs x rows"),
                  Arg("parts", "const int", "of each column's rows"),
                  Arg("sums", "__global float *", "sinograms x parts x 2 FREQS x cols")),
    "damp_apply": (Arg("details", "__global float *"), *ints("rows", "cols", "stride"),
                   Arg("plane", "const long"), Arg("n_freqs", "const int"),
                   Arg("cosines", "__global const float *", "n_freqs x rows"),
                   Arg("sines", "__global const float *", "n_freqs x rows"),
                   Arg("gain", "__global const float *", "n_freqs: weight exp(-k^2/2s^2) / rows"),
                   Arg("parts", "const int"), Arg("sums", "__global const float *")),
    "crop": (Arg("result", "__global const float *"), *ints("stride", "first_row"),
             Arg("plane", "const long"), *ints("n_angles", "n_bins", "first"),
             Arg("sinograms", "__global float *", "rows x n_angles x n_bins")),
}


@functools.lru_cache(maxsize=8)
def source(wavelet: str, freqs: int, group: tuple = GROUP) -> str:
    dec_lo, dec_hi, rec_lo, rec_hi = filter_bank(wavelet)
    return codegen.render("stages/wavelets.cl.mako", KERNELS, dec_lo=dec_lo, dec_hi=dec_hi,
                          rec_lo=rec_lo, rec_hi=rec_hi, freqs=freqs, group=group)


class FourierWavelet:
    """``"fw"`` on blocks of sinograms in a device buffer, in place
    (templates/stages/wavelets.cl.mako): the levels' coefficients in buffers of their
    own, kept for all chunks."""

    def __init__(self, context, device, n_angles, n_bins, level, wavelet, sigma, pad):
        taps = len(filter_bank(wavelet)[0])
        self.n_angles, self.n_bins, self.level = n_angles, n_bins, level
        rows, self.first_row = padding(n_angles, pad)
        self.shapes = [(rows, n_bins)]  # the approximation's at each level
        for _ in range(level):
            r, c = self.shapes[-1]
            self.shapes.append((coefficients(r, taps), coefficients(c, taps)))
        # The frequencies where the Gaussian is not negligible, no more than the
        # coarsest level's first (longest) transform has.
        reach = int(math.ceil(min(sigma * math.sqrt(2 * math.log(1 / GAUSSIAN_FLOOR)),
                                  self.shapes[1][0] // 2)))
        freqs = reach + 1
        self.group = GROUPS.get(device.type, GROUP)
        code = source(wavelet, freqs, self.group)
        self.kernels = {name: codegen.declared(context, device, code, name, args)
                        for name, args in KERNELS.items()}
        approximations = sum(r * c for r, c in self.shapes)
        details = 3 * sum(r * c for r, c in self.shapes[1:])
        temporary = 2 * rows * self.shapes[1][1] + DAMP_PARTS * 2 * freqs * self.shapes[1][1]
        per_sinogram = 4 * (approximations + details + temporary)
        self.block = max(1, SCRATCH_BYTES // per_sinogram)
        self.shared_bytes = self.block * per_sinogram + 4 * sum(
            3 * freqs * r for r, _ in self.shapes[1:])
        self.cost = per_sinogram // 4 * (2 * taps + 4 * freqs)
        rw, ro = cl.mem_flags.READ_WRITE, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR

        def buffer(r, c):
            return cl.Buffer(context, rw, 4 * self.block * r * c)

        self.approximation = [buffer(r, c) for r, c in self.shapes]
        self.sums = buffer(DAMP_PARTS * 2 * freqs, self.shapes[1][1])
        self.details = [tuple(buffer(r, c) for _ in range(3)) for r, c in self.shapes[1:]]
        self.temporary = (buffer(rows, self.shapes[1][1]), buffer(rows, self.shapes[1][1]))
        self.tables = []
        for r, _ in self.shapes[1:]:
            k = np.arange(min(reach, r // 2) + 1)
            angle = 2 * np.pi * np.outer(k, np.arange(r)) / r
            weight = np.where((k == 0) | (2 * k == r), 1.0, 2.0)
            gain = weight * gaussian(k, sigma) / r
            self.tables.append((len(k), *(cl.Buffer(context, ro, hostbuf=np.ascontiguousarray(
                table, np.float32)) for table in (np.cos(angle), np.sin(angle), gain))))

    def _grid(self, cols, rows, count):
        gx, gy = self.group
        return (-(-cols // gx) * gx, -(-rows // gy) * gy, count), (gx, gy, 1)

    def __call__(self, queue, sinograms, first, count, pacer, stop=None):
        """Rows ``[first, first + count)`` of ``sinograms`` (at most ``block``), as one
        piece of work the ``pacer`` admits; the events."""
        pacer.admit("rings", count * self.cost, stop)
        events = self._launch(queue, sinograms, first, count)
        queue.flush()
        pacer.launched(events[-1], "rings", count * self.cost)
        return events

    def _launch(self, queue, sinograms, first, count):
        k, events = self.kernels, []
        (rows, cols), a = self.shapes[0], self.approximation
        low, high = self.temporary
        sizes = dict(n_angles=self.n_angles, n_bins=self.n_bins, first=first)
        events.append(k["place"](queue, *self._grid(cols, rows, count), sinograms=sinograms,
                                 rows=rows, first_row=self.first_row, out_plane=rows * cols,
                                 out=a[0], **sizes))
        for n in range(self.level):
            (r, c), (r1, c1) = self.shapes[n], self.shapes[n + 1]
            horizontal, vertical, diagonal = self.details[n]
            events.append(k["dwt_rows"](queue, *self._grid(c1, r, count), **{"in": a[n]}, in_rows=r,
                                        in_cols=c, in_stride=c, in_plane=r * c, lo=low,
                                        hi=high, out_rows=r, out_cols=c1, out_stride=c1,
                                        out_plane=r * c1))
            for source, approx, detail in ((low, a[n + 1], horizontal), (high, vertical, diagonal)):
                events.append(k["dwt_columns"](
                    queue, *self._grid(c1, r1, count), **{"in": source}, in_rows=r, in_cols=c1,
                    in_stride=c1, in_plane=r * c1, lo=approx, hi=detail, out_rows=r1,
                    out_cols=c1, out_stride=c1, out_plane=r1 * c1))
            n_freqs, cosines, sines, gain = self.tables[n]
            column = dict(details=vertical, rows=r1, cols=c1, stride=c1, plane=r1 * c1,
                          n_freqs=n_freqs, cosines=cosines, sines=sines, parts=DAMP_PARTS,
                          sums=self.sums)
            grid = ((-(-c1 // 64) * 64, DAMP_PARTS, count), (64, 1, 1))
            events.append(k["damp_sums"](queue, *grid, **column))
            events.append(k["damp_apply"](queue, *grid, gain=gain, **column))
        for n in reversed(range(self.level)):
            (r, c), (r1, c1) = self.shapes[n], self.shapes[n + 1]
            horizontal, vertical, diagonal = self.details[n]
            for lo, hi, out in ((a[n + 1], horizontal, low), (vertical, diagonal, high)):
                events.append(k["idwt_columns"](queue, *self._grid(c1, r, count), lo=lo, hi=hi,
                                                in_stride=c1, in_plane=r1 * c1, m=r1, out=out,
                                                out_rows=r, out_cols=c1, out_stride=c1,
                                                out_plane=r * c1))
            events.append(k["idwt_rows"](queue, *self._grid(c, r, count), lo=low, hi=high,
                                         in_stride=c1, in_plane=r * c1, m=c1, out=a[n],
                                         out_rows=r, out_cols=c, out_stride=c, out_plane=r * c))
        events.append(k["crop"](queue, *self._grid(self.n_bins, self.n_angles, count), result=a[0],
                                stride=cols, first_row=self.first_row, plane=rows * cols,
                                sinograms=sinograms, **sizes))
        return events
