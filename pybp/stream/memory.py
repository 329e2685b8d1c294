"""How chunks of a volume fit one device: slices per chunk, chunks in flight, and the
bytes of each, from the buffers the stages declare (pybp/stages/base.py). The one place
buffer sizes are added up: the executor allocates what the same declarations say."""

from __future__ import annotations

from dataclasses import dataclass

from pybp.stages.base import Need

SLOTS = 3           # chunks in flight: one uploading, one computing, one downloading
# Most slices per chunk. Each chunk's transfers hide behind another's kernels at any
# size. (Measured when staging was pinned per chunk, before pybp.stream.executor.Pieces:
# H100, 2048^3: 32 slices 7.77 s in all, of which 1.33 s allocating; 16 slices 6.75 s;
# H200, 512 x 2048^2: 8 slices 1.85 s, of which 0.24 s pinning and 0.15 s releasing;
# 4 slices 1.71 s, 0.13 s and 0.09 s, streaming as fast: tuning/multi_device.py.)
CHUNK_SLICES = 4
MEMORY_SHARE = 0.5  # of the device's global memory, for the chunks in flight


def _size(n_bytes) -> str:
    return f"{n_bytes / 2 ** 30:.2f} GiB" if n_bytes >= 2 ** 28 else f"{n_bytes / 2 ** 20:.1f} MiB"


@dataclass(frozen=True)
class MemoryPlan:
    """How a volume streams through one device: passes of
    ``pass_width`` slices, ``chunk_slices`` slices per chunk (a multiple of it),
    ``slots`` chunks in flight, and the device bytes of one slot's buffers. With
    stages that need rows beyond a chunk's own (:attr:`pybp.stages.base.Stage.margin`),
    ``margin`` is the rows read beyond it on each side, and ``extra`` the rows each
    buffer holds beyond ``chunk_slices`` (name -> rows: those its stages see)."""

    chunk_slices: int
    slots: int
    slot_bytes: int
    pass_width: int
    margin: int = 0
    extra: tuple = ()

    def rows(self, name: str) -> int:
        """The rows buffer ``name`` of a slot holds."""
        return self.chunk_slices + dict(self.extra).get(name, 0)

    @classmethod
    def create(cls, stages, device, n_slices: int, widths=(1,), chunk_slices=None,
               slots=SLOTS, subject="one slice", advice="") -> "MemoryPlan":
        """Largest chunks (at most ``CHUNK_SLICES``, or the most rows a stage prefers:
        :attr:`pybp.stages.base.Stage.chunk_rows`; no more than ``n_slices`` needs)
        whose ``slots`` copies of the ``stages``' buffers fit ``MEMORY_SHARE`` of global
        memory beside what they share, each buffer within the device's largest
        allocation. Chunks are cut in passes of one of ``widths`` slices, the widest
        that fits (one 12000^2 slice fits PoCL's 2 GiB buffers; four do not); where
        none fits, ``ValueError`` names ``subject`` (``"argument: what one slice
        is"``), the sizes, the limits and ``advice``."""
        needs = merged_needs(stages)
        extra = extra_rows(stages)
        per_slice = sum(n.per_slice for n in needs.values())
        # The margins' rows cost as much on every chunk, whatever its size.
        fixed = sum(n.fixed + n.per_slice * extra.get(name, 0) for name, n in needs.items())
        shared = sum(stage.shared_bytes for stage in stages)
        budget = device.global_memory * MEMORY_SHARE - shared - slots * fixed
        # The most slices per chunk each buffer's largest allocation allows.
        most = min(device.max_allocation // n.per_slice - extra.get(name, 0)
                   for name, n in needs.items() if n.per_slice)
        largest = max(n.per_slice * (1 + extra.get(name, 0)) for name, n in needs.items())
        widths = [w for w in sorted(widths, reverse=True) if w <= most and per_slice * w <= budget]
        if not widths:
            raise ValueError(
                f"{subject} needs a buffer of {_size(largest)} and "
                f"{_size(per_slice + fixed + shared)} of device memory; {device.name} allows "
                f"buffers of {_size(device.max_allocation)} and "
                f"{_size(device.global_memory * MEMORY_SHARE)} in all ({MEMORY_SHARE:.0%} of "
                f"its memory){': ' + advice if advice else ''}")
        width = min(w for w in widths if w >= min(n_slices, widths[0]))  # no wider than needed
        preferred = max([CHUNK_SLICES] + [stage.chunk_rows for stage in stages])
        wanted = -(-min(n_slices, chunk_slices or preferred) // width) * width
        fits = min(budget // (slots * per_slice), most)
        chunk = max(width, min(wanted, int(fits) // width * width))
        slots = max(1, min(slots, -(-n_slices // chunk), int(budget // (chunk * per_slice))))
        return cls(chunk, slots, chunk * per_slice + fixed, width, sum_margins(stages),
                   tuple(sorted(extra.items())))


def sum_margins(stages) -> int:
    """Rows read beyond a chunk's own on each side for ``stages``."""
    return sum(stage.margin for stage in stages)


def extra_rows(stages) -> dict:
    """Rows beyond a chunk's own that each buffer of ``stages`` must hold (name ->
    rows, both sides): the most any stage naming it sees, which is the margins of that
    stage and of those after it."""
    extra, beyond = {}, sum_margins(stages)
    for stage in stages:
        for need in stage.needs:
            if beyond:
                extra[need.name] = max(extra.get(need.name, 0), 2 * beyond)
        beyond -= stage.margin
    return extra


def merged_needs(stages) -> dict:
    """The buffers of ``stages`` by name; a buffer that several stages name is one, of
    the largest size any of them asks."""
    needs = {}
    for stage in stages:
        for need in stage.needs:
            known = needs.get(need.name, need)
            needs[need.name] = Need(need.name, max(known.per_slice, need.per_slice),
                                    max(known.fixed, need.fixed), known.host or need.host)
    return needs
