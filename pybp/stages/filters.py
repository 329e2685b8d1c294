"""FBP filter windows (scikit-image's names and shapes) and the on-device filtering.

The ramp is built in real space and transformed (Kak & Slaney, Ch. 3, Eq. 61), which
avoids the DC error of a sampled ``|f|``; projections are padded to at least twice their
width, with zeros (``padding="zero"``) or with their first and last values (``"edge"``,
for truncated scans: an object wider than the detector does not drop to zero at its
edges, and zeros there bring cupping and a bright rim).

On the device, :class:`FftFilter` filters two rows per complex FFT in local memory
(templates/stages/fft.cl.mako); where the padded row does not fit a device's local
memory, :class:`GlobalFftFilter` transforms it in two passes of shorter transforms
through global memory (templates/stages/fft_global.cl.mako). :class:`ConvolutionFilter`
convolves with the real-space taps of the padded filter, which equals the padded FFT
product exactly (edge padding adds the first and last values times the sums of the
taps that meet the padding, known in advance); it needs no FFT and is kept for
comparison (``filter_method="convolution"``).
"""

from __future__ import annotations

import functools

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg
from pybp.stages.base import Need, Stage

FILTERS = ("ramp", "shepp-logan", "cosine", "hamming", "hann")
PADDINGS = ("zero", "edge")


def padded_size(n_bins: int) -> int:
    """Zero-padded length: the next power of two of at least twice the width (min 64)."""
    return max(64, int(2 ** np.ceil(np.log2(2 * n_bins))))


