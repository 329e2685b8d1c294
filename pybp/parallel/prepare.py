"""One device prepared for a parallel-beam geometry: the :class:`Setup` (every option
of a reconstruction, checked once), and the :class:`ParallelRecipe` made of it (the
stream's recipe, pybp/stream/recipe.py): the geometry, the verified plan, the stages
and an executor. The sinogram API (:class:`pybp.Backprojector`), the volume API
(:func:`pybp.reconstruct`), the pipelines of several devices and the Dask workers all run
one (:class:`RowsTask` is the Dask workers' task); nothing above it builds stages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from dataclasses import dataclass
from functools import partial

import numpy as np

from pybp import checks, phantoms
from pybp.cl import profiles
from pybp.cl.device import describe, open_device
from pybp.cl.images import usable_image_formats
from pybp.geometry.parallel import ParallelGeometry
from pybp.iterative import options
from pybp.iterative.table import OPTION_NAMES, TABLE
from pybp.parallel import iterate, kernels, profiler, project, verify
from pybp.parallel.backproject import Backproject, Circle
from pybp.parallel.params import INTERPOLATIONS, KERNELS, SLICES_PER_PASS, STORAGES
from pybp.parallel.plan import Plan
from pybp.stages import filters, halfscale, rings
from pybp.stages.phase import Paganin
from pybp.stream import pipeline, sources
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import CHUNK_SLICES, Budget, MemoryPlan
from pybp.stream.progress import Progress
from pybp.stream.recipe import Recipe
from pybp.stream.jobs import Job, Pipelines


@dataclass(frozen=True)
class Setup:
    """The options of a parallel-beam reconstruction, checked when made, at the
    boundary: a filtered back-projection (those of :class:`pybp.Backprojector` less the
    device), or ``iterations`` of an iterative ``method`` with its ``method_options``
    (pybp/parallel/iterate.py)."""

    n_bins: int
    angles: object
    center: object = None
    slice_shape: object = None
    slice_offset: object = None
    angle_weights: object = None
    interpolation: str = "linear"
    slices_per_pass: object = "auto"
    precision: str = "float"
    kernel: str = "auto"
    filter: object = None
    padding: str = "zero"
    filter_method: str = "auto"
    circle: object = False
    overrides: object = None
    piece_shape: object = None
    verify: bool = True
    phase: object = None
    rings: object = None
    ring_options: object = None
    memory_limit: object = None
    method: str = "fbp"
    iterations: object = None
    method_options: object = None
    pixel_size: object = 1.0
    voxel_size: object = 1.0

    def __post_init__(self):
        object.__setattr__(self, "memory_limit", checks.memory_limit(self.memory_limit))
        checks.choice("method", self.method, tuple(TABLE))
        if self.method == "fbp":
            given = (["iterations"] if self.iterations is not None else []) + \
                list(self.method_options or ())
            if given:
                raise ValueError(f"{given[0]}: an option of the iterative methods; FBP takes "
                                 "none (method='sirt', 'sart', 'cgls' or 'tv')")
        else:
            if self.filter is not None:
                raise ValueError(f"filter: FBP's; {self.method} takes none")
            object.__setattr__(self, "method_options", options.check_options(
                self.method, self.iterations, self.method_options))
        checks.choice("interpolation", self.interpolation, INTERPOLATIONS)
        checks.choice("precision", self.precision, STORAGES)
        checks.choice("kernel", self.kernel, ("auto",) + KERNELS)
        checks.choice("slices_per_pass", self.slices_per_pass, ("auto",) + SLICES_PER_PASS)
        if self.filter is not None:
            checks.choice("filter", self.filter, filters.FILTERS)
        checks.choice("padding", self.padding, filters.PADDINGS)
        object.__setattr__(self, "circle", checks.circle_option(self.circle))
        if self.filter is None and self.padding != "zero":
            raise ValueError("padding: pads the rows of the FBP filter; give a filter too")
        object.__setattr__(self, "phase", Paganin.create(self.phase))
        object.__setattr__(self, "ring_options", rings.options(
            self.rings, self.ring_options, int(np.size(self.angles)), self.n_bins))

    @classmethod
    def of(cls, n_bins, angles, center=None, **options) -> "Setup":
        """A Setup of the keywords as :func:`pybp.reconstruct` and the command take them:
        an iterative method's own options (``nonnegative``, ``relaxation``, ...) beside
        the others, gathered into ``method_options`` here, for every caller."""
        method_options = {name: options.pop(name) for name in OPTION_NAMES if name in options}
        return cls(n_bins, angles, center, method_options=method_options or None, **options)

    def geometry(self) -> ParallelGeometry:
        """The scan geometry (checked), without a device."""
        return ParallelGeometry.create(self.n_bins, self.angles, self.center, self.slice_shape,
                               self.slice_offset, self.angle_weights, self.pixel_size,
                               self.voxel_size)

    def key(self) -> str:
        """What tells two setups apart (Dask workers keep a ParallelRecipe per key)."""
        return repr([(f.name, np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v)
                     for f in dataclasses.fields(self) for v in [getattr(self, f.name)]])


class ParallelRecipe(Recipe):
    """``setup`` on one device (``device``, ``context`` or ``queue``): the plan of every
    pass width (checked, and verified on its first use on the device: see
    :class:`pybp.Backprojector`), the filter, half-scaling, back-projection and circle
    stages, and an executor: the parallel-beam :class:`pybp.stream.recipe.Recipe`.
    :meth:`prepare` readies it for a run; :meth:`sinograms` back-projects a stack of
    sinograms."""

    def __init__(self, setup: Setup, device=None, context=None, queue=None, geometry=None):
        self.setup = setup
        self.geometry = geometry or setup.geometry()
        checks.check_host_memory(self.geometry, setup.slice_shape is not None)  # before the plan's
        if setup.filter is not None and checks.distinct_angles(self.geometry.angles) < 2:
            raise ValueError("angles: a filtered back-projection needs projections at two "
                             "distinct angles at least")
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = describe(self.cl_device)
        self.budget = Budget.of(self.device, setup.memory_limit)
        g = self.geometry
        stages = []
        if setup.rings is not None:
            stages.append(rings.RingRemoval(self.context, self.device, g.n_angles, g.n_bins,
                                            setup.rings, setup.ring_options))
        if setup.method == "fbp":
            stages += self._fbp(setup)
        else:  # in place of the filter and the back-projection (pybp/parallel/iterate.py)
            self.plan, self.slices_per_pass, self.result_bound = None, 1, None
            stages.append(iterate.Iterate(self.context, self.device, g, setup.method,
                                          setup.iterations, setup.method_options))
        if setup.circle:
            radius = None if setup.circle is True else setup.circle
            stages.append(Circle(self.context, self.device, g, radius))
        self.stages = tuple(stages)
        self.memory(1)  # one slice fits, or ValueError
        self.executor = Executor(self.device, self.context, queue)
        self.phase, self.n_angles, self.n_bins = setup.phase, g.n_angles, g.n_bins

    def _fbp(self, setup) -> list:
        """The plan of every pass width, and the filter, half-scaling and back-projection
        stages."""
        self.formats = usable_image_formats(self.context)
        slices_per_pass = setup.slices_per_pass
        if slices_per_pass == "auto":
            slices_per_pass = profiler.auto_slices_per_pass(self.device, setup.interpolation,
                                                            setup.precision)
        self.slices_per_pass = slices_per_pass
        self.plan = Plan.create(self.geometry, self.device, self.formats, slices_per_pass,
                                interpolation=setup.interpolation, storage=setup.precision,
                                kernel=setup.kernel, overrides=setup.overrides,
                                piece_shape=setup.piece_shape)
        if setup.verify:
            self.plan = self._verified(self.plan, setup.kernel != "auto" or bool(setup.overrides))
        g = self.geometry
        weights = g.filter_weights()
        gain = None if setup.filter is None else filters.gain(setup.filter, g.n_bins)
        self.result_bound = halfscale.result_bound(
            g.n_angles, weights, gain, None if gain is None else filters.padded_size(g.n_bins))
        stages = []
        if setup.filter is not None:
            stages.append(filters.Filter(self.context, self.device, setup.filter, g.n_bins,
                                         weights, setup.padding, setup.filter_method))
        half = self.plan.params.storage == "half"
        if half:
            stages.append(halfscale.HalfScale(self.context, self.device, g.n_angles, g.n_bins))
        stages.append(Backproject(self.context, self.device, self.plan))
        if half:
            stages.append(halfscale.Unscale(self.context, self.device, g.slice_shape))
        return stages

    def kernel_keys(self) -> list:
        """What gives each value its last bits here: each pass width's parameter set,
        or the iterative method and the matched pair's slices per work-item (its
        work-group shapes give the same bits: tests/test_iterative.py)."""
        if self.plan is None:
            # distance-driven footprints over so many bins (issue 51): a run the bilinear
            # pair began is not resumed with these
            return [f"{self.setup.method}-pair-rows{project.ROWS_PER_ITEM}"
                    f"-footprints{project.span(self.geometry)}"]
        return [p.params.key() for _, p in sorted(self.plan.passes.items())]

    @property
    def params(self):
        """The parameter set of full passes (``self.plan`` holds every width's)."""
        return self.plan.params

    def updates_per_slice(self) -> int:
        """Pixel updates of one slice: the numerator of GU/s (an iterative method: of
        its two operator applications per iteration)."""
        if self.plan is None:
            return 2 * self.setup.iterations * self.geometry.updates()
        return self.geometry.updates()

    # ---- a run (the rest: pybp.stream.recipe.Recipe) -------------------------------
    def layout(self, dtype=None) -> Layout:
        g = self.geometry
        if dtype is None:
            return Layout("sinograms", np.dtype(np.float32), (g.n_angles, g.n_bins), 0,
                          "slices", g.slice_shape)
        return Layout("raw", np.dtype(dtype), (g.n_angles, g.n_bins), 1, "slices",
                      g.slice_shape)

    def memory(self, n_slices, stages=None, chunk_slices=None, layout=None,
               preferred=CHUNK_SLICES) -> MemoryPlan:
        g = self.geometry
        ny, nx = g.slice_shape
        layout = layout or self.layout()
        return MemoryPlan.create(
            stages or self.stages, self.device, n_slices,
            widths=(1,) if self.plan is None else tuple(self.plan.passes),
            chunk_slices=chunk_slices, own=(layout.input, layout.output), preferred=preferred,
            budget=self.budget,
            subject=f"slice_shape: one {ny}x{nx} slice from {g.n_angles}x{g.n_bins} sinograms",
            advice="reconstruct a smaller slice_shape, or a region of it with slice_offset")

    def sinograms(self, stack, out, single=False, progress=False):
        """Back-project ``stack`` (checked float32 sinograms) into ``out``."""
        n = stack.shape[0]
        executor = self.prepare(n)
        executor.stage_seconds.clear()
        target = out[None] if single and isinstance(out, np.ndarray) else out

        def read(span):
            return stack[span.first:span.first + span.rows], None

        def write(start, count, slices):
            if single and not isinstance(out, np.ndarray):
                target[...] = slices[0]
            else:
                sources.put_rows(writing, target, start, slices)

        with sources.copy_pools() as (reading, writing):
            pipeline.stream(executor, n, read, write,
                            Progress(n, self.updates_per_slice(), progress),
                            copy=lambda staging, rows: sources.copy_blocks(reading, staging, rows))
        return out

    # ---- the first use of a parameter set on a device ----------------------------------
    def _verdict(self, params, records) -> dict:
        """Whether ``params`` gives right results on this device: from ``records`` (the
        device's verdicts), else by running the first-use case (``pybp.parallel.verify``)."""
        source = kernels.backproject_source(params) + kernels.pack_source(params)
        key = f"{params.key()}-{hashlib.sha1(source.encode()).hexdigest()[:12]}"
        known = records.get(key)
        if known is None:
            options = dict(interpolation=params.interpolation, precision=params.storage,
                           kernel=params.kernel, slices_per_pass=params.slices_per_pass,
                           verify=False,
                           overrides={k: v for k, v in params.as_dict().items() if k not in
                                      ("kernel", "slices_per_pass", "interpolation", "storage")})
            verdict, small = check(dict(options, context=self.context), verify.FIRST_USE)
            small.close()
            known = dict(passed=verdict.passed, verdict=str(verdict))
            try:
                profiles.update_record(self.device, "verified", {key: known})
            except OSError:
                pass  # an unwritable cache: check again next time
        return known

    def _verified(self, plan, forced):
        """``plan`` with each pass width's parameter set checked on its first use here;
        a set the profiler chose that fails is replaced by the first kernel family that
        passes (:func:`pybp.parallel.profiler.fallbacks`)."""
        records = profiles.read_record(self.device, "verified")  # one read for all widths
        s = self.setup
        for width, pass_plan in sorted(plan.passes.items()):
            params = pass_plan.params
            known = self._verdict(params, records)
            if known["passed"]:
                continue
            where = self.device.label()
            if forced:
                raise RuntimeError(f"{where}: the {params.key()} kernel gives wrong results on "
                                   f"this device ({known['verdict']}); choose another kernel")
            for kernel in profiler.fallbacks(params.kernel):
                try:
                    other = Plan.create(plan.geometry, self.device, self.formats, width,
                                        interpolation=s.interpolation, storage=s.precision,
                                        kernel=kernel, piece_shape=s.piece_shape)
                except ValueError:
                    continue
                replacement = other.passes[width].params
                if self._verdict(replacement, records)["passed"]:
                    warnings.warn(f"pybp: the {params.key()} kernel gives wrong results on "
                                  f"{where} ({known['verdict']}); using "
                                  f"{replacement.key()} instead", RuntimeWarning, stacklevel=5)
                    plan = plan.replaced(width, other.passes[width])
                    break
            else:
                raise RuntimeError(f"{where}: no kernel family gives right results on this "
                                   f"device (the {params.key()} kernel: {known['verdict']}); "
                                   f"choose another device (see `pybp devices`)")
        return plan


def recipe(options) -> ParallelRecipe:
    """A ParallelRecipe of ``options``: the keywords of :class:`pybp.Backprojector` less
    ``progress``."""
    targets = {k: options.pop(k) for k in ("device", "context", "queue") if k in options}
    return ParallelRecipe(Setup(**options), **targets)


def check(options, case: verify.Case = verify.CHECK):
    """Run a parameter set (:class:`pybp.Backprojector` options) on ``case``
    (pybp.parallel.verify) and judge it by the one rule. Returns ``(verdict, recipe)``.
    Oversampling, an approximation, is judged on the FBP of the Shepp-Logan phantom
    instead of random data (``pybp tune``, ``pybp bench`` and the first use of a
    parameter set)."""
    options = dict(options)
    if options.get("overrides", {}).get("cache") == "oversample":
        geometry = ParallelGeometry.create(255, np.linspace(0, np.pi, 256, endpoint=False))
        small = recipe(dict(options, n_bins=255, angles=geometry.angles, filter="ramp"))
        data = np.repeat(phantoms.shepp_logan_radon(geometry).astype(np.float32)[None],
                         small.slices_per_pass, 0)
        got = small.sinograms(data, np.empty((len(data),) + geometry.slice_shape, np.float32))
        return verify.judge(got, data, geometry, small.params, filter="ramp"), small
    rng = np.random.default_rng(1)
    angles = np.sort(rng.uniform(0, np.pi, case.n_angles))
    small = recipe(dict(options, n_bins=case.n_bins, angles=angles,
                      center=(case.n_bins - 1) / 2 + case.center_shift,
                      slice_shape=case.slice_shape))
    data = rng.standard_normal((small.slices_per_pass, case.n_angles, case.n_bins)).astype(np.float32)
    got = small.sinograms(data, np.empty((len(data),) + small.geometry.slice_shape, np.float32))
    return verify.judge(got, data, small.geometry, small.params), small


def _recipe(setup, geometry, target):
    return ParallelRecipe(setup, geometry=geometry, **target)


def pipelines(setup: Setup, targets, geometry=None) -> Pipelines:
    """The pipelines of ``setup`` on each of ``targets`` (dicts of ``device``,
    ``context`` or ``queue``): a :class:`pybp.parallel.prepare.ParallelRecipe` each.
    FBP's rows are grown to whole passes of slices (a slice's last bits depend on the
    pass it is in); an iterative method's slices are each their own problem, so its
    rows are the caller's (``--rows 10:11`` ran 8 slices' iterations for one)."""
    align = max(SLICES_PER_PASS) if setup.method == "fbp" else 1
    return Pipelines(partial(_recipe, setup, geometry or setup.geometry()), targets,
                     align=align)


# Rows of a Dask task start on multiples of this: of every pass width and the usual chunk.
ROWS_ALIGN = 8


@dataclass(frozen=True)
class RowsTask:
    """Parallel beam's Dask task (pybp/distributed.py's :func:`on_cluster`): detector
    rows ``[a, b)`` of a job from row ``first`` through a worker's pipelines for
    ``setup`` (kept between its tasks), slice ``first + i`` written to ``out[offset +
    i]``, with ``log`` and ``chunk_slices`` as :class:`pybp.stream.jobs.Job` takes
    them."""

    setup: Setup
    first: int
    offset: int = 0
    log: bool | None = None
    chunk_slices: int | None = None
    what = "slices"
    rate = "GU/s"
    align = ROWS_ALIGN

    @property
    def updates(self) -> float:
        """Updates of one slice (for the progress line's rate)."""
        return self.setup.geometry().updates()

    def __call__(self, worker, projections, flats, darks, out, a, b) -> dict:
        kept = worker.kept(self.setup.key(), lambda devices: pipelines(
            self.setup, [dict(device=d) for d in devices]))
        stats = {}
        clipped = kept.run(Job(projections, flats, darks, a, b, out,
                               offset=self.offset + a - self.first, log=self.log,
                               chunk_slices=self.chunk_slices, progress=False, stats=stats))
        return dict(clipped=clipped, wall=stats["wall"],
                    devices=[recipe.device.name for recipe in kept.members])
