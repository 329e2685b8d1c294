"""Cone beam's back-projection as stages of the stream (docs/design.md, section 8): a
chunk is a pass of projections, the window of detector rows a slab of the volume
projects onto; its stages pre-weight it (from counts, with the flats and darks; FDK's
weights), filter its rows and add it into the slab, which stays on the device until
the last pass is in (pybp/stream/slabs.py runs the slabs, on one device or several).

:class:`SlabRecipe` is one device prepared for a geometry: its parameter set, the
stages and the slab plan (pybp/cone/slabs.py), and the executor
(pybp/stream/executor.py) whose queues, page-locked staging and pacer run them.
Each pass of a slab is pre-weighted, filtered and back-projected as the whole
volume's pass is, so slabs equal one piece bit for bit; where the projections went
through the rows' stream first (rings, phase: pybp/cone/run.py) the recipe is
``filtered``: the back-projection alone, of the filtered rows it is given.
"""

from __future__ import annotations

import operator

import numpy as np
import pyopencl as cl

from pybp import checks
from pybp.cl import codegen, pacing
from pybp.cl.device import describe, open_device
from pybp.cone import kernels, slabs
from pybp.cone.params import ConeParams
from pybp.cone.profiler import default_params
from pybp.geometry import cone_weights as weights
from pybp.geometry.cone import ConeGeometry
from pybp.stages.base import Chunk, Need, Stage, Zeros
from pybp.stages.filters import FILTERS, PADDINGS, Filter
from pybp.stages.normalize import FLOOR_TRANSMISSION, RAW_TYPES
from pybp.stream import memory, numa, pipeline
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import MemoryPlan
from pybp.stream.recipe import Recipe
from pybp.stream.sources import (BEHIND_WRITES, WriteBehind, copy_blocks, frame_mean, in_blocks,
                                 put_rows, read_into)

PREWEIGHT_GROUP = (64, 4, 1)
IMAGES = "images"  # the chunk's buffer: its projections' windows of rows, in place
COUNTS = "counts"  # detector counts as they came, where they go up as integers
SLAB = "slab"  # the slab of the volume the passes add into
# Counts of these types go up as they are (half the bytes of float32, or a quarter),
# read straight into staging where the source can (pybp/stream/sources.py: read_into);
# the pre-weighting converts them. Wider ones become float32 on the host.
RAW_COUNTS = {dtype: name for dtype, name in RAW_TYPES.items()
              if dtype.kind in "iu" and dtype.itemsize <= 2}
COUNTS_BYTES = 2  # per pixel of a pass's counts buffer (planned for the widest of them)
# Passes in flight: one going up while the one before is back-projected. Three, at a
# memory limit of a quarter of 512^3, made thinner slabs and a slower volume (H200: 16
# slabs, 0.54 s against 11 and 0.45 s: cone_slab_copies.py@82c47bc --slots).
PASS_SLOTS = 2


