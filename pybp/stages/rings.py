"""Ring removal on the device, on sinograms after ``-log``: stripes in a sinogram (a
detector column whose gain or offset is off) become rings about the axis in every
slice. Two methods, with their usual parameters and defaults:

- ``"sort"``: Vo et al.'s sorting-based removal (Opt. Express 26, 28396, 2018;
  algotom and tomopy ``remove_stripe_based_sorting``): ``size`` (21), the median's width
  across columns (odd, at most the detector's width);
  templates/stages/rings_sort.cl.mako.
- ``"fw"``: Münch et al.'s Fourier-wavelet removal (Opt. Express 17, 8567, 2009; tomopy
  ``remove_stripe_fw``): ``level`` (tomopy's default: log2 of the sinogram's longer side,
  rounded up), ``wavelet`` (``"db5"``), ``sigma`` (2), ``pad`` (True);
  pybp/stages/wavelets.py.

Each has a float64 NumPy reference written from the paper's formulas.
"""

from __future__ import annotations

import functools

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.stages.base import Need, Stage
from pybp.stages.wavelets import FourierWavelet
from pybp.stages.wavelets import check as check_fw
from pybp.stages.wavelets import defaults as fw_defaults

METHODS = ("sort", "fw")
SORT_DEFAULTS = dict(size=21)
SCRATCH_BYTES = 256 << 20  # most bytes of sorted sinograms at once
MEDIAN_TILE = 64  # ranks per work-group of the median


def options(method, given, n_angles: int, n_bins: int) -> dict:
    """The parameters of ``method`` (None, or one of :data:`METHODS`): its defaults
    updated by ``given`` (the caller's ``ring_options``), checked against the
    sinograms' shape."""
    if method is None:
        if given:
            raise ValueError("ring_options: given without rings; pass rings='sort' or 'fw'")
        return {}
    if method not in METHODS:
        raise ValueError(f"rings: expected one of {', '.join(METHODS)} or None; got {method!r}")
    if given is not None and not isinstance(given, dict):
        raise TypeError(f"ring_options: expected a dict, got {type(given).__name__}")
    defaults = SORT_DEFAULTS if method == "sort" else fw_defaults(n_angles, n_bins)
    unknown = sorted(set(given or {}) - set(defaults))
    if unknown:
        raise ValueError(f"ring_options: {', '.join(unknown)} not a parameter of rings="
                         f"{method!r} (expected {', '.join(defaults)})")
    chosen = dict(defaults, **(given or {}))
    if method == "sort":
        size = chosen["size"]
        if not isinstance(size, (int, np.integer)) or size < 3 or size % 2 == 0:
            raise ValueError(f"ring_options: size must be an odd whole number >= 3, got {size!r}")
        if size > n_bins:
            raise ValueError(f"ring_options: size {size} is larger than the detector's "
                             f"{n_bins} columns")
    else:
        check_fw(chosen, n_angles, n_bins)
    return chosen


def reflected(n: int, margin: int) -> np.ndarray:
    """Indices of a row of ``n`` with ``margin`` more each side, mirrored at the ends as
    d c b a | a b c d (scipy.ndimage's "reflect", NumPy's "symmetric")."""
    i = np.mod(np.arange(-margin, n + margin), 2 * n)
    return np.where(i < n, i, 2 * n - 1 - i)


