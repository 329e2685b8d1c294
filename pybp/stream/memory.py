"""How chunks of a volume fit one device: slices per chunk, chunks in flight, and the
bytes of each, from the buffers the stages declare (pybp/stages/base.py). The one place
buffer sizes are added up: the executor allocates what the same declarations say."""

from __future__ import annotations

from dataclasses import dataclass

from pybp import checks
from pybp.stages.base import Need

SLOTS = 3           # chunks in flight: one uploading, one computing, one downloading
# Most slices per chunk. Each chunk's transfers hide behind another's kernels at any
# size. (Measured when staging was pinned per chunk, before pybp.stream.executor.Pieces:
# H100, 2048^3: 32 slices 7.77 s in all, of which 1.33 s allocating; 16 slices 6.75 s;
# H200, 512 x 2048^2: 8 slices 1.85 s, of which 0.24 s pinning and 0.15 s releasing;
# 4 slices 1.71 s, 0.13 s and 0.09 s, streaming as fast: multi_device.py@82c47bc.)
CHUNK_SLICES = 4
# Most slices per chunk of an input read from files (pybp.stream.sources.RowBlocks),
# where the host's steps per chunk (a block's rows, copies into staging, writes) cost
# more: on the H100 machine a DXchange file of 512 x 2048^2 to TIFF slices took 3.06 s
# with chunks of 4 slices, 2.85 s with 16 (the same call, command_speed.py@82c47bc
# --code); from arrays in memory, chunks of 16 took 0.1 s longer, all of it in making
# the larger device buffers (pybp bench --pipeline --rows 512).
FILE_CHUNK_SLICES = 16
# Of the device's global memory, the most a run keeps there unless ``memory_limit`` says
# less: the chunks in flight of parallel beam, the slab, pass buffers and store of cone
# beam (pybp/cone/backproject.py). One rule for both geometries.
MEMORY_SHARE = 0.75


@dataclass(frozen=True)
class Budget:
    """Bytes of one device's memory a run may keep, made once from the user's
    ``memory_limit`` (:meth:`of`) by the recipe that opens the device, and handed down
    as it is: ``allowed``, the most it may take; ``lent``, what the device lends
    (:data:`MEMORY_SHARE` of it, the rule of both geometries), each less what was
    set aside (:meth:`less`); ``limited``, whether the user's limit is what binds
    (the messages then name ``memory_limit``)."""

    allowed: int
    lent: int
    limited: bool = False

    @classmethod
    def of(cls, device, memory_limit=None) -> "Budget":
        """``device``'s budget (a :class:`pybp.cl.device.DeviceDescription`) under
        ``memory_limit`` (bytes, checked: :func:`pybp.checks.memory_limit`; None: the
        device's share)."""
        lent = int(device.global_memory * MEMORY_SHARE)
        limit = checks.memory_limit(memory_limit)
        if limit is None or limit >= lent:
            return cls(lent, lent)
        return cls(limit, lent, True)

    def less(self, n_bytes: int) -> "Budget":
        """What is left once ``n_bytes`` are set aside (another phase's buffers)."""
        return Budget(self.allowed - n_bytes, self.lent - n_bytes, self.limited)


def size_text(n_bytes) -> str:
    """Bytes for a message: KiB under 1 MiB, MiB under 256 MiB, else GiB."""
    if n_bytes < 2 ** 20:
        return f"{n_bytes / 2 ** 10:.1f} KiB"
    return f"{n_bytes / 2 ** 30:.2f} GiB" if n_bytes >= 2 ** 28 else f"{n_bytes / 2 ** 20:.1f} MiB"


