"""What a geometry gives the stream: a :class:`Recipe` is one device prepared for a
geometry's chunks of detector rows. The stream (stream/jobs.py: one or several devices;
pybp/distributed.py: Dask workers) asks it for an executor ready for a run
(:meth:`Recipe.prepare`), the chunk grid a stage with a margin fixes
(:meth:`Recipe.chunk_grid`), the work a row stands for (``updates_per_slice``), and
to ``close()``.

A recipe names its own stages (``self.stages``: for parallel beam the filter and the
back-projection; for cone beam FDK's weights and the filter), its :meth:`layout` (what
a chunk holds going up and coming down) and its :meth:`memory` plan; the stages every
geometry puts first on projections (the flat-field normalisation and, with ``phase``,
phase retrieval: pybp/stages/) are made here, once per input dtype.
"""

from __future__ import annotations

import numpy as np

from pybp.stages.normalize import Normalize, raw_dtype
from pybp.stages.phase import PhaseRetrieval
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import CHUNK_SLICES, MemoryPlan, sum_margins


class Recipe:
    """Subclasses set ``context``, ``device`` (described), ``stages``, ``executor``,
    ``phase`` (a :class:`pybp.stages.phase.Paganin` or None), ``n_angles`` and
    ``n_bins`` (of a projection row), and implement :meth:`layout`, :meth:`memory` and
    :meth:`updates_per_slice`."""

    context = device = executor = phase = None
    stages: tuple = ()
    n_angles = n_bins = 0
    progress_labels: dict = {}  # what the progress line counts (Progress's what, rate)

    def layout(self, dtype=None) -> Layout:
        """Chunks of projections of ``dtype`` (None: of sinograms, where the geometry
        takes them)."""
        raise NotImplementedError

    def memory(self, n_slices, stages=None, chunk_slices=None, layout=None,
               preferred=CHUNK_SLICES) -> MemoryPlan:
        raise NotImplementedError

    def updates_per_slice(self) -> int:
        raise NotImplementedError

    def stages_for(self, dtype=None, log=True) -> tuple:
        """The stages of a run on projections of ``dtype`` (normalised on the device
        and, with ``log``, taken -log of), or on sinograms (``dtype`` None)."""
        if dtype is None:
            if self.phase is not None:
                raise ValueError("phase: retrieval works on projections, before -log; these "
                                 "are sinograms")
            return self.stages
        if self.phase is not None and not log:
            raise ValueError("phase: retrieval works on the transmission, before -log; "
                             "log=False takes the data as line integrals already")
        cache = self.__dict__.setdefault("_heads", {})
        key = (np.dtype(dtype), log)
        if key not in cache:
            first = Normalize(self.context, self.device, self.n_angles, self.n_bins, dtype,
                              log, intensity=self.phase is not None)
            cache[key] = (first,) if self.phase is None else (
                first, PhaseRetrieval(self.context, self.device, self.n_angles, self.n_bins,
                                      self.phase))
        return cache[key] + self.stages

    def chunk_grid(self, dtype, log=True, chunk_slices=None, preferred=CHUNK_SLICES):
        """Rows per chunk, counted from the detector's first row, where a stage reaches
        across rows (phase retrieval's filter: its frames, hence its values' last bits,
        depend on where a chunk starts and ends); None where none does. What this
        device's memory fits, whatever the run's length: a run of any rows, resumed or
        not, then cuts the same chunks (:meth:`pybp.stream.jobs.Pipelines.run`)."""
        dtype = raw_dtype(dtype)
        stages = self.stages_for(dtype, log)
        if not sum_margins(stages):
            return None
        return self.memory(1 << 30, stages, chunk_slices, self.layout(dtype), preferred).chunk_slices

    def prepare(self, n_slices, dtype=None, log=True, chunk_slices=None, writes=1,
                preferred=CHUNK_SLICES) -> Executor:
        """The executor, its stages and slots reserved for ``n_slices`` rows of
        projections of ``dtype`` (None: sinograms), chunks of ``preferred`` slices
        where neither ``chunk_slices`` nor a stage says otherwise
        (:meth:`pybp.stream.memory.MemoryPlan.create`), ``writes`` pieces written at
        once (:meth:`pybp.stream.executor.Executor.reserve`); each device's own thread
        calls this (pinning staging takes a while)."""
        dtype = None if dtype is None else raw_dtype(dtype)
        stages = self.stages_for(dtype, log)
        layout = self.layout(dtype)
        plan = self.memory(n_slices, stages, chunk_slices, layout, preferred)
        self.executor.reserve(stages, layout, plan, writes)
        return self.executor

    def close(self):
        """Release device memory and staging now."""
        self.executor.close()
        for stage in self.stages + sum(self.__dict__.get("_heads", {}).values(), ()):
            stage.close()
