"""``Backprojector``: device buffers, images, interleaving, launches, splitting large work."""

from __future__ import annotations

import sys

import numpy as np
import pyopencl as cl

from . import codegen, filters, profiler, scaling
from .device import CHANNEL_ORDERS, CHANNEL_TYPES, describe, select_device, usable_image_formats
from .geometry import Geometry, as_sinogram_stack, check_output
from .params import INTERPOLATIONS, KERNELS, PACK_ITEMS, SLICES_PER_PASS, STORAGES
from .plan import Plan


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _float4(values):
    """Up to 4 per-slice values as a kernel's float4 argument (the rest 1)."""
    padded = np.ones(4, np.float32)
    padded[:len(values)] = values
    return padded.view(cl.cltypes.float4)[0]


class Backprojector:
    """Back-project sinograms of one geometry on one OpenCL device.

    Calling it on a sinogram ``(n_angles, n_bins)`` returns a slice ``(ny, nx)``; on a
    stack ``(n_slices, n_angles, n_bins)`` it returns ``(n_slices, ny, nx)``. Compiled
    kernels, images and buffers are kept between calls.

    ``filter`` makes every call a filtered back-projection (FBP) with that window (see
    :data:`pybp.filters.FILTERS`), its rows padded with zeros or, with
    ``padding="edge"``, their first and last values (for truncated scans); ``None``
    back-projects the data as given. ``angle_weights`` replaces the FBP's weight of each
    projection (radians it stands for; see :meth:`pybp.geometry.Geometry.angle_weights`
    for the default rule). ``overrides`` forces parameter-set fields (tests, benchmarks,
    tuning); ``piece_shape`` caps the ``(angles, bins)`` read by one launch.
    ``progress`` prints the slices done to standard error when a call takes several
    passes.

    The parameter set and pieces of every pass width are chosen and checked here
    (``self.plan``); a call checks its data before it writes anything to ``out``.
    """

    def __init__(self, n_bins, angles, center=None, slice_shape=None, device=None,
                 interpolation="linear", slices_per_pass="auto", precision="float",
                 kernel="auto", filter=None, slice_offset=None, overrides=None,
                 piece_shape=None, progress=False, padding="zero", angle_weights=None):
        self.geometry = Geometry.create(n_bins, angles, center, slice_shape, slice_offset,
                                        angle_weights)
        self.interpolation = _choice("interpolation", interpolation, INTERPOLATIONS)
        self.precision = _choice("precision", precision, STORAGES)
        self.kernel = _choice("kernel", kernel, ("auto",) + KERNELS)
        _choice("slices_per_pass", slices_per_pass, ("auto",) + SLICES_PER_PASS)
        self.filter = None if filter is None else _choice("filter", filter, filters.FILTERS)
        self.padding = _choice("padding", padding, filters.PADDINGS)
        if self.filter is None and padding != "zero":
            raise ValueError("padding: pads the rows of the FBP filter; give a filter too")
        self.progress = progress

        self.cl_device = select_device(device)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.device = describe(self.cl_device)
        self.formats = usable_image_formats(self.context)
        if slices_per_pass == "auto":
            slices_per_pass = profiler.auto_slices_per_pass(self.device, self.precision)
        self.slices_per_pass = slices_per_pass
        self.plan = Plan.create(self.geometry, self.device, self.formats, slices_per_pass,
                                self.interpolation, self.precision, self.kernel, overrides,
                                piece_shape)
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._tables = {width: [cl.Buffer(self.context, flags, hostbuf=table) for table in p.tables]
                        for width, p in self.plan.passes.items()}
        self._weights = self.geometry.angle_weights()
        gain = None if self.filter is None else filters.gain(self.filter, self.geometry.n_bins)
        self._texel_bound, self._result_bound = scaling.bounds_per_peak(
            self.geometry.n_angles, self._weights, gain)
        self._programs = {}
        self._images = {}
        self._allocate()
        self.last_kernel_seconds = 0.0  # back-projection launches of the last call
        self.last_filter_seconds = 0.0  # FBP filtering of the last call

    @property
    def params(self):
        """The parameter set of full passes (``self.plan`` holds every width's)."""
        return self.plan.params

    # ---- set-up ---------------------------------------------------------------------
    def _allocate(self):
        g, n = self.geometry, self.slices_per_pass
        ny, nx = g.slice_shape
        rw = cl.mem_flags.READ_WRITE
        self._sinograms = cl.Buffer(self.context, rw, n * g.n_angles * g.n_bins * 4)
        self._filtered = None
        if self.filter is not None:
            self._filtered = cl.Buffer(self.context, rw, n * g.n_angles * g.n_bins * 4)
            self._row_filter = filters.DeviceFilter(self.context, self.filter, g.n_bins,
                                                    self._weights, self.padding)
        self._texels = cl.Buffer(self.context, rw, self.plan.texel_bytes)
        self._slices = cl.Buffer(self.context, rw, n * ny * nx * 4)

    def _kernel(self, source, name):
        """Kernel ``name`` of ``source``: each program built once, each kernel made once."""
        if (source, name) not in self._programs:
            if source not in self._programs:
                self._programs[source] = cl.Program(self.context, source).build()
            self._programs[source, name] = cl.Kernel(self._programs[source], name)
        return self._programs[source, name]

    def _kernels(self, width):
        """The ``pack``, ``unscale`` and ``backproject`` kernels of a pass width."""
        params = self.plan.passes[width].params
        packing = codegen.render_pack(params)
        return (self._kernel(packing, "pack"), self._kernel(packing, "unscale"),
                self._kernel(codegen.render(params), "backproject"))

    def _load_image(self, params, piece):
        """Copy the packed texels of a piece into its image, made once per shape.

        Images are exactly the piece's size: their clamp-to-zero border is the edge."""
        shape = (piece.n_bins, piece.n_angles * params.texel_rows)
        key = (params.texel_channels, params.storage, shape)
        if key not in self._images:
            fmt = cl.ImageFormat(CHANNEL_ORDERS[params.texel_channels], CHANNEL_TYPES[params.storage])
            self._images[key] = cl.create_image(self.context, cl.mem_flags.READ_ONLY, fmt, shape=shape)
        cl.enqueue_copy(self.queue, self._images[key], self._texels, offset=0, origin=(0, 0),
                        region=shape)
        return self._images[key]

    # ---- one pass: up to slices_per_pass slices ---------------------------------------
    def _run_pass(self, stack, peaks, result):
        g, count = self.geometry, stack.shape[0]
        ny, nx = g.slice_shape
        width = self.plan.width_for(count)
        plan = self.plan.passes[width]
        params = plan.params
        scales = np.ones(count)
        if params.storage == "half":
            scales = scaling.half_scales(peaks * self._texel_bound)
        cl.enqueue_copy(self.queue, self._sinograms, stack, is_blocking=False)
        sinograms = self._sinograms
        filtering = None
        if self.filter is not None:
            filtering = self._row_filter(self.queue, self._sinograms, self._filtered, count)
            sinograms = self._filtered
        pack, unscale, backproject = self._kernels(width)
        events = []
        for index, (piece, table) in enumerate(zip(plan.pieces, self._tables[width])):
            pack(self.queue, (-(-piece.n_bins // PACK_ITEMS) * PACK_ITEMS, piece.n_angles),
                 (PACK_ITEMS, 1),
                 sinograms, np.int32(count), np.int32(g.n_angles), np.int32(g.n_bins),
                 np.int32(piece.first_angle), np.int32(piece.first_bin),
                 np.int32(piece.n_angles), np.int32(piece.n_bins), _float4(scales), self._texels)
            texels = self._load_image(params, piece) if params.source == "image" else self._texels
            events.append(backproject(
                self.queue, params.global_size(g.slice_shape), params.local_size,
                texels,                       # interleaved sinogram texels: image or buffer
                table,                        # per angle: cos, sin, base (+ residuals)
                np.int32(piece.n_angles),
                np.int32(piece.n_bins),
                np.int32(nx), np.int32(ny),
                np.int32(index > 0),          # later pieces accumulate
                self._slices))
        if (scales != 1).any():  # half texels held each slice times its scale
            events.append(unscale(self.queue, (nx * ny, count), None,
                                  self._slices, np.int32(nx * ny), _float4(1.0 / scales)))
        cl.enqueue_copy(self.queue, result, self._slices, is_blocking=True)
        self.last_kernel_seconds += sum(
            (e.profile.end - e.profile.start) * 1e-9 for e in events)
        if filtering is not None:
            self.last_filter_seconds += (filtering.profile.end - filtering.profile.start) * 1e-9

    # ---- the API ----------------------------------------------------------------------
    def __call__(self, sinograms, out=None):
        stack, single, peaks = as_sinogram_stack(sinograms, self.geometry)
        g = self.geometry
        scaling.check_range(peaks * self._result_bound)
        ny, nx = g.slice_shape
        shape = (ny, nx) if single else (stack.shape[0], ny, nx)
        if out is None:
            out = np.empty(shape, np.float32)
        else:
            check_output(out, shape)
        target = out[None] if single and isinstance(out, np.ndarray) else out
        n = self.slices_per_pass
        passes = [(start, min(n, stack.shape[0] - start)) for start in range(0, stack.shape[0], n)]
        for width in {self.plan.width_for(count) for _, count in passes}:
            self._kernels(width)  # a build error comes before anything is written
        self.last_kernel_seconds = self.last_filter_seconds = 0.0
        result = np.empty((n, ny, nx), np.float32)
        for done, (start, count) in enumerate(passes):
            self._run_pass(stack[start:start + count], peaks[start:start + count], result[:count])
            if single and not isinstance(out, np.ndarray):
                target[...] = result[0]
            else:
                target[start:start + count] = result[:count]
            if self.progress and len(passes) > 1:
                print(f"\rpybp: {min(start + count, stack.shape[0])}/{stack.shape[0]} slices",
                      end="" if done + 1 < len(passes) else "\n", file=sys.stderr, flush=True)
        return out


def _n_bins(sinograms):
    if np.ndim(sinograms) < 2:
        raise ValueError(f"sinograms: expected (n_angles, n_bins) or (n_slices, n_angles, n_bins), "
                         f"got shape {np.shape(sinograms)}")
    return np.shape(sinograms)[-1]


def backproject(sinograms, angles, **options):
    """One-shot back-projection (no filter): see :class:`Backprojector` for options."""
    if options.get("filter") is not None:
        raise ValueError("filter: pybp.backproject does not filter; use pybp.fbp")
    out = options.pop("out", None)
    return Backprojector(_n_bins(sinograms), angles, **options)(sinograms, out=out)


def fbp(sinograms, angles, filter="ramp", **options):
    """One-shot filtered back-projection; ``filter`` is one of :data:`pybp.filters.FILTERS`,
    ``padding`` ``"zero"`` (default) or ``"edge"`` (truncated scans)."""
    if filter is None:
        raise ValueError("filter: FBP needs a filter; use pybp.backproject for none")
    out = options.pop("out", None)
    return Backprojector(_n_bins(sinograms), angles, filter=filter, **options)(sinograms, out=out)