def fourier_filter(name: str, size: int) -> np.ndarray:
    """The filter's frequency response at ``np.fft.fftfreq(size)`` (cycles per bin)."""
    if name not in FILTERS:
        raise ValueError(f"filter: expected one of {', '.join(FILTERS)}; got {name!r}")
    n = np.concatenate([np.arange(1, size // 2 + 1, 2), np.arange(size // 2 - 1, 0, -2)])
    ramp_space = np.zeros(size)
    ramp_space[0] = 0.25
    ramp_space[1::2] = -1.0 / (np.pi * n) ** 2
    response = np.real(np.fft.fft(ramp_space))
    omega = 2 * np.pi * np.fft.fftfreq(size)
    if name == "shepp-logan":
        response[1:] *= np.sin(omega[1:] / 2) / (omega[1:] / 2)
    elif name == "cosine":
        response *= np.fft.fftshift(np.sin(np.linspace(0, np.pi, size, endpoint=False)))
    elif name == "hamming":
        response *= np.fft.fftshift(np.hamming(size))
    elif name == "hann":
        response *= np.fft.fftshift(np.hanning(size))
    return response


def even_response(name: str, size: int) -> np.ndarray:
    """The response's even part, (H[k] + H[-k]) / 2. The windows are sampled symmetric
    about (size - 1) / 2, not about size / 2, so they are not quite even; filtering a
    real row and keeping the real part (scikit-image's way, and ``filter_numpy``'s)
    applies exactly this even part, which two rows sharing one transform need."""
    response = fourier_filter(name, size)
    return 0.5 * (response + np.roll(response[::-1], 1))


def _padded_kernel(name: str, n_bins: int) -> np.ndarray:
    """The filter's real-space kernel on the padded period (circular convolution)."""
    return np.real(np.fft.ifft(fourier_filter(name, padded_size(n_bins))))


def filter_taps(name: str, n_bins: int) -> np.ndarray:
    """Real-space taps for offsets ``-(n_bins-1) .. n_bins-1`` (index ``d + n_bins - 1``)."""
    kernel = _padded_kernel(name, n_bins)
    offsets = np.arange(-(n_bins - 1), n_bins)
    return kernel[offsets % kernel.size]


def edge_padding(n_bins: int) -> tuple[int, int]:
    """Bins of padding before and after a row: the padded length, split evenly."""
    extra = padded_size(n_bins) - n_bins
    return extra // 2, extra - extra // 2


def edge_weights(name: str, n_bins: int) -> np.ndarray:
    """``(2, n_bins)``: for each output bin, the sums of the taps that meet the left and
    the right padding. Edge padding adds ``first * left + last * right`` to the
    zero-padded convolution."""
    kernel = _padded_kernel(name, n_bins)
    before, after = edge_padding(n_bins)
    i = np.arange(n_bins)[:, None]
    left = kernel[(i - np.arange(-before, 0)[None, :]) % kernel.size].sum(axis=1)
    right = kernel[(i - np.arange(n_bins, n_bins + after)[None, :]) % kernel.size].sum(axis=1)
    return np.stack([left, right])


def gain(name: str, n_bins: int) -> float:
    """Largest factor by which filtering can grow a row's largest absolute value: the
    kernel's L1 norm over the padded period (either padding)."""
    return float(np.abs(_padded_kernel(name, n_bins)).sum())


def filter_numpy(sinograms, name: str, weights, padding: str = "zero") -> np.ndarray:
    """Float64 reference: padded FFT filtering times each angle's weight."""
    sinograms = np.asarray(sinograms, np.float64)
    n_bins = sinograms.shape[-1]
    size = padded_size(n_bins)
    if padding == "edge":
        before, after = edge_padding(n_bins)
        pad = [(0, 0)] * (sinograms.ndim - 1) + [(before, after)]
        padded = np.pad(sinograms, pad, mode="edge")
    else:
        before = 0
        padded = sinograms
    spectrum = np.fft.fft(padded, n=size, axis=-1) * fourier_filter(name, size)
    filtered = np.real(np.fft.ifft(spectrum, axis=-1))[..., before:before + n_bins]
    return filtered * np.asarray(weights)[:, None]


FFT_ITEMS = 256  # work-items per transform, fewer for short rows
CONVOLUTION_TILE = 64  # bins per work-group of the direct convolution
LOCAL_POINTS = 2048  # most complex points a work-group of the global FFT holds
FILTER_METHODS = ("auto", "fft", "global-fft", "convolution")
SCRATCH_BYTES = 64 << 20  # most rows filtered by convolution at once

# Both filters' arguments: the rows, what each method reads of the filter, the angle
# weights, the sizes, and where the launch's rows go.
ROWS = Arg("rows", "__global const float *", "n_rows rows of n_bins (all slices, all angles)")
WEIGHTS = Arg("weights", "__global const float *", "per angle: angular weight (radians)")
FIRST_ROW = Arg("first_row", "const int", "the launch's first row (pybp/cl/pacing.py)")
FFT_ARGS = (ROWS,
            Arg("twiddles", "__global const float2 *", "N/2: exp(-2 pi i k / N)"),
            Arg("response", "__global const float *", "N: the filter's real response, / N"),
            WEIGHTS, Arg("n_bins", "const int"), Arg("n_angles", "const int"),
            Arg("n_rows", "const int"), FIRST_ROW,
            Arg("out", "__global float *", "may be `rows`"))
CONVOLUTION_ARGS = (ROWS,
                    Arg("taps", "__global const float *", "2 n_bins - 1 filter taps"),
                    Arg("edges", "__global const float *",
                        "edge padding: per bin, the left and right tap sums"),
                    WEIGHTS, Arg("n_bins", "const int"), Arg("n_angles", "const int"),
                    FIRST_ROW, Arg("out", "__global float *", "the launch's rows, from its first"))

TABLE = Arg("table", "__global const float2 *", "N/2: exp(-2 pi i m / N)")
SCRATCH = Arg("scratch", "__global float2 *", "N complex points per pair of rows")
GLOBAL_FFT_KERNELS = {
    "columns_forward": (ROWS, TABLE, Arg("n_bins", "const int"), Arg("n_rows", "const int"),
                        FIRST_ROW, SCRATCH),
    "rows_filter": (TABLE, Arg("response", "__global const float *",
                               "N: the real response, / N, in the scratch's order"), SCRATCH),
    "columns_inverse": (TABLE, SCRATCH, WEIGHTS, Arg("n_bins", "const int"),
                        Arg("n_angles", "const int"), Arg("n_rows", "const int"), FIRST_ROW,
                        Arg("out", "__global float *", "may be `rows`")),
}


@functools.lru_cache(maxsize=16)
def fft_source(size: int, items: int, padding: str, first: int, paired: bool) -> str:
    """Source of ``filter_rows`` by FFT: ``size`` points (a power of two) on ``items``
    work-items; rows start at padded position ``first`` (edge padding); ``paired``
    exchanges whole complex values through local memory (2 ``size`` floats); each
    transform takes two neighbouring rows (:func:`pairs`)."""
    return codegen.render("stages/fft.cl.mako", {"filter_rows": FFT_ARGS}, size=size, items=items,
                          padding=padding, first=first, paired=paired)


def pairs(rows: int) -> int:
    """Transforms over ``rows`` rows, two neighbours each (an odd last row paired with
    zeros)."""
    return -(-rows // 2)


@functools.lru_cache(maxsize=4)
def convolution_source(padding: str = "zero") -> str:
    """Source of ``filter_rows`` by direct convolution, ``zero`` or ``edge`` padding."""
    return codegen.render("stages/filter.cl.mako", {"filter_rows": CONVOLUTION_ARGS}, tile=CONVOLUTION_TILE,
                          padding=padding)


class FftFilter:
    """Filters rows of sinograms on the device by FFT, in place if asked: two rows per
    complex transform, one work-group each (radix-2 Stockham in local memory).

    ``weights`` are the angle weights (the geometry's, or the caller's); each transform
    takes two neighbouring rows."""

    row_step = 2  # a launch starts on a pair

    def __init__(self, context, device, name, n_bins, weights, padding="zero", paired=None):
        size = padded_size(n_bins)
        self.n_angles = len(weights)
        self.items = min(FFT_ITEMS, size // 2, context.devices[0].max_work_group_size)
        first = edge_padding(n_bins)[0] if padding == "edge" else 0
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        twiddles = np.exp(-2j * np.pi * np.arange(size // 2) / size).astype(np.complex64)
        self.twiddles = cl.Buffer(context, flags, hostbuf=twiddles)
        self.response = cl.Buffer(context, flags,
                                  hostbuf=(even_response(name, size) / size).astype(np.float32))
        self.weights = cl.Buffer(context, flags, hostbuf=np.asarray(weights, np.float32))
        if paired is None:  # whole complex values through local memory, where they fit
            paired = 8 * size <= context.devices[0].local_mem_size
        self.kernel = codegen.declared(context, device,
                                       fft_source(size, self.items, padding, first, paired),
                                       "filter_rows", FFT_ARGS)
        self.n_bins = n_bins

    @staticmethod
    def fits(device, n_bins) -> bool:
        """Whether a padded row fits the device's local memory (one float per point)."""
        return 4 * padded_size(n_bins) <= device.local_memory

    in_place = True  # a work-group reads its two rows whole before it writes them

    @property
    def row_cost(self) -> int:
        """Work per row, in the units :class:`pybp.cl.pacing.Pacer` times launches by."""
        size = padded_size(self.n_bins)
        return size * int(np.log2(size))

    def __call__(self, queue, source, destination, n_slices, wait_for=None, first_row=0,
                 rows=None):
        """Filter rows ``[first_row, first_row + rows)`` (default: all) of ``n_slices``
        sinograms."""
        total = n_slices * self.n_angles
        rows = total - first_row if rows is None else rows
        return self.kernel(queue, (pairs(rows) * self.items,), (self.items,),
                           wait_for,
                           rows=source, twiddles=self.twiddles, response=self.response,
                           weights=self.weights, n_bins=self.n_bins, n_angles=self.n_angles,
                           n_rows=total, first_row=first_row, out=destination)


class ConvolutionFilter:
    """Filters rows of sinograms on the device by direct convolution (any row length;
    not in place). ``weights`` are the angle weights."""

    def __init__(self, context, device, name, n_bins, weights, padding="zero"):
        self.n_bins, self.n_angles = n_bins, len(weights)
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self.taps = cl.Buffer(context, flags, hostbuf=filter_taps(name, n_bins).astype(np.float32))
        self.weights = cl.Buffer(context, flags, hostbuf=np.asarray(weights, np.float32))
        edges = edge_weights(name, n_bins) if padding == "edge" else np.zeros((2, 1))
        self.edges = cl.Buffer(context, flags, hostbuf=edges.astype(np.float32))
        self.kernel = codegen.declared(context, device, convolution_source(padding),
                                       "filter_rows", CONVOLUTION_ARGS)

    row_step = 1
    in_place = False  # work-groups read whole rows that others write

    @property
    def row_cost(self) -> int:
        return self.n_bins * (2 * self.n_bins - 1)

    def __call__(self, queue, source, destination, n_slices, wait_for=None, first_row=0,
                 rows=None):
        """Filter rows ``[first_row, first_row + rows)`` (default: all) of ``n_slices``
        sinograms into the first ``rows`` rows of ``destination`` (not ``source``)."""
        tile = CONVOLUTION_TILE
        rows = n_slices * self.n_angles - first_row if rows is None else rows
        return self.kernel(queue, (-(-self.n_bins // tile) * tile, rows), (tile, 1), wait_for,
                           rows=source, taps=self.taps, edges=self.edges, weights=self.weights,
                           n_bins=self.n_bins, n_angles=self.n_angles, first_row=first_row,
                           out=destination)


def local_points(device) -> int:
    """Complex points a work-group of the global FFT transforms at once: the largest
    power of two whose two local buffers (8 bytes a point) fit the device's local
    memory, at most :data:`LOCAL_POINTS`."""
    points = LOCAL_POINTS
    while points > 64 and 16 * points > device.local_memory:
        points //= 2
    return points


def four_step(size: int, points: int) -> tuple[int, int]:
    """``(n1, n2)``, ``n1 * n2 == size``: column transforms of ``n1`` points (at most 32
    where rows allow, so a work-group reads many neighbouring columns at once) and row
    transforms of ``n2`` (at most ``points``)."""
    n1 = max(size // points, min(32, size // 2))
    return n1, size // n1


def lines(size: int, points: int) -> tuple[int, int]:
    """Columns and rows a work-group of the global FFT transforms at once."""
    n1, n2 = four_step(size, points)
    return min(points // n1, n2), min(max(1, points // n2), n1)


@functools.lru_cache(maxsize=16)
def global_fft_source(size: int, points: int, items: int, padding: str, first: int) -> str:
    n1, n2 = four_step(size, points)
    column_lines, row_lines = lines(size, points)
    return codegen.render("stages/fft_global.cl.mako", GLOBAL_FFT_KERNELS, n1=n1, n2=n2,
                          column_lines=column_lines, row_lines=row_lines,
                          items=items, padding=padding, first=first)


class GlobalFftFilter:
    """Filters rows of sinograms on the device by FFT where a padded row is too long
    for one work-group's local memory: four-step transforms through a complex scratch
    buffer (templates/stages/fft_global.cl.mako), two rows per transform, in place.
    ``weights`` are the angle weights."""

    in_place = True  # a block's rows are read whole into the scratch before any is written
    row_step = 2  # a block starts on a pair

    def __init__(self, context, device, name, n_bins, weights, padding="zero"):
        size = padded_size(n_bins)
        points = local_points(device)
        if size > points ** 2:
            raise ValueError(f"n_bins: rows of {n_bins} bins pad to {size} points; the FFT "
                             f"takes at most {points ** 2} on {device.name}")
        n1, n2 = four_step(size, points)
        self.n_bins, self.n_angles, self.size, self.n1, self.n2 = n_bins, len(weights), size, n1, n2
        self.column_lines, self.row_lines = lines(size, points)
        self.items = min(FFT_ITEMS, points // 2, device.max_work_group_size)
        first = edge_padding(n_bins)[0] if padding == "edge" else 0
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        table = np.exp(-2j * np.pi * np.arange(size // 2) / size).astype(np.complex64)
        self.table = cl.Buffer(context, flags, hostbuf=table)
        response = even_response(name, size) / size  # k = k1 + n1 k2 at k1 * n2 + k2
        self.response = cl.Buffer(context, flags, hostbuf=np.ascontiguousarray(
            response.reshape(n2, n1).T).astype(np.float32))
        self.weights = cl.Buffer(context, flags, hostbuf=np.asarray(weights, np.float32))
        source = global_fft_source(size, points, self.items, padding, first)
        self.kernels = {kernel: codegen.declared(context, device, source, kernel, args)
                        for kernel, args in GLOBAL_FFT_KERNELS.items()}
        self.max_rows = max(1, SCRATCH_BYTES // (8 * size)) * self.row_step
        self.context, self._scratch = context, None

    @property
    def row_cost(self) -> int:
        return self.size * int(np.log2(self.size))

    def __call__(self, queue, source, destination, n_slices, wait_for=None, first_row=0,
                 rows=None):
        """Filter rows ``[first_row, first_row + rows)`` (default: all) of ``n_slices``
        sinograms in place (``destination`` is ``source``), in blocks of at most
        ``max_rows``."""
        total = n_slices * self.n_angles
        rows = total - first_row if rows is None else rows
        if self._scratch is None:
            self._scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE,
                                      pairs(min(self.max_rows, total)) * 8 * self.size)
        capacity = self._scratch.size // (8 * self.size) * self.row_step
        event = None
        for start in range(first_row, first_row + rows, capacity):
            count = min(capacity, first_row + rows - start)
            transforms = pairs(count)
            common = dict(table=self.table, scratch=self._scratch)
            ends = dict(n_bins=self.n_bins, n_rows=start + count, first_row=start)
            event = self.kernels["columns_forward"](
                queue, (self.n2 // self.column_lines * self.items, transforms), (self.items, 1),
                wait_for if event is None else None, rows=source, **common, **ends)
            event = self.kernels["rows_filter"](
                queue, (-(-self.n1 // self.row_lines) * self.items, transforms), (self.items, 1),
                response=self.response, **common)
            event = self.kernels["columns_inverse"](
                queue, (self.n2 // self.column_lines * self.items, transforms), (self.items, 1),
                weights=self.weights, n_angles=self.n_angles, out=destination, **common,
                **ends)
        return event


def device_filter(context, device, name, n_bins, weights, padding="zero", method="auto"):
    """The FBP filter for a device: FFT in one work-group where a padded row fits its
    local memory, else FFT through global memory; ``method`` ("fft", "global-fft" or
    "convolution") forces one. (The global FFT takes 2.6x less device time at 2048
    bins on the H100, yet 1024 slices of 2048^2 streamed from memory 3% slower with it:
    2.91 s against 2.81-2.84 s, the same call; the cause is not found.)"""
    if method == "auto":
        method = "fft" if FftFilter.fits(device, n_bins) else "global-fft"
    if method == "fft":
        if not FftFilter.fits(device, n_bins):
            raise ValueError(f"filter_method: a padded row of {padded_size(n_bins)} points does "
                             f"not fit {device.name}'s local memory; use global-fft")
        return FftFilter(context, device, name, n_bins, weights, padding)
    if method == "global-fft":
        return GlobalFftFilter(context, device, name, n_bins, weights, padding)
    if method != "convolution":
        raise ValueError(f"filter_method: expected one of {', '.join(FILTER_METHODS)}; "
                         f"got {method!r}")
    return ConvolutionFilter(context, device, name, n_bins, weights, padding)


class Filter(Stage):
    """The FBP filter over a chunk's rows (``len(weights)`` of them a slice, each of
    ``n_bins``, in buffer ``buffer``: sinograms, or cone beam's projections; or as many
    as ``rows(chunk)`` says), in blocks
    paced by the executor's pacer (and no longer than the global FFT's scratch holds).
    The FFTs filter in place; direct convolution reads whole rows that other
    work-groups write, so it writes a block into scratch memory, copied back after."""

    name = "filter"

    def __init__(self, context, device, name, n_bins, weights, padding="zero", method="auto",
                 buffer="sinograms", rows=None):
        self.rows = device_filter(context, device, name, n_bins, weights, padding, method)
        self.context, self.n_bins, self.buffer = context, n_bins, buffer
        self.rows_of = rows or (lambda chunk: chunk.count * self.rows.n_angles)
        self.needs = (Need(buffer, len(weights) * n_bins * 4),)
        self._scratch = None  # rows filtered by direct convolution, before they go back

    def enqueue(self, chunk):
        f, q, pacer, n_bins = self.rows, chunk.queue, chunk.pacer, self.n_bins
        sinograms, stages, most = chunk.buffers[self.buffer], [], getattr(f, "max_rows", None)
        if not f.in_place:  # blocks of at most the scratch's rows, sized for any chunk
            most = min(max(1, SCRATCH_BYTES // (4 * n_bins)),
                       chunk.memory.chunk_slices * f.n_angles)
            if self._scratch is None or self._scratch.size < most * n_bins * 4:
                self._scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE,
                                          most * n_bins * 4)
        for first, rows in pacer.blocks("filter", self.rows_of(chunk), f.row_cost,
                                        f.row_step, most):
            pacer.admit("filter", rows * f.row_cost, chunk.stop)
            target = sinograms if f.in_place else self._scratch
            event = f(q, sinograms, target, chunk.count, first_row=first, rows=rows)
            q.flush()
            pacer.launched(event, "filter", rows * f.row_cost)
            stages.append(("filter", event))
            if not f.in_place:
                stages.append(("filter", cl.enqueue_copy(
                    q, sinograms, self._scratch, byte_count=rows * n_bins * 4,
                    dst_offset=first * n_bins * 4)))
        return stages

    def close(self):
        self._scratch = None
