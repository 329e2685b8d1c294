"""What a device step is to the stream: a :class:`Stage` declares the buffers it uses
(:class:`Need`) and enqueues its kernels on a :class:`Chunk`; the executor
(pybp/stream/executor.py) allocates every declared buffer once per slot and runs any
ordered list of stages on each chunk. docs/architecture.md shows how to add one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Need:
    """A device buffer of each chunk in flight: ``per_slice`` bytes for each slice (row)
    of the chunk plus ``fixed`` bytes. Stages that name the same buffer share it (the
    largest size wins): ``sinograms`` is written by one stage and read by the next.
    ``host``: the dtype the host fills it with, for buffers uploaded with a chunk
    (:attr:`Stage.uploads`) or read back after it (:attr:`Stage.reports`).
    ``allocated=False``: memory the stage allocates itself, in arrays of their own, that
    the plan counts but the executor does not make (the iterative methods' working set:
    NVIDIA's OpenCL ran their kernels 3x slower on sub-buffers of one buffer)."""

    name: str
    per_slice: int = 0
    fixed: int = 0
    host: np.dtype | None = None
    allocated: bool = True

    def bytes(self, slices: int) -> int:
        return max(1, self.per_slice * slices + self.fixed)


@dataclass
class Chunk:
    """One chunk in flight, as a stage sees it: the slot's ``buffers`` by name, the
    ``count`` slices (rows) its input holds, the names of the buffers uploaded with it
    (``uploaded``), the compute ``queue``, the executor's ``pacer`` (long work is cut
    into launches of bounded duration: pybp/cl/pacing.py), the ``memory`` plan and the
    ``stop`` event.

    ``crop``: ``(before, after)`` rows of the input that are margins for this stage
    alone (:attr:`Stage.margin`): it writes ``count - before - after`` rows, leaving
    out that many first and last rows. A margin is smaller than the stage's own at the
    volume's first and last rows, where no more exist: there the stage extends the
    rows it has as it would for the whole volume (by replicating the edge row, say), so
    that chunked results equal one pass. ``margins``: ``(before, after)`` rows of the
    input that are margins (of this stage or later ones), or own rows a run computes
    but does not keep, not the chunk's own: counts of values leave them out, for the
    chunks they belong to count them. ``grid``:
    ``(before, after)`` rows of the margins that belong to the chunk's grid chunk
    (:class:`pybp.stream.pipeline.Rows`): a stage that reaches across rows computes the
    grid chunk as one, wherever the run's rows begin and end. ``first_row``: the
    detector row of the first row this stage sees (cone beam's weights depend on it).
    ``input_read``: set by a stage, the event after which no stage reads the chunk's input
    buffer again, where that comes before its last event (cone beam's texture family
    copies its pass into images first): the slot may then take the next chunk's upload
    while the kernels still run."""

    buffers: dict
    count: int
    queue: object
    pacer: object
    memory: object
    stop: threading.Event | None = None
    uploaded: frozenset = field(default_factory=frozenset)
    crop: tuple = (0, 0)
    margins: tuple = (0, 0)
    grid: tuple = (0, 0)
    first_row: int = 0
    input_read: object = None

    @property
    def rows_out(self) -> int:
        """The rows the stage writes."""
        return self.count - self.crop[0] - self.crop[1]


class Stage:
    """A device step on chunks of slices. Subclasses set ``name`` (their device time is
    counted under it), ``needs`` (a tuple of :class:`Need`), and implement
    :meth:`enqueue`.

    - ``uploads``: names of needs the host fills for each chunk beside its input (the
      dark and flat means of normalisation).
    - ``reports``: names of needs read back after each chunk (one uint32 counter each),
      judged by :meth:`reported`.
    - ``margin``: rows a stage needs beyond those it writes, on each side (phase
      retrieval's filter reaches across detector rows). The schedule reads the sum of
      the stages' margins beyond each chunk's rows (clipped to the rows that exist),
      stages before this one work on them too, and this one leaves out its share
      (:attr:`Chunk.crop`); buffers are sized for the rows each stage sees.
    - ``shared_bytes``: device memory the stage keeps for all chunks at once.
    - ``chunk_rows``: own rows per chunk the stage would like (one with a margin: so
      many that the margins' rows cost little), where memory allows and the caller
      sets none.
    - ``most_rows``: the most rows per chunk the stage takes where the caller sets none
      (0: no bound), however many the input's reads or another stage would like: an
      iterative method's chunk is one long call (pybp/parallel/iterate.py).
    """

    name = "stage"
    needs: tuple = ()
    uploads: tuple = ()
    reports: tuple = ()
    margin = 0
    shared_bytes = 0
    chunk_rows = 0
    most_rows = 0

    def enqueue(self, chunk: Chunk) -> list:
        """Enqueue the step on ``chunk``; return ``[(name, event), ...]`` of what it
        launched (the pacer may make it wait before each launch)."""
        raise NotImplementedError

    def reported(self, counts: dict) -> int:
        """What the counters of :attr:`reports` of a finished chunk add up to (raise to
        refuse the chunk before its slices are written)."""
        return 0

    def close(self):
        """Free what the stage keeps on the device."""


class Zeros:
    """Host zeros to reset device counters with, grown as needed and never written:
    copied rather than filled, as Oclgrind 21.10's checker does not count
    clEnqueueFillBuffer as a write (docs/portability.md)."""

    def __init__(self):
        self._zeros = np.zeros(1, np.uint32)

    def __call__(self, count: int) -> np.ndarray:
        if count > len(self._zeros):
            self._zeros = np.zeros(count, np.uint32)
        return self._zeros[:count]