@dataclass(frozen=True)
class MemoryPlan:
    """How a volume streams through one device: passes of
    ``pass_width`` slices, ``chunk_slices`` slices per chunk (a multiple of it),
    ``slots`` chunks in flight, and the device bytes of one slot's own buffers. With
    stages that need rows beyond a chunk's own (:attr:`pybp.stages.base.Stage.margin`),
    ``margin`` is the rows read beyond it on each side, and ``extra`` the rows each
    buffer holds beyond ``chunk_slices`` (name -> rows: those its stages see).

    ``work`` names the buffers that only the stages touch (neither the chunk's input
    nor its output, nor what the host uploads or reads back beside them): one compute
    queue runs the chunks' stages one chunk after another, so the slots share one of
    each (``work_bytes`` in all) and chunks can be larger. That matters where margins
    cost as much on every chunk (phase retrieval: 77 rows each side)."""

    chunk_slices: int
    slots: int
    slot_bytes: int
    pass_width: int
    margin: int = 0
    extra: tuple = ()
    work: tuple = ()
    work_bytes: int = 0

    def rows(self, name: str) -> int:
        """The rows buffer ``name`` of a slot holds."""
        return self.chunk_slices + dict(self.extra).get(name, 0)

    @classmethod
    def create(cls, stages, device, n_slices: int, widths=(1,), chunk_slices=None,
               slots=SLOTS, subject="one slice", advice="", own=None,
               preferred=CHUNK_SLICES, budget: Budget | None = None) -> "MemoryPlan":
        """Largest chunks (at most ``preferred`` slices, :data:`CHUNK_SLICES` or for
        inputs read from files :data:`FILE_CHUNK_SLICES`, or the most rows a stage
        prefers: :attr:`pybp.stages.base.Stage.chunk_rows`, at most any stage's
        :attr:`~pybp.stages.base.Stage.most_rows`; no more than ``n_slices`` needs)
        whose ``slots`` copies of the ``stages``' buffers fit ``budget`` (a
        :class:`Budget`; None: the device's share) beside what they share, each buffer
        within the device's largest allocation. Chunks are cut in passes of one of ``widths`` slices, the widest
        that fits (one 12000^2 slice fits PoCL's 2 GiB buffers; four do not); where
        none fits, ``ValueError`` names ``subject`` (``"argument: what one slice
        is"``), the sizes, the limits and ``advice``. ``own``: the names of the
        chunk's input and output buffers, where the slots may share the others
        (:func:`work_buffers`); None shares none."""
        needs = merged_needs(stages)
        extra = extra_rows(stages)
        work = work_buffers(stages, own) if own is not None else ()

        def size(names):
            """Bytes per slice, and those of the margins' rows and fixed sizes."""
            chosen = [(name, needs[name]) for name in names]
            # The margins' rows cost as much on every chunk, whatever its size.
            return (sum(n.per_slice for _, n in chosen),
                    sum(n.fixed + n.per_slice * extra.get(name, 0) for name, n in chosen))

        per_slot, fixed = size([name for name in needs if name not in work])
        per_work, fixed_work = size(work)
        per_slice = per_slot + per_work
        shared = sum(stage.shared_bytes for stage in stages) + fixed_work
        budget = budget or Budget.of(device)
        allowed = budget.allowed
        free = allowed - shared - slots * fixed
        # The most slices per chunk each buffer's largest allocation allows.
        most = min(device.max_allocation // n.per_slice - extra.get(name, 0)
                   for name, n in needs.items() if n.per_slice)
        largest = max(n.per_slice * (1 + extra.get(name, 0)) for name, n in needs.items())

        def fitting(room):
            return [w for w in sorted(widths, reverse=True) if w <= most and per_slice * w <= room]

        if not fitting(free) and fitting(budget.lent - shared - slots * fixed):
            raise ValueError(  # the limit, not the device, leaves no room
                f"memory_limit: {size_text(allowed)} hold no chunk of {subject.split(': ', 1)[-1]} "
                f"({size_text(per_slice + fixed + shared)} of device memory with what the stages "
                f"share); allow more, at most {size_text(budget.lent)} on {device.name}")
        widths = fitting(free)
        if not widths:
            raise ValueError(
                f"{subject} needs a buffer of {size_text(largest)} and "
                f"{size_text(per_slice + fixed + shared)} of device memory; {device.name} allows "
                f"buffers of {size_text(device.max_allocation)} and {size_text(allowed)} in all ("
                + ("memory_limit" if budget.limited else
                   f"{MEMORY_SHARE:.0%} of its memory")
                + f"){': ' + advice if advice else ''}")
        width = min(w for w in widths if w >= min(n_slices, widths[0]))  # no wider than needed
        preferred = max([preferred] + [stage.chunk_rows for stage in stages])
        preferred = min([preferred] + [stage.most_rows for stage in stages if stage.most_rows])
        wanted = -(-min(n_slices, chunk_slices or preferred) // width) * width
        fits = min(free // (slots * per_slot + per_work), most)
        chunk = max(width, min(wanted, int(fits) // width * width))
        slots = max(1, min(slots, -(-n_slices // chunk),
                           int((free - chunk * per_work) // (chunk * per_slot))))
        return cls(chunk, slots, chunk * per_slot + fixed, width, sum_margins(stages),
                   tuple(sorted(extra.items())), work, chunk * per_work + fixed_work)


def work_buffers(stages, own) -> tuple:
    """The names of the buffers of ``stages`` that only the stages touch: all but
    ``own`` (the chunk's input and output) and what the host uploads or reads back for
    each chunk (:attr:`pybp.stages.base.Stage.uploads`, ``reports``)."""
    host = set(own) | {name for stage in stages for name in stage.uploads + stage.reports}
    return tuple(sorted(name for name in merged_needs(stages) if name not in host))


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
                                    max(known.fixed, need.fixed), known.host or need.host,
                                    known.allocated and need.allocated)
    return needs
