"""Volumes larger than the device (the large-scale study, docs/design.md, section 8):
the volume in slabs of z planes, and for each slab and pass of projections only the
detector rows its voxels project onto.

A voxel's row ``r = (M_r . X) / (M_w . X)`` is monotone along any line where ``w > 0``,
so over a slab (a box of voxel centres) it is extreme at the box's corners. A window
holds the rows from ``floor(r_min) - 1`` to ``floor(r_max) + 2`` (the bilinear sample's
two rows, and a row of margin for positions rounded on the device), clipped to the
detector. Windows start and end on even rows (or the detector's last) and buffers hold
an even number of rows per image, with zeros after an odd last row: the FFT filter,
which transforms two rows at once, pairs the same rows with the same partners as over
the whole detector, so a slab's voxels equal those of one pass bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.geometry.cone import ConeGeometry

MARGIN_ROWS = 1
# Runs of planes (a resumed volume's, a Dask task's) start on a multiple of the widest
# column of voxels a work-item computes: their voxels equal the whole volume's bit for bit.
PLANE_ALIGN = 16


@dataclass(frozen=True)
class Slab:
    """z planes ``[first_plane, first_plane + n_planes)`` and, per pass, the window
    ``(first_row, n_rows)`` of detector rows they project onto."""

    first_plane: int
    n_planes: int
    windows: tuple


@dataclass(frozen=True)
class SlabPlan:
    """``passes``: ``(first, count)`` projections per launch; ``slabs``; ``row_stride``:
    rows each image of a pass buffer holds (the largest window, made even);
    ``slab_planes``: the planes of the slab buffer (the last slab may hold fewer)."""

    passes: tuple
    slabs: tuple
    row_stride: int
    slab_planes: int

    def pass_bytes(self, n_cols: int, per_pass: int) -> int:
        return per_pass * self.row_stride * n_cols * 4


def window(geometry: ConeGeometry, planes: range, projections: range) -> tuple:
    """``(first_row, n_rows)``: the detector rows the voxel centres of z ``planes``
    project onto (with the bilinear sample's second row and a margin) in any of
    ``projections``; the first row even; at least one row."""
    return windows(geometry, planes, ((projections.start, len(projections)),))[0]


def windows(geometry: ConeGeometry, planes: range, passes) -> tuple:
    """:func:`window` of ``planes`` for each ``(first, count)`` of ``passes``, the
    corners projected by every projection at once (one call a pass took 0.15 ms: the
    plan of 2048 projections of a 2048^3 volume, 0.6 s)."""
    nz, ny, nx = geometry.volume_shape
    n_rows = geometry.detector_shape[0]
    corners = np.array([(i, j, k, 1.0) for i in (0, nx - 1) for j in (0, ny - 1)
                        for k in (planes.start, planes.stop - 1)])
    projected = np.einsum("nac,pc->npa", geometry.voxel_matrices(), corners)
    rows = projected[..., 1] / projected[..., 2]
    low, high = np.floor(rows.min(axis=1)), np.floor(rows.max(axis=1))
    found = []
    for a, n in passes:
        first = int(np.clip(low[a:a + n].min() - MARGIN_ROWS, 0, n_rows - 1))
        stop = int(np.clip(high[a:a + n].max() + 2 + MARGIN_ROWS, first + 1, n_rows))
        first -= first % 2
        stop = min(n_rows, stop + stop % 2)
        found.append((first, stop - first))
    return tuple(found)


def _gib(n_bytes: int) -> str:
    """Bytes in the largest binary unit under them (3.07 GiB, 96 KiB)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= 1 << shift:
            return f"{n_bytes / 2 ** shift:.3g} {unit}"
    return f"{n_bytes} bytes"


def even(n: int) -> int:
    """``n``, or the next even number."""
    return n + n % 2


def _slab(geometry, passes, planes: range) -> Slab:
    return Slab(planes.start, len(planes), windows(geometry, planes, passes))


def _slabs(geometry, passes, planes_per_slab, planes):
    return tuple(_slab(geometry, passes, range(first, min(planes.stop, first + planes_per_slab)))
                 for first in range(planes.start, planes.stop, planes_per_slab))


def tapered(geometry: ConeGeometry, plan: SlabPlan, step: int) -> tuple:
    """``plan``'s slabs in the order to take them where each is written behind (while
    the next one's passes run): the last slab of the full height cut into a half, a
    quarter and the rest of it (multiples of ``step`` planes, the larger first), taken
    after every other. What is left after the last pass is then the read-back and the
    writes of a quarter of a slab, and what is queued before them, rather than of a
    whole slab (2048^3 to a ``.npy``: docs/benchmarks.md's history, issue 53's fourth step).
    Plans of one slab, or of slabs under ``4 * step`` planes, stay as they are."""
    full = plan.slab_planes
    last = max((i for i, slab in enumerate(plan.slabs) if slab.n_planes == full), default=None)
    if len(plan.slabs) < 2 or last is None or full < 4 * step:
        return plan.slabs
    half = full // 2 // step * step
    quarter = (full - half) // 2 // step * step
    edges = [plan.slabs[last].first_plane]
    for n in sorted((half, quarter, full - half - quarter), reverse=True):
        edges.append(edges[-1] + n)
    cut = tuple(_slab(geometry, plan.passes, range(a, b)) for a, b in zip(edges[:-1], edges[1:]))
    return plan.slabs[:last] + plan.slabs[last + 1:] + cut


def plan(geometry: ConeGeometry, projections_per_pass: int, voxels_per_item: int,
         budget: int, volume_limit: int, pass_buffers: float = 2, planes: range | None = None,
         most_planes: int | None = None) -> SlabPlan:
    """The tallest slabs of z ``planes`` (None: all; a multiple of ``voxels_per_item``
    planes, so that where ``planes`` starts on such a multiple a slab's columns of
    voxels are those of one pass) whose volume (at most ``volume_limit`` bytes, one
    buffer) and ``pass_buffers`` pass buffers (of float32 images; a buffer of narrower
    values counts its share) fit ``budget`` bytes, of at most
    ``most_planes`` planes (None: no bound); ``ValueError`` naming ``memory_limit``
    where not even one column of planes fits."""
    _, ny, nx = geometry.volume_shape
    planes = range(geometry.volume_shape[0]) if planes is None else planes
    nz = len(planes)
    n_cols = geometry.detector_shape[1]
    n = geometry.n_angles
    passes = tuple((a, min(projections_per_pass, n - a)) for a in range(0, n, projections_per_pass))
    plane_bytes = ny * nx * 4

    def made(count):
        slabs = _slabs(geometry, passes, count, planes)
        stride = even(max(rows for slab in slabs for _, rows in slab.windows))
        return SlabPlan(passes, slabs, stride, count)

    def fits(p: SlabPlan):
        volume = p.slab_planes * plane_bytes
        if most_planes is not None and p.slab_planes > max(most_planes, voxels_per_item):
            return False
        return volume <= volume_limit and \
            volume + pass_buffers * p.pass_bytes(n_cols, projections_per_pass) <= budget

    step = voxels_per_item
    whole = made(nz)
    if fits(whole):
        return whole
    low, high = 0, -(-nz // step)  # in columns of planes: low fits (or is 0), high does not
    best = None
    while high - low > 1:
        middle = (low + high) // 2
        candidate = made(middle * step)
        if fits(candidate):
            low, best = middle, candidate
        else:
            high = middle
    if best is None:
        candidate = made(step)
        if not fits(candidate):
            passes_bytes = int(pass_buffers * candidate.pass_bytes(n_cols, projections_per_pass))
            raise ValueError(
                f"memory_limit: {_gib(budget)} of device memory hold no slab of {step} planes "
                f"of {ny} x {nx} voxels ({_gib(step * plane_bytes)}, in one buffer of at most "
                f"{_gib(volume_limit)}) beside the buffers of passes of {projections_per_pass} "
                f"projections ({_gib(passes_bytes)}); allow more memory, or reconstruct a "
                "smaller volume_shape")
        best = candidate
    return best
