"""``Backprojector``: the one-shot API over a plan (pybp/plan.py) and an executor
(pybp/executor.py), streaming a stack of sinograms from the caller's array to the
caller's output."""

from __future__ import annotations

import hashlib
import os
import threading
import warnings

import numpy as np
import pyopencl as cl

from pybp.cl import codegen, profiles
from pybp.stages import filters, halfscale as scaling
from pybp.stream import pipeline
from pybp.parallel import profiler, reference, verify
from pybp.cl.device import describe, select_device, usable_image_formats
from pybp.stream.executor import Executor
from pybp.geometry.parallel import Geometry, _positive_int, as_sinogram_stack, check_output
from pybp.parallel.params import INTERPOLATIONS, KERNELS, SLICES_PER_PASS, STORAGES
from pybp.parallel.plan import MemoryPlan, Plan


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


_CONTEXTS = {}  # one context per device for the calls that give none: programs are kept
_CONTEXTS_LOCK = threading.Lock()
HOST_MEMORY_SHARE = 0.5  # of this machine's memory, the most one slice may take


def open_device(device=None, context=None, queue=None):
    """``(cl_device, context, queue or None)`` from what the caller gave: a queue, a
    context, or a device choice (see :func:`pybp.device.select_device`; its context is
    made once per process, so that built programs are reused)."""
    if queue is not None:
        return queue.device, queue.context, queue
    if context is not None:
        return context.devices[0], context, None
    cl_device = select_device(device)
    with _CONTEXTS_LOCK:
        key = cl_device.int_ptr
        if key not in _CONTEXTS:
            _CONTEXTS[key] = cl.Context([cl_device])
        return cl_device, _CONTEXTS[key], None