def _round_up(n, step):
    return -(-n // step) * step


def plane_range(planes, nz) -> range:
    """``planes`` ``(first, stop)`` of ``nz`` checked, as a range (None: all)."""
    if planes is None:
        return range(nz)
    try:
        first, stop = (operator.index(v) for v in planes)
    except (TypeError, ValueError):
        raise TypeError(f"planes: expected (first, stop), two integers, got {planes!r}") \
            from None
    if not 0 <= first < stop <= nz:
        raise ValueError(f"planes: expected 0 <= first < stop <= {nz}, got {planes!r}")
    return range(first, stop)


class Preweight(Stage):
    """A pass's rows made FDK's: from counts (the flats' and darks' means of the whole
    detector, kept on the device) to line integrals, times the cosine of each ray and
    the projection's column weights (``weighted``); values that are not positive
    transmissions, or not finite, are counted (``replaced``). Unweighted, on line
    integrals: the check alone (the plain back-projection's)."""

    name = "preweight"
    reports = ("replaced",)

    def __init__(self, recipe, short_scan, flats, darks):
        g, d, context = recipe.geometry, recipe.device, recipe.context
        self.recipe, self.counts = recipe, flats is not None
        # Counts may go up as integers (a buffer of their own) where the recipe plans it.
        self.raw_counts = self.counts and getattr(recipe, "raw_counts", False)
        self.weighted = recipe.filter is not None
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self.poses = self.columns = self.flat = self.dark = None
        real = "double" if "cl_khr_fp64" in d.extensions else "float"
        if self.weighted:
            as_float = lambda values: np.ascontiguousarray(values, np.float32)  # noqa: E731
            self.poses = cl.Buffer(context, flags, hostbuf=as_float(weights.poses(g).packed()))
            self.columns = cl.Buffer(context, flags,
                                     hostbuf=as_float(weights.column_weights(g, short_scan)))
        if self.counts:  # the means in ``real``, as parallel beam's normalisation has them
            as_real = lambda values: np.ascontiguousarray(  # noqa: E731
                values, np.float64 if real == "double" else np.float32)
            self.flat = cl.Buffer(context, flags, hostbuf=as_real(
                frame_mean(checks.frames(flats, "flats", tuple(g.detector_shape)))))
            self.dark = cl.Buffer(context, flags, hostbuf=as_real(
                frame_mean(checks.frames(darks, "darks", tuple(g.detector_shape)))))
        self.shared_bytes = sum(b.size for b in (self.poses, self.columns, self.flat, self.dark)
                                if b is not None)
        self.context, self.cl_device, self.real = context, d, real
        self.kernels = {None: self._kernel(None)}  # by the counts' raw type (None: floats)
        self.raw = None  # the raw type of the call's counts (None: in the images, as floats)
        self.needs = (Need(IMAGES, recipe.image_bytes),
                      Need("replaced", fixed=4, host=np.dtype(np.uint32))) + \
            ((Need(COUNTS, recipe.image_bytes // 4 * COUNTS_BYTES),) if self.raw_counts else ())
        self._zeros = Zeros()

    def _kernel(self, raw):
        return codegen.declared(
            self.context, self.cl_device,
            kernels.preweight_source(self.counts, self.real, FLOOR_TRANSMISSION,
                                     weighted=self.weighted, raw=raw),
            "cone_preweight", kernels.preweight_args(self.counts, self.weighted, self.real, raw))

    def counts_dtype(self, dtype) -> np.dtype | None:
        """How counts of ``dtype`` go up: as they are (their dtype), or None (as float32,
        converted on the host); and the kernel that takes them, built once."""
        dtype = None if dtype is None else np.dtype(dtype)
        self.raw = RAW_COUNTS.get(dtype) if self.raw_counts else None
        if self.raw not in self.kernels:
            self.kernels[self.raw] = self._kernel(self.raw)
        return dtype if self.raw else None

    def enqueue(self, chunk):
        r, q, b = self.recipe, chunk.queue, chunk.buffers
        n_cols = r.geometry.detector_shape[1]
        events = [(self.name, cl.enqueue_copy(q, b["replaced"], self._zeros(1),
                                              is_blocking=False))]
        first, count, (first_row, n_rows) = r.pass_of(chunk)
        stride = slabs.even(n_rows)
        extra = {}
        if self.weighted:
            extra = dict(poses=self.poses, column_weights=self.columns,
                         first_projection=first, first_row=first_row)
        if self.counts:
            extra.update(flat=self.flat, dark=self.dark)
        if self.raw:
            extra.update(counts=b[COUNTS])
        # (the images' row after an odd window is zeroed too: the FFT's pair)
        grid = (_round_up(n_cols, PREWEIGHT_GROUP[0]), _round_up(stride, PREWEIGHT_GROUP[1]),
                count)
        # Counts: each replaced pixel counted once, by the first slab whose windows hold
        # it. Line integrals: every slab checks all its rows, so that with several
        # devices none writes a slab a NaN spread into while another refuses it.
        counted = r.counted_rows(first // r.params.projections_per_pass) if self.counts \
            else (first_row, first_row + n_rows)
        events.append((self.name, self.kernels[self.raw](
            q, grid, PREWEIGHT_GROUP, images=b[IMAGES], n_rows=n_rows, row_stride=stride,
            n_cols=n_cols, counted_first=counted[0] - first_row, counted_stop=counted[1] - first_row,
            replaced_count=b["replaced"], **extra)))
        return events

    def reported(self, counts):
        """Values replaced (counts); line integrals with NaN or Inf are refused before
        the slab they would spread into is written, as every entry point of pybp does
        (docs/design.md, section 1)."""
        count = counts["replaced"]
        if count and not self.counts:
            raise ValueError(f"projections: {count} values are NaN or Inf; they would spread "
                             "over the volume: replace them first (numpy.nan_to_num), or give "
                             "flats (and darks) if these are detector counts")
        return count

    def close(self):
        self.poses = self.columns = self.flat = self.dark = None


class SlabBackproject(Stage):
    """A chunk's passes added into the slab (:data:`SLAB`; the chunk with the slab's
    first projection writes it), in launches of about ``pacing.LAUNCH_SECONDS``
    (blocks of columns of voxels, each computed as in one launch: Ctrl-C stays prompt
    on a CPU). The texture family reads each pass through an image array of its own,
    filled from the rows on the compute queue. The row after an odd window's last (the
    detector's last row) is zeroed first: the FFT pairs it with that row and writes its
    rounding there, a window from a store comes without it, and the detector is zero
    beyond its rows."""

    name = "backproject"

    def __init__(self, recipe):
        r, d = recipe, recipe.device
        self.recipe, p = recipe, recipe.params
        self.kernel = codegen.declared(
            r.context, d, kernels.backproject_source(p, r.filter is not None,
                                                     r.geometry.column_shared()),
            "cone_backproject", kernels.backproject_args(p))
        n_cols, stride = r.geometry.detector_shape[1], r.plan.row_stride
        # Every projection's matrix goes up once; each pass copies its own into the
        # buffer its kernels read (constant memory, from the buffer's start) on the
        # compute queue, after the kernels of the pass before: no upload of them a pass.
        self.all_matrices = cl.Buffer(
            r.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=r.matrices)
        self.matrices = cl.Buffer(r.context, cl.mem_flags.READ_WRITE, p.projections_per_pass
                                  * kernels.MATRIX_VALUES * r.matrices.itemsize)
        self.shared_bytes = self.all_matrices.size + self.matrices.size
        self.images = None
        if p.family == "texture":
            self.images = cl.create_image(
                r.context, cl.mem_flags.READ_ONLY,
                cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT),
                shape=(n_cols, stride, p.projections_per_pass), is_array=True)
            self.shared_bytes += n_cols * stride * p.projections_per_pass * 4
        _, ny, nx = r.geometry.volume_shape
        self.needs = (Need(IMAGES, r.image_bytes),
                      Need(SLAB, fixed=r.plan.slab_planes * ny * nx * 4))
        self._zeros = cl.Buffer(r.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                hostbuf=np.zeros(p.projections_per_pass * n_cols, np.float32))

    def enqueue(self, chunk):
        r, q, b = self.recipe, chunk.queue, chunk.buffers
        n_cols = r.geometry.detector_shape[1]
        row, events = n_cols * 4, []
        first, count, window = r.pass_of(chunk)
        stride = slabs.even(window[1])
        if window[1] % 2:
            events.append((self.name, cl.enqueue_copy(
                q, b[IMAGES], self._zeros, src_origin=(0, 0, 0), dst_origin=(0, window[1], 0),
                region=(row, 1, count), src_pitches=(row, row), dst_pitches=(row, stride * row))))
        per = kernels.MATRIX_VALUES * r.matrices.itemsize
        events.append((self.name, cl.enqueue_copy(q, self.matrices, self.all_matrices,
                                                  src_offset=first * per, byte_count=count * per)))
        source = b[IMAGES]
        if self.images is not None:
            # The kernels read the images: the slot's buffer (the chunk's input) is free
            # for the next upload once it is copied, and the uploads follow one another
            # instead of each waiting for the kernels of the pass before last. (The
            # compute queue is in order: the next pass's copies come after these kernels.)
            chunk.input_read = cl.enqueue_copy(
                q, self.images, b[IMAGES], offset=0, origin=(0, 0, 0),
                region=(n_cols, stride, count))
            events.append((self.name, chunk.input_read))
            if stride < r.plan.row_stride and sum(window) == r.geometry.detector_shape[0]:
                # The sampler reads zeros past the image's rows, and so past the
                # detector's where the window ends there: the rows below it (a longer
                # window's, before) are cleared. Elsewhere no voxel's sample reaches
                # past the window (its margin row, pybp/cone/slabs.py), as none reaches
                # above it.
                events.append((self.name, cl.enqueue_fill_image(
                    q, self.images, np.zeros(4, np.float32), origin=(0, stride, 0),
                    region=(n_cols, r.plan.row_stride - stride, count))))
            source = self.images
        return events + self.launch(chunk, source, self.matrices, first, count, window, stride)

    def launch(self, chunk, source, matrices, first, count, window, stride):
        """The back-projection of ``count`` images (of ``stride`` rows) from projection
        ``first`` into the slab, in paced launches; their events."""
        r = self.recipe
        _, ny, nx = r.geometry.volume_shape
        slab = r.slab
        gx, gy, columns = r.global_size(slab.n_planes)
        cost = gx * gy * r.params.voxels_per_item * count
        events, pacer = [], chunk.pacer
        for start, n in pacer.blocks(self.name, columns, cost):
            pacer.admit(self.name, n * cost, chunk.stop)
            size, offset = (gx, gy, n), (0, 0, start)
            if first == 0 or self.images is None:  # a slab's first pass: every argument
                event = self.kernel(
                    chunk.queue, size, r.params.group + (1,), None, offset,
                    projections=source, matrices=matrices, n_projections=count,
                    first_row=window[0], n_rows=window[1], row_stride=stride,
                    n_cols=r.geometry.detector_shape[1], nx=nx, ny=ny,
                    first_plane=slab.first_plane, n_planes=slab.n_planes,
                    accumulate=int(first > 0), volume=chunk.buffers[SLAB])
            else:  # the next passes into the same slab, from the same images
                event = self.kernel.again(
                    chunk.queue, size, r.params.group + (1,), offset, n_projections=count,
                    first_row=window[0], n_rows=window[1], row_stride=stride, accumulate=1)
            chunk.queue.flush()
            pacer.launched(event, self.name, n * cost)
            events.append((self.name, event))
        return events

    def close(self):
        self.images = self.matrices = self.all_matrices = self._zeros = None


class SlabRecipe(Recipe):
    """The stream's recipe (pybp/stream/recipe.py) of FDK's passes: ``geometry`` on one
    device (``device``, ``context`` or ``queue``) with ``params``
    (None: :func:`pybp.cone.profiler.default_params`). ``filter`` (a name of
    :data:`pybp.stages.filters.FILTERS`): FDK with that filter, ``padding`` and
    ``short_scan`` (:func:`pybp.geometry.cone_weights.column_weights`); None: the plain
    back-projection. ``memory_limit``: bytes of device memory for the slab and the
    passes in flight (None: :data:`pybp.stream.memory.MEMORY_SHARE` of the device's,
    the rule of both geometries); larger volumes go in slabs. ``budget`` (a
    :class:`pybp.stream.memory.Budget`), instead of ``memory_limit``: what another
    phase left of it (pybp/cone/store.py). ``planes``: the z planes
    ``(first, stop)`` to reconstruct (None: all); starting on a multiple of 16, they
    equal those of the whole volume bit for bit. ``flats`` and ``darks`` (frames or
    their means; darks None: zero), with FDK: the projections are counts, made
    ``-log((p - dark) / (flat - dark))`` on the device; values that are not positive
    become ``FLOOR_TRANSMISSION`` and are counted, as are NaN and Inf in line integrals
    (refused). ``filtered``: the rows given are ready (with a filter, FDK's filtered line
    integrals; without, checked line integrals): the back-projection alone. ``devices``: how
    many devices share the slabs (each then at most its share of the planes); ``plan``:
    another device's slab plan, kept (every device of a run takes the same slabs)."""

    def __init__(self, geometry: ConeGeometry, params: ConeParams | None = None, device=None,
                 context=None, queue=None, filter=None, padding="zero", short_scan=None,
                 memory_limit=None, planes=None, flats=None, darks=None, filtered=False,
                 devices=1, plan=None, budget=None):
        self.geometry = geometry
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = d = describe(self.cl_device)
        self.params = p = self._checked_params(params, d)
        if budget is not None and memory_limit is not None:
            raise TypeError("budget: give memory_limit or budget, not both")
        self.budget = budget or memory.Budget.of(d, memory_limit)
        if filter is not None and filter not in FILTERS:
            raise ValueError(f"filter: expected one of {', '.join(FILTERS)} or None; got {filter!r}")
        if padding not in PADDINGS:
            raise ValueError(f"padding: expected one of {', '.join(PADDINGS)}; got {padding!r}")
        self.filter, self.filtered = filter, filtered
        flats, darks = checks.flat_field_frames(flats, darks, geometry.detector_shape)
        if filter is None and flats is not None:
            raise ValueError("flats: counts are normalised as FDK's first step; give a filter "
                             "(pybp.fdk), or line integrals to the plain back-projection")
        if filtered and flats is not None:
            raise ValueError("filtered: the rows given are ready for the back-projection "
                             "(FDK's filtered line integrals, with a filter); give no flats")
        self.counts = flats is not None
        self.raw_counts = self.counts  # integer counts go up as they are (Preweight)
        real = np.float64 if p.positions == "double" else np.float32
        self.matrices = np.ascontiguousarray(geometry.voxel_matrices(), real).reshape(
            geometry.n_angles, kernels.MATRIX_VALUES)
        matrix_bytes = p.projections_per_pass * self.matrices.itemsize * kernels.MATRIX_VALUES
        if matrix_bytes > d.constant_memory:
            raise ValueError(f"params: the matrices of {p.projections_per_pass} projections per "
                             f"pass take {matrix_bytes} bytes, over {d.name}'s "
                             f"{d.constant_memory} of constant memory: use fewer "
                             "projections_per_pass")
        n_cols = geometry.detector_shape[1]
        self.planes = plane_range(planes, geometry.volume_shape[0])
        self.plan = plan or self._plan(devices, matrix_bytes)
        stride = self.plan.row_stride
        self.image_bytes = stride * n_cols * 4  # one projection's window of rows
        pass_bytes = self.plan.pass_bytes(n_cols, p.projections_per_pass)
        if pass_bytes > d.max_allocation:
            raise ValueError(f"params: {p.projections_per_pass} projections per pass take "
                             f"{pass_bytes / 2**30:.2f} GiB, over {d.name}'s largest buffer: "
                             "use fewer projections_per_pass")
        if p.family == "texture" and (n_cols > d.image2d_max_width or
                                      stride > d.image2d_max_height):
            raise ValueError(f"params: {stride} x {n_cols} images exceed {d.name}'s largest "
                             f"image ({d.image2d_max_height} x {d.image2d_max_width}); use "
                             "family='exact'")
        self.slab = self.plan.slabs[0]  # the slab the stages add into (start)
        stages = []
        if not filtered:
            stages.append(Preweight(self, short_scan, flats, darks))
            if filter is not None:  # at unit weight: the column weights carry the scale
                stages.append(Filter(self.context, d, filter, n_cols, np.ones(stride), padding,
                                     buffer=IMAGES, rows=self.chunk_rows))
        stages.append(SlabBackproject(self))
        self.stages = tuple(stages)
        self.executor = Executor(d, self.context, queue)
        self._layout = Layout(IMAGES, np.dtype(np.float32), (stride, n_cols), 0, None, ())
        self.n_angles, self.n_bins = geometry.n_angles, n_cols
        self._memory = MemoryPlan.create(
            self.stages, d, geometry.n_angles, widths=(p.projections_per_pass,),
            chunk_slices=p.projections_per_pass, slots=PASS_SLOTS,
            own=(IMAGES, COUNTS) if self.raw_counts else (IMAGES,),
            preferred=p.projections_per_pass, budget=self.budget,
            subject=f"params: a pass of {p.projections_per_pass} projections",
            advice="use fewer projections_per_pass, or allow more memory (memory_limit)")

    def _plan(self, devices, matrix_bytes) -> slabs.SlabPlan:
        """The slabs: each with the passes in flight (two) and the texture's images (the
        filter's FFTs work in place) within the budget, beside what the passes keep
        (FDK's weights, the flats' and darks' means, every projection's matrix and a
        pass's, each pass's counter);
        with several devices, of at most each one's share of the planes."""
        g, d, p = self.geometry, self.device, self.params
        n_rows, n_cols = g.detector_shape
        real_bytes = 8 if "cl_khr_fp64" in d.extensions else 4
        kept = (self.filter is not None and not self.filtered) * 4 * g.n_angles * (
            weights.POSE_VALUES + n_cols) + self.counts * 2 * n_rows * n_cols * real_bytes \
            + self.matrices.nbytes + matrix_bytes + 2 * 4
        share = None if devices == 1 else \
            -(-len(self.planes) // devices // slabs.PLANE_ALIGN) * slabs.PLANE_ALIGN
        # Each pass in flight holds its images, and its counts where they go up as
        # integers; the texture family one pass of images more.
        buffers = PASS_SLOTS * (1 + self.raw_counts * COUNTS_BYTES / 4) + (p.family == "texture")
        return slabs.plan(g, p.projections_per_pass, p.voxels_per_item,
                          self.budget.allowed - kept, d.max_allocation,
                          buffers, self.planes, share)

    @staticmethod
    def _checked_params(params, d) -> ConeParams:
        if params is not None and not isinstance(params, ConeParams):
            raise TypeError(f"params: expected a pybp.cone.params.ConeParams, got "
                            f"{type(params).__name__}")
        p = params or default_params(d)
        if p.positions == "double" and "cl_khr_fp64" not in d.extensions:
            raise ValueError(f"params: positions='double' needs doubles, which "
                             f"{d.name} does not have; use positions='float'")
        if p.family == "texture" and not d.image_support:
            raise ValueError(f"params: the texture family needs images, which {d.name} does "
                             "not have; use family='exact'")
        return p

    # ---- the stream's recipe (pybp/stream/recipe.py): a chunk is a pass ---------------
    progress_labels = dict(what="projections", rate="GUPS")

    def layout(self, dtype=None) -> Layout:
        """A pass's images of float32, or of the counts' integer type where counts of
        :data:`RAW_COUNTS`' types go up as they are (into a buffer of their own)."""
        raw = self.stages[0].counts_dtype(dtype) if self.raw_counts else None
        return self._layout if raw is None else Layout(COUNTS, raw, self._layout.input_row,
                                                       0, None, ())

    def memory(self, n_slices=None, stages=None, chunk_slices=None, layout=None,
               preferred=None) -> MemoryPlan:
        """The passes' plan, made with the slabs' (two passes in flight, each of a
        pass's projections): the same for any run."""
        return self._memory

    def updates_per_slice(self) -> int:
        """Voxel updates of one projection into the current slab."""
        _, ny, nx = self.geometry.volume_shape
        return self.slab.n_planes * ny * nx

    def stages_for(self, dtype=None, log=True) -> tuple:
        """The passes normalise counts themselves (:class:`Preweight`)."""
        return self.stages

    def prepare(self, n_slices=None, dtype=None, log=True, chunk_slices=None, writes=1,
                preferred=None) -> Executor:
        """The executor, its stages and slots reserved (kept from the last call) for
        projections of ``dtype`` (:meth:`layout`)."""
        self.executor.reserve(self.stages, self.layout(dtype), self._memory, writes)
        return self.executor

    def global_size(self, n_planes) -> tuple:
        _, ny, nx = self.geometry.volume_shape
        (gx, gy), vpi = self.params.group, self.params.voxels_per_item
        return (_round_up(nx, gx), _round_up(ny, gy), -(-n_planes // vpi))

    def counted_rows(self, index) -> tuple:
        """``(first, stop)``: the detector rows of pass ``index``'s window in the current
        slab whose replaced values are counted: those no earlier slab's window of the
        pass holds, so that each pixel is counted once however the volume is cut (exact
        where windows move one way along the slabs, as they do: the rows a slab projects
        onto follow its planes)."""
        first, n = self.slab.windows[index]
        a, b = first, first + n
        for slab in self.plan.slabs:
            if slab.first_plane >= self.slab.first_plane:
                continue
            c, d = slab.windows[index][0], sum(slab.windows[index])
            if c <= a < d:
                a = min(d, b)
            if c < b <= d:
                b = max(c, a)
        return a, b

    def chunk_rows(self, chunk) -> int:
        """Rows of ``chunk``'s images: its pass's window, made even (the FFT's pairs)."""
        return chunk.count * slabs.even(self.pass_of(chunk)[2][1])

    def pass_of(self, chunk) -> tuple:
        """``(first, count, window)`` of ``chunk``, one pass (projections from its
        ``first_row``), in the current slab."""
        index = chunk.first_row // self.params.projections_per_pass
        first, count = self.plan.passes[index]
        return first, count, self.slab.windows[index]

    def read(self, source, slab, first_row=0):
        """``read(span)`` of the stream for ``slab``: the window of each pass of the
        span's projections from ``source`` (projections, or filtered rows whose row 0 is
        the detector's ``first_row``), as :class:`Window`."""
        ppp = self.params.projections_per_pass

        def read(span):
            window = slab.windows[span.start // ppp]
            rows = slice(window[0] - first_row, window[0] - first_row + window[1])
            return Window(source, span.start, span.count, rows), None
        return read

    def kernel_events(self, images) -> list:
        """For timing: the back-projection kernel alone over the first slab, every pass
        with its own matrices and the same ``images`` (a pass of them, row_stride x
        n_cols each; their values do not change the time). The kernels' events (their
        device time, on a profiling queue)."""
        q, stage, slab = self.executor.queue, self.stages[-1], self.plan.slabs[0]
        _, ny, nx = self.geometry.volume_shape
        rw, flags = cl.mem_flags.READ_WRITE, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        rows = cl.Buffer(self.context, flags, hostbuf=np.ascontiguousarray(images, np.float32))
        volume = cl.Buffer(self.context, rw, slab.n_planes * ny * nx * 4)
        source, count = rows, min(self.params.projections_per_pass, self.geometry.n_angles)
        if stage.images is not None:
            cl.enqueue_copy(q, stage.images, rows, offset=0, origin=(0, 0, 0),
                            region=(self.geometry.detector_shape[1], self.plan.row_stride, count))
            source = stage.images
        matrices = cl.Buffer(self.context, cl.mem_flags.READ_ONLY,
                             count * kernels.MATRIX_VALUES * self.matrices.itemsize)
        self.slab, events = slab, []
        for (first, count), window in zip(self.plan.passes, slab.windows):
            cl.enqueue_copy(q, matrices, self.matrices[first:first + count])
            chunk = Chunk({SLAB: volume}, count, q, self.executor.pacer, None, first_row=first)
            events += [event for _, event in stage.launch(chunk, source, matrices, first, count,
                                                          window, self.plan.row_stride)]
        pacing.wait(events[-1])
        self.executor.pacer.clear()
        return events


class Window:
    """A pass's window of rows of ``source`` (projections ``first`` to ``first +
    count``, rows ``rows``: ``n_rows`` of them), shaped as a chunk's images (the rows
    made even: the FFT pairs an odd last row with a zero row after it), which is what
    goes up: the device's images of a pass hold its window's rows and no more. Sliced,
    a window of fewer projections; read (:meth:`read_into`) in blocks of projections on
    the copy threads, in parallel where the source releases the GIL (an h5py dataset, a
    scan's files); :func:`copier` puts the zero row after an odd window."""

    def __init__(self, source, first, count, rows):
        self.source, self.first, self.count, self.rows = source, first, count, rows
        self.n_rows = len(range(*rows.indices(source.shape[1])))
        self.shape = (count, slabs.even(self.n_rows), source.shape[2])

    def __len__(self):
        return self.count

    def __getitem__(self, key):
        a, b, _ = key.indices(self.count)
        return Window(self.source, self.first + a, b - a, self.rows)

    def __array__(self, dtype=None, copy=None):
        rows = self.source[self.first:self.first + self.count, self.rows]
        return np.asarray(rows, dtype)

    def read_into(self, destination):
        """The rows into ``destination`` ``(count, rows made even, n_cols)``, its first
        ``n_rows`` rows of each projection (:func:`pybp.stream.sources.read_into`)."""
        read_into(destination, self.source, slice(self.first, self.first + self.count),
                  self.rows)

    @property
    def upload(self):
        """Where the source is in page-locked memory (:class:`pybp.cone.store.Store`):
        ``upload(queue, buffer)``, the rows into ``buffer`` by one DMA (its event); None
        otherwise (the copy threads then fill the executor's staging)."""
        direct = getattr(self.source, "dma_upload", None)
        if direct is None:
            return None
        return lambda queue, buffer: direct(queue, buffer, self.first, self.count, self.rows)


def copier(pool):
    """``copy(destination, window)`` for the stream: a :class:`Window`'s rows into
    staging (of the counts' integer type, or float32) in blocks of projections over
    ``pool``, read straight into it where the source can, zeros after them."""
    def copy(destination, window):
        n = window.n_rows
        in_blocks(pool, len(window), destination.nbytes,
                  lambda a, b: window[a:b].read_into(destination[a:b]))
        if n < destination.shape[1]:
            destination[:, n:] = 0
    return copy


class SlabRun:
    """One device's part of a run (pybp/stream/slabs.py): for each slab it takes, the
    passes of ``source`` (projections, or with a ``filtered`` recipe the filtered rows
    whose row 0 is the detector's ``first_row``) through ``recipe``'s stages, then the
    slab read back into ``out`` (the planes of the recipe's ``planes``). Into an output
    that is not in host memory (a file), slabs that host memory holds (beside those
    of the other ``members``) are written behind
    (:class:`pybp.stream.sources.WriteBehind`): the next slab's kernels run while the
    disk takes the last one (2048^3 to a ``.npy``: docs/benchmarks.md's history)."""

    def __init__(self, recipe: SlabRecipe, source, out, first_row=0, members=1):
        self.recipe, self.source, self.out, self.first_row = recipe, source, out, first_row
        # Its staging pinned and its held slabs touched (by a thread started here) in the
        # memory of the device's NUMA node, where its stream runs (stream/numa.py).
        with numa.near(recipe.device):
            self._reserve(members)

    def _reserve(self, members):
        recipe, out = self.recipe, self.out
        self.executor = recipe.prepare(dtype=getattr(self.source, "dtype", None))
        self.behind = None
        slabs_each = -(-len(recipe.plan.slabs) // members)
        if not isinstance(out, np.ndarray) and slabs_each > 1:
            # (one slab has nothing to be written behind; with two, the second waits
            # for the first's writes whatever it is held in)
            _, ny, nx = recipe.geometry.volume_shape
            largest = (max(slab.n_planes for slab in recipe.plan.slabs), ny, nx)
            parts = min(slabs_each - 1, WriteBehind.parts(largest, members))
            # (as many writers as did best on the output's disk, where pybp bench --io
            # measured it: pybp/io/output/disks.py)
            writers = getattr(out, "writers", None) or BEHIND_WRITES
            self.behind = WriteBehind(parts, writers, part=largest) if parts else None

    @property
    def direct(self) -> bool:
        """Whether the passes go up by one DMA each (from a store in page-locked memory,
        pybp/cone/store.py) and report nothing: one thread then enqueues them."""
        return getattr(self.source, "dma_upload", None) is not None and \
            not any(stage.reports for stage in self.recipe.stages)

    def begin(self, slab, pool):
        r = self.recipe
        r.slab = slab
        rows = pipeline.Rows(r.geometry.n_angles, align=r.params.projections_per_pass)
        return rows, r.read(self.source, slab, self.first_row), copier(pool)

    def end(self, slab, pool, stop):
        _, ny, nx = self.recipe.geometry.volume_shape
        at, shape = slab.first_plane - self.recipe.planes.start, (slab.n_planes, ny, nx)
        if self.behind is None:
            # (the planes go into ``out`` on the writing threads while the next slab's
            # passes run; :meth:`settle` waits for them)
            self.executor.read_work(SLAB, shape, lambda a, b, planes: put_rows(
                pool, self.out, at + a, planes), stop, behind=True)
            return
        held = self.behind.hold(shape, stop)
        self.executor.read_work(SLAB, shape, lambda a, b, planes: copy_blocks(
            pool, held[a:b], planes), stop)
        self.behind.write(self.out, at, held, stop)

    def settle(self, stop, quiet=False):
        """Wait for the slabs put into the output behind the next one's passes and for
        those written behind (:meth:`WriteBehind.settle`), and free their memory."""
        self.executor.work_written(stop, errors=not quiet)
        if self.behind is not None:
            try:
                self.behind.settle(stop, quiet)
            finally:
                self.behind.close()
                self.behind = None