def sort_numpy(sinograms, size: int = 21) -> np.ndarray:
    """Float64 reference of ``"sort"`` on sinograms ``(..., n_angles, n_bins)``: each
    column sorted along the angles (stably), a median across ``size`` columns of the
    sorted rows (mirrored at the ends), and the values put back where they came from."""
    sinograms = np.asarray(sinograms, np.float64)
    order = np.argsort(sinograms, axis=-2, kind="stable")
    ordered = np.take_along_axis(sinograms, order, axis=-2)
    windows = np.lib.stride_tricks.sliding_window_view(
        ordered[..., reflected(sinograms.shape[-1], size // 2)], size, axis=-1)
    smoothed = np.median(windows, axis=-1)
    out = np.empty_like(sinograms)
    np.put_along_axis(out, order, smoothed, axis=-2)
    return out


SORT_KERNELS = {
    "sort_columns": (Arg("sinograms", "__global const float *", "rows x n_angles x n_bins"),
                     *ints("n_angles", "n_bins"), Arg("first", "const int", "the block's first row"),
                     Arg("sorted", "__global float *", "the block's sorted columns"),
                     Arg("index", "__global int *", "the angle each sorted value came from")),
    "median_rows": (Arg("sorted", "__global const float *"), Arg("index", "__global const int *"),
                    *ints("n_angles", "n_bins"), Arg("first", "const int", "the block's first row"),
                    Arg("sinograms", "__global float *", "rows x n_angles x n_bins")),
}


@functools.lru_cache(maxsize=8)
def sort_source(points: int, items: int, size: int) -> str:
    return codegen.render("stages/rings_sort.cl.mako", SORT_KERNELS, points=points,
                          items=items, size=size, tile=MEDIAN_TILE)


class SortRings:
    """``"sort"`` on blocks of sinograms in a device buffer, in place: a bitonic sort of
    each column in local memory, then the medians, two columns at a time."""

    def __init__(self, context, device, n_angles, n_bins, size):
        self.n_angles, self.n_bins = n_angles, n_bins
        self.points = max(2, 1 << (n_angles - 1).bit_length())
        if 8 * self.points > device.local_memory:
            raise ValueError(f"rings: sorting {n_angles} angles needs {8 * self.points >> 10} "
                             f"KiB of local memory; {device.name} has "
                             f"{device.local_memory >> 10} KiB (use rings='fw')")
        self.items = min(256, self.points // 2, device.max_work_group_size)
        code = sort_source(self.points, self.items, size)
        self.kernels = {name: codegen.declared(context, device, code, name, args)
                        for name, args in SORT_KERNELS.items()}
        self.block = max(1, SCRATCH_BYTES // (8 * n_angles * n_bins))
        plane = n_angles * n_bins * 4
        self.sorted = cl.Buffer(context, cl.mem_flags.READ_WRITE, self.block * plane)
        self.index = cl.Buffer(context, cl.mem_flags.READ_WRITE, self.block * plane)
        self.cost = n_angles * n_bins * int(np.log2(self.points)) ** 2  # a sinogram's sort
        # The median of a pair of columns: its selection takes about size^2 steps a rank
        # (size 255 on a 2048^2 sinogram: 17.7 s on PoCL's 2 cores, so it is paced too).
        self.pairs = -(-n_bins // 2)
        self.pair_cost = 2 * n_angles * size * size
        self.shared_bytes = 2 * self.block * plane

    def __call__(self, queue, sinograms, first, count, pacer, stop=None):
        """Rows ``[first, first + count)`` of ``sinograms`` (at most ``block``): the
        sorts, then the medians in launches of pairs of columns the ``pacer`` admits;
        the events."""
        sizes = dict(n_angles=self.n_angles, n_bins=self.n_bins, first=first)
        scratch = dict(sorted=self.sorted, index=self.index)
        pacer.admit("rings", count * self.cost, stop)
        events = [self.kernels["sort_columns"](
            queue, (self.n_bins * self.items, count), (self.items, 1),
            sinograms=sinograms, **sizes, **scratch)]
        queue.flush()
        pacer.launched(events[-1], "rings", count * self.cost)
        ranks = -(-self.n_angles // MEDIAN_TILE) * MEDIAN_TILE
        for pair, pairs in pacer.blocks("median", self.pairs, count * self.pair_cost):
            pacer.admit("median", pairs * count * self.pair_cost, stop)
            events.append(self.kernels["median_rows"](
                queue, (ranks, pairs, count), (MEDIAN_TILE, 1, 1), global_offset=(0, pair, 0),
                sinograms=sinograms, **sizes, **scratch))
            queue.flush()
            pacer.launched(events[-1], "median", pairs * count * self.pair_cost)
        return events


class RingRemoval(Stage):
    """Ring removal (``method``, with ``params`` from :func:`options`) of a chunk's
    sinograms, in place, in blocks paced by the executor's pacer."""

    name = "rings"

    def __init__(self, context, device, n_angles, n_bins, method, params):
        self.needs = (Need("sinograms", n_angles * n_bins * 4),)
        if method == "sort":
            self.rows = SortRings(context, device, n_angles, n_bins, params["size"])
        else:
            self.rows = FourierWavelet(context, device, n_angles, n_bins, **params)
        self.shared_bytes = self.rows.shared_bytes

    def enqueue(self, chunk):
        f, events = self.rows, []
        for first, count in chunk.pacer.blocks("rings", chunk.count, f.cost, 1, f.block):
            launched = f(chunk.queue, chunk.buffers["sinograms"], first, count, chunk.pacer,
                         chunk.stop)
            events += [("rings", event) for event in launched]
        return events

    def close(self):
        self.rows = None