def host_memory() -> int:
    """Bytes of memory of this machine."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: not checked


def _check_host_memory(geometry, named_shape):
    """One slice, one sinogram and the filter's padded rows on the host, within
    :data:`HOST_MEMORY_SHARE` of its memory (before anything of that size is made)."""
    ny, nx = geometry.slice_shape
    padded = 2 ** int(np.ceil(np.log2(2 * geometry.n_bins)))
    need = 4 * (ny * nx + geometry.n_angles * geometry.n_bins) + 16 * padded
    total = host_memory()
    if need > HOST_MEMORY_SHARE * total:
        name = "slice_shape" if named_shape else "n_bins"
        raise ValueError(f"{name}: one {ny}x{nx} slice from {geometry.n_angles}x"
                         f"{geometry.n_bins} sinograms needs {need / 2 ** 30:.1f} GiB of host "
                         f"memory; this machine has {total / 2 ** 30:.1f} GiB: reconstruct a "
                         "smaller slice_shape, or a region of it with slice_offset")


class Backprojector:
    """Back-project sinograms of one geometry on one OpenCL device.

    Calling it on a sinogram ``(n_angles, n_bins)`` returns a slice ``(ny, nx)``; on a
    stack ``(n_slices, n_angles, n_bins)`` it returns ``(n_slices, ny, nx)``. Compiled
    kernels, images and buffers are kept between calls.

    Geometry (``pybp.geometry``): ``angles`` in radians; the rotation axis at detector
    column ``center``, counted from the first bin's centre, by default the middle of the
    detector, ``(n_bins - 1) / 2`` (scalar, or one value per angle); slices of
    ``slice_shape`` (default ``(n_bins, n_bins)``) centred on the axis, moved by
    ``slice_offset`` ``(rows, columns)`` pixels. ``circle=True`` zeroes the pixels
    outside the reconstruction circle (those some projection did not see; a number:
    outside that radius in pixels about the axis), as
    scikit-image's ``iradon`` does. scikit-image's ``radon`` puts the axis at
    ``n_bins // 2`` and the slice centre on that pixel: for an even ``n_bins`` that is
    half a pixel from pybp's default; :func:`pybp.skimage_options` gives the options
    that reconstruct its sinograms on its grid.

    ``filter`` makes every call a filtered back-projection (FBP) with that window (see
    :data:`pybp.filters.FILTERS`), its rows padded with zeros or, with
    ``padding="edge"``, their first and last values (for truncated scans); ``None``
    back-projects the data as given. ``angle_weights`` replaces the FBP's weight of each
    projection (radians it stands for; see :meth:`pybp.geometry.Geometry.angle_weights`
    for the default rule). ``overrides`` forces parameter-set fields (tests, benchmarks,
    tuning); ``piece_shape`` caps the ``(angles, bins)`` read by one launch.
    ``progress`` shows the slices done, GU/s and time left on standard error when a
    call runs longer than 2 s. ``device``, ``context`` or ``queue`` (then the compute
    queue) choose the device; ``filter_method`` forces ``"fft"`` or ``"convolution"``.

    ``verify`` (default True): the first time a parameter set runs on a device and
    driver, it is checked on a small reference case (:data:`pybp.verify.FIRST_USE`,
    judged by the one rule; the verdict is kept with the device's records). A set the
    profiler chose that fails gives way, with one warning, to the next kernel family
    that passes; a set the caller forced (``kernel``, ``overrides``) that fails raises
    ``RuntimeError``. ``pybp bench`` and ``pybp tune``, which check every candidate on
    their own case, turn it off.

    The parameter set and pieces of every pass width are chosen and checked here
    (``self.plan``); a call checks its data before it writes anything to ``out``, then
    streams the stack through ``self.executor`` in chunks. ``close()``, or leaving a
    ``with`` block, releases device memory. One thread at a time: use one
    ``Backprojector`` per thread, or a lock.
    """

    def __init__(self, n_bins, angles, center=None, slice_shape=None, device=None,
                 interpolation="linear", slices_per_pass="auto", precision="float",
                 kernel="auto", filter=None, slice_offset=None, overrides=None,
                 piece_shape=None, progress=False, padding="zero", angle_weights=None,
                 context=None, queue=None, filter_method="auto", circle=False, verify=True):
        self.geometry = Geometry.create(n_bins, angles, center, slice_shape, slice_offset,
                                        angle_weights)
        _check_host_memory(self.geometry, slice_shape is not None)  # before the plan's
        if filter is not None and len(np.unique(self.geometry.angles)) < 2:
            raise ValueError("angles: a filtered back-projection needs projections at two "
                             "distinct angles at least")
        self._closed = False
        self.interpolation = _choice("interpolation", interpolation, INTERPOLATIONS)
        self.precision = _choice("precision", precision, STORAGES)
        self.kernel = _choice("kernel", kernel, ("auto",) + KERNELS)
        _choice("slices_per_pass", slices_per_pass, ("auto",) + SLICES_PER_PASS)
        self.filter = None if filter is None else _choice("filter", filter, filters.FILTERS)
        self.padding = _choice("padding", padding, filters.PADDINGS)
        circle = _circle(circle)
        if self.filter is None and padding != "zero":
            raise ValueError("padding: pads the rows of the FBP filter; give a filter too")
        self.progress = progress

        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = describe(self.cl_device)
        self.formats = usable_image_formats(self.context)
        if slices_per_pass == "auto":
            slices_per_pass = profiler.auto_slices_per_pass(self.device, self.interpolation,
                                                            self.precision)
        self.slices_per_pass = slices_per_pass
        self.plan = Plan.create(self.geometry, self.device, self.formats, slices_per_pass,
                                self.interpolation, self.precision, self.kernel, overrides,
                                piece_shape)
        if verify:
            forced = self.kernel != "auto" or bool(overrides)
            self.plan = self._verified(self.plan, forced, piece_shape)
        MemoryPlan.create(self.plan, self.device, 0, 1)  # one slice fits, or ValueError
        weights = self.geometry.angle_weights()
        gain = None if self.filter is None else filters.gain(self.filter, self.geometry.n_bins)
        self._result_bound = scaling.result_bound(self.geometry.n_angles, weights, gain)
        self.executor = Executor(self.plan, self.device, self.context, queue, self.filter,
                                 self.padding, weights, filter_method=filter_method,
                                 circle=circle)
        self.queue = self.executor.queue
        self.last_kernel_seconds = 0.0  # back-projection launches of the last call
        self.last_filter_seconds = 0.0  # FBP filtering of the last call

    @property
    def params(self):
        """The parameter set of full passes (``self.plan`` holds every width's)."""
        return self.plan.params

    # ---- the first use of a parameter set on a device ----------------------------------
    def _verdict(self, params, records) -> dict:
        """Whether ``params`` gives right results on this device: from ``records`` (the
        device's verdicts), else by running the first-use case (``pybp.verify``) now."""
        source = codegen.render(params) + codegen.render_pack(params)
        key = f"{params.key()}-{hashlib.sha1(source.encode()).hexdigest()[:12]}"
        known = records.get(key)
        if known is None:
            options = dict(context=self.context, interpolation=params.interpolation,
                           precision=params.storage, kernel=params.kernel,
                           slices_per_pass=params.slices_per_pass, verify=False,
                           overrides={k: v for k, v in params.as_dict().items() if k not in
                                      ("kernel", "slices_per_pass", "interpolation", "storage")})
            verdict, small = check(options, verify.FIRST_USE)
            small.close()
            known = dict(passed=verdict.passed, verdict=str(verdict))
            try:
                profiles.update_record(self.device, "verified", {key: known})
            except OSError:
                pass  # an unwritable cache: check again next time
        return known

    def _verified(self, plan, forced, piece_shape):
        """``plan`` with each pass width's parameter set checked on its first use here;
        a set the profiler chose that fails is replaced by the first kernel family that
        passes (:func:`pybp.profiler.fallbacks`)."""
        records = profiles.read_record(self.device, "verified")  # one read for all widths
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
                                        self.interpolation, self.precision, kernel, None,
                                        piece_shape)
                except ValueError:
                    continue
                replacement = other.passes[width].params
                if self._verdict(replacement, records)["passed"]:
                    warnings.warn(f"pybp: the {params.key()} kernel gives wrong results on "
                                  f"{where} ({known['verdict']}); using "
                                  f"{replacement.key()} instead", RuntimeWarning, stacklevel=4)
                    plan = plan.replaced(width, other.passes[width])
                    break
            else:
                raise RuntimeError(f"{where}: no kernel family gives right results on this "
                                   f"device (the {params.key()} kernel: {known['verdict']}); "
                                   f"choose another device (see `pybp devices`)")
        return plan

    def __call__(self, sinograms, out=None):
        if self._closed:
            raise RuntimeError("Backprojector: closed (by close() or its with block); make "
                               "a new one")
        stack, single, peaks = as_sinogram_stack(sinograms, self.geometry)
        g = self.geometry
        scaling.check_range(peaks * self._result_bound)
        ny, nx = g.slice_shape
        n = stack.shape[0]
        shape = (ny, nx) if single else (n, ny, nx)
        memory = MemoryPlan.create(self.plan, self.device, 0, n)
        if out is None:
            out = np.empty(shape, np.float32)
        else:
            check_output(out, shape)
        target = out[None] if single and isinstance(out, np.ndarray) else out
        self.executor.reserve(memory)
        self.executor.stage_seconds.clear()
        def read(start, count, staging):
            pipeline.copy_blocks(reading, staging, stack[start:start + count])

        def write(start, count, slices):
            if single and not isinstance(out, np.ndarray):
                target[...] = slices[0]
            else:
                pipeline.put_rows(writing, target, start, slices)

        with pipeline.copy_pools() as (reading, writing):
            pipeline.stream(self.executor, n, read, write,
                            pipeline.Progress(n, g.updates(), self.progress))
        self.last_kernel_seconds = self.executor.stage_seconds["backproject"]
        self.last_filter_seconds = self.executor.stage_seconds["filter"]
        return out

    def close(self):
        """Release device memory now (also on leaving a ``with`` block); calling it
        after is an error."""
        self._closed = True
        self.executor.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check(options, case: verify.Case = verify.CHECK):
    """Run a parameter set (:class:`Backprojector` options) on ``case`` (pybp.verify) and
    judge it by the one rule. Returns ``(verdict, backprojector)``. Oversampling, an
    approximation, is judged on the FBP of the Shepp-Logan phantom instead of random
    data (``pybp tune``, ``pybp bench`` and the first use of a parameter set)."""
    if options.get("overrides", {}).get("cache") == "oversample":
        geometry = Geometry.create(255, np.linspace(0, np.pi, 256, endpoint=False))
        small = Backprojector(255, geometry.angles, filter="ramp", **options)
        data = np.repeat(reference.shepp_logan_radon(geometry).astype(np.float32)[None],
                         small.slices_per_pass, 0)
        return verify.judge(small(data), data, geometry, small.params, filter="ramp"), small
    rng = np.random.default_rng(1)
    angles = np.sort(rng.uniform(0, np.pi, case.n_angles))
    small = Backprojector(case.n_bins, angles, center=(case.n_bins - 1) / 2 + case.center_shift,
                          slice_shape=case.slice_shape, **options)
    data = rng.standard_normal((small.slices_per_pass, case.n_angles, case.n_bins)).astype(np.float32)
    return verify.judge(small(data), data, small.geometry, small.params), small


def _circle(circle):
    """``circle``: False, True (the reconstruction circle) or a radius in pixels."""
    if isinstance(circle, (bool, np.bool_)):
        return bool(circle)
    try:
        radius = float(circle)
    except (TypeError, ValueError):
        raise TypeError(f"circle: expected True, False or a radius in pixels, got "
                        f"{circle!r}") from None
    if not radius > 0 or not np.isfinite(radius):
        raise ValueError(f"circle: expected a positive radius in pixels, got {circle!r}")
    return radius


def skimage_options(n_bins: int) -> dict:
    """Options that reconstruct a ``skimage.transform.radon`` sinogram of ``n_bins``
    bins on scikit-image's grid: its axis at bin ``n_bins // 2``, its slice centred on
    that pixel (half a pixel from pybp's default for an even ``n_bins``), and zero
    outside the circle ``iradon(circle=True)`` keeps (radius ``n_bins // 2`` about that
    pixel)::

        sinogram = radon(image, theta)                    # (n_bins, n_angles), degrees
        slice_ = pybp.fbp(sinogram.T, np.radians(theta), **pybp.skimage_options(len(sinogram)))
    """
    n_bins = _positive_int(n_bins, "n_bins")
    shift = (n_bins - 1) / 2 - n_bins // 2  # -0.5 for an even size, 0 for an odd one
    return dict(center=n_bins // 2, slice_offset=(shift, shift), circle=n_bins // 2)
