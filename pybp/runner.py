"""``Backprojector``: device buffers, images, interleaving, launches, splitting large work."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from . import codegen, filters, profiler, tuning
from .device import CHANNEL_ORDERS, CHANNEL_TYPES, describe, select_device, usable_image_formats
from .geometry import Geometry, as_sinogram_stack, check_output
from .params import INTERPOLATIONS, KERNELS, SLICES_PER_PASS, STORAGES


@dataclass(frozen=True)
class Piece:
    """Part of the sinogram one launch reads: what fits the device's images and
    constant memory. Pieces of one pass add up, first one writing."""

    first_angle: int
    n_angles: int
    first_bin: int
    n_bins: int


def split(total, most):
    """``(start, count)`` of the fewest near-equal parts of at most ``most`` each."""
    parts = -(-total // most)
    size = -(-total // parts)
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


class Backprojector:
    """Back-project sinograms of one geometry on one OpenCL device.

    Calling it on a sinogram ``(n_angles, n_bins)`` returns a slice ``(ny, nx)``; on a
    stack ``(n_slices, n_angles, n_bins)`` it returns ``(n_slices, ny, nx)``. Compiled
    kernels, images and buffers are kept between calls.

    ``filter`` makes every call a filtered back-projection (FBP) with that window (see
    :data:`pybp.filters.FILTERS`); ``None`` back-projects the data as given.
    ``overrides`` forces parameter-set fields (tests, benchmarks, tuning);
    ``piece_shape`` caps the ``(angles, bins)`` read by one launch. ``progress`` prints
    the slices done to standard error when a call takes several passes.
    """

    def __init__(self, n_bins, angles, center=None, slice_shape=None, device=None,
                 interpolation="linear", slices_per_pass="auto", precision="float",
                 kernel="auto", filter=None, slice_offset=None, overrides=None,
                 piece_shape=None, progress=False):
        self.geometry = Geometry.create(n_bins, angles, center, slice_shape, slice_offset)
        self.interpolation = _choice("interpolation", interpolation, INTERPOLATIONS)
        self.precision = _choice("precision", precision, STORAGES)
        self.kernel = _choice("kernel", kernel, ("auto",) + KERNELS)
        _choice("slices_per_pass", slices_per_pass, ("auto",) + SLICES_PER_PASS)
        self.filter = None if filter is None else _choice("filter", filter, filters.FILTERS)
        self.overrides = dict(overrides or {})
        self.progress = progress

        self.cl_device = select_device(device)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.device = describe(self.cl_device)
        self.formats = usable_image_formats(self.context)
        self._tuned = tuning.load_profile(self.device)
        if slices_per_pass == "auto":
            slices_per_pass = profiler.auto_slices_per_pass(self.device, self.precision)
        self.slices_per_pass = slices_per_pass
        self._params = {}
        self.params = self._params_for(slices_per_pass)
        self._programs = {}
        self._images = {}
        self._pieces = self._plan_pieces(piece_shape)
        self._constants = self._upload_constants()
        self._allocate()
        self.last_kernel_seconds = 0.0  # back-projection launches of the last call
        self.last_filter_seconds = 0.0  # FBP filtering of the last call

    # ---- set-up ---------------------------------------------------------------------
    def _params_for(self, slices):
        """The parameter set for passes of ``slices`` slices, chosen once."""
        if slices not in self._params:
            tuned = self._tuned.get(tuning.setting_key(slices, self.interpolation, self.precision))
            self._params[slices] = profiler.kernel_params(
                self.device, self.formats, slices, self.interpolation, self.precision,
                self.kernel, tuned=tuned, **self.overrides)
        return self._params[slices]

    def _plan_pieces(self, piece_shape):
        g, p, d = self.geometry, self.params, self.device
        max_angles, max_bins = g.n_angles, g.n_bins
        if p.source == "image":
            max_angles = min(max_angles, d.image2d_max_height // p.texel_rows)
            max_bins = min(max_bins, d.image2d_max_width)
        if p.uses_constant_memory:
            max_angles = min(max_angles, d.constant_memory // 16)  # one float4 per angle
        if piece_shape is not None:
            if len(piece_shape) != 2 or min(piece_shape) < 1:
                raise ValueError(f"piece_shape: expected positive (angles, bins), got {piece_shape!r}")
            max_angles, max_bins = min(max_angles, piece_shape[0]), min(max_bins, piece_shape[1])
        if p.launch_texel_bytes:
            max_angles = min(max_angles, max(1, p.launch_texel_bytes // (max_bins * p.bytes_per_bin)))
        return [Piece(a0, na, b0, nb) for a0, na in split(g.n_angles, max_angles)
                for b0, nb in split(g.n_bins, max_bins)]

    def _upload_constants(self):
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return [cl.Buffer(self.context, flags, hostbuf=self.geometry.projection_constants(
                    piece.first_angle, piece.n_angles, piece.first_bin)) for piece in self._pieces]

    def _allocate(self):
        g, n = self.geometry, self.slices_per_pass
        ny, nx = g.slice_shape
        rw = cl.mem_flags.READ_WRITE
        self._sinograms = cl.Buffer(self.context, rw, n * g.n_angles * g.n_bins * 4)
        self._filtered = None
        if self.filter is not None:
            self._filtered = cl.Buffer(self.context, rw, n * g.n_angles * g.n_bins * 4)
            self._row_filter = filters.DeviceFilter(self.context, self.filter, g)
        largest = max(piece.n_angles * piece.n_bins for piece in self._pieces)
        self._texels = cl.Buffer(self.context, rw, largest * self.params.bytes_per_bin)
        self._slices = cl.Buffer(self.context, rw, n * ny * nx * 4)

    def _kernel(self, source, name):
        key = (source, name)
        if key not in self._programs:
            program = cl.Program(self.context, source).build()
            self._programs[key] = getattr(program, name)
        return self._programs[key]

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
    def _pass_params(self, count):
        """A last pass with fewer slices uses the narrowest setting that holds them."""
        return self._params_for(next(n for n in SLICES_PER_PASS if n >= count))

    def _run_pass(self, stack, result):
        g, count = self.geometry, stack.shape[0]
        ny, nx = g.slice_shape
        params = self._pass_params(count)
        cl.enqueue_copy(self.queue, self._sinograms, stack, is_blocking=False)
        sinograms = self._sinograms
        filtering = None
        if self.filter is not None:
            filtering = self._row_filter(self.queue, self._sinograms, self._filtered, count)
            sinograms = self._filtered
        pack = self._kernel(codegen.render_pack(params), "pack")
        backproject = self._kernel(codegen.render(params), "backproject")
        events = []
        for index, (piece, constants) in enumerate(zip(self._pieces, self._constants)):
            pack(self.queue, (-(-piece.n_bins // 16) * 16, piece.n_angles), (16, 1),
                 sinograms, np.int32(count), np.int32(g.n_angles), np.int32(g.n_bins),
                 np.int32(piece.first_angle), np.int32(piece.first_bin),
                 np.int32(piece.n_angles), np.int32(piece.n_bins), self._texels)
            texels = self._load_image(params, piece) if params.source == "image" else self._texels
            events.append(backproject(
                self.queue, params.global_size(g.slice_shape), params.local_size,
                texels,                       # interleaved sinogram texels: image or buffer
                constants,                    # per angle: cos, sin, base
                np.int32(piece.n_angles),
                np.int32(piece.n_bins),
                np.int32(nx), np.int32(ny),
                np.int32(index > 0),          # later pieces accumulate
                self._slices))
        cl.enqueue_copy(self.queue, result, self._slices, is_blocking=True)
        self.last_kernel_seconds += sum(
            (e.profile.end - e.profile.start) * 1e-9 for e in events)
        if filtering is not None:
            self.last_filter_seconds += (filtering.profile.end - filtering.profile.start) * 1e-9

    # ---- the API ----------------------------------------------------------------------
    def __call__(self, sinograms, out=None):
        stack, single = as_sinogram_stack(sinograms, self.geometry)
        ny, nx = self.geometry.slice_shape
        shape = (ny, nx) if single else (stack.shape[0], ny, nx)
        if out is None:
            out = np.empty(shape, np.float32)
        else:
            check_output(out, shape)
        target = out[None] if single and isinstance(out, np.ndarray) else out
        self.last_kernel_seconds = self.last_filter_seconds = 0.0
        n = self.slices_per_pass
        passes = [(start, min(n, stack.shape[0] - start)) for start in range(0, stack.shape[0], n)]
        result = np.empty((n, ny, nx), np.float32)
        for done, (start, count) in enumerate(passes):
            self._run_pass(stack[start:start + count], result[:count])
            if single and not isinstance(out, np.ndarray):
                target[...] = result[0]
            else:
                target[start:start + count] = result[:count]
            if self.progress and len(passes) > 1:
                print(f"\rpybp: {min(start + count, stack.shape[0])}/{stack.shape[0]} slices",
                      end="" if done + 1 < len(passes) else "\n", file=sys.stderr, flush=True)
        return out


def backproject(sinograms, angles, **options):
    """One-shot back-projection (no filter): see :class:`Backprojector` for options."""
    out = options.pop("out", None)
    n_bins = np.shape(sinograms)[-1] if np.ndim(sinograms) >= 2 else None
    if n_bins is None:
        raise ValueError(f"sinograms: expected (n_angles, n_bins) or (n_slices, n_angles, n_bins), "
                         f"got shape {np.shape(sinograms)}")
    return Backprojector(n_bins, angles, **options)(sinograms, out=out)


def fbp(sinograms, angles, filter="ramp", **options):
    """One-shot filtered back-projection; ``filter`` is one of :data:`pybp.filters.FILTERS`."""
    if filter is None:
        raise ValueError("filter: FBP needs a filter; use pybp.backproject for none")
    return backproject(sinograms, angles, filter=filter, **options)
