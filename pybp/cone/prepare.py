"""One device prepared for a cone-beam geometry: the kernels of a parameter set (and,
for FDK, the pre-weighting and the row filter), the volume's slab buffer, two pass
buffers and their page-locked staging; :meth:`SlabBackprojector.backproject` streams
the passes (docs/design.md, section 8).

A pass: the host copies its projections' window of rows into page-locked staging
(on threads), a second queue uploads it while the compute queue back-projects the
previous pass, and the compute queue then pre-weights and filters it (FDK), copies it
into an image array (texture family) and back-projects it into the slab, each voxel
read and written once per pass. Two of everything, so that copying, uploading and
computing overlap. Each slab is read back when its passes are done.

A volume in several slabs is filtered once: the projections go through the
pre-weighting and the filter whole, a few at a time, into a store of filtered
projections (on the device where it fits the memory limit beside a slab, else in
page-locked host memory), and each slab's passes then take their windows of rows from
the store (a copy of a box of rows, no host copies and no filtering again). Filtered
whole or in windows, a row's values are the same, so slabs equal one piece bit for bit.
Where the store fits neither, each slab's windows are read and filtered again.
"""

from __future__ import annotations

import operator

import numpy as np
import pyopencl as cl

from pybp import checks
from pybp.cl import codegen, pacing
from pybp.cl.device import describe, open_device
from pybp.cl.staging import Staging
from pybp.cone import kernels, slabs
from pybp.geometry import cone_weights as weights
from pybp.cone.params import ConeParams
from pybp.cone.profiler import default_params
from pybp.geometry.cone import ConeGeometry
from pybp.stages.filters import FILTERS, PADDINGS, device_filter
from pybp.stages.normalize import FLOOR_TRANSMISSION
from pybp.stream import memory
from pybp.stream.sources import copy_blocks, frame_mean, put_rows

PREWEIGHT_GROUP = (64, 4, 1)


def _round_up(n, step):
    return -(-n // step) * step


def plane_range(planes, nz) -> range:
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


def _mean(frames, name, detector_shape) -> np.ndarray:
    """The mean of ``frames`` ``(n, n_rows, n_cols)`` (or one frame) in float64,
    checked against the detector as parallel beam's are."""
    return frame_mean(checks.frames(frames, name, tuple(detector_shape)))


class _Window:
    """A pass's window of rows of a source that is not an array (an h5py dataset, a
    scan's files), read in blocks of projections on the copy threads (in parallel where
    the source releases the GIL)."""

    def __init__(self, source, first, count, rows):
        self.source, self.first, self.count, self.rows = source, first, count, rows

    def __len__(self):
        return self.count

    def __getitem__(self, key):
        a, b, _ = key.indices(self.count)
        return self.source[self.first + a:self.first + b, self.rows]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[0:self.count], dtype)


class SlabBackprojector:
    """``geometry`` on one device (``device``, ``context`` or ``queue``) with ``params``
    (None: :func:`pybp.cone.profiler.default_params`). ``filter`` (a name of
    :data:`pybp.stages.filters.FILTERS`): FDK with that filter, ``padding`` and
    ``short_scan`` (:func:`pybp.geometry.cone_weights.column_weights`); None: the plain
    back-projection. ``memory_limit``: bytes of device memory for the volume, the pass
    buffers and a store (None: :data:`pybp.stream.memory.MEMORY_SHARE` of the
    device's, the rule of both geometries); larger volumes go in slabs. ``planes``:
    the z planes ``(first, stop)`` to reconstruct (None: all); starting on a multiple
    of 16, they equal those of the whole volume bit for bit. ``flats`` and ``darks``
    (frames ``(n, n_rows, n_cols)`` or their means; darks None: zero), with FDK: the
    projections are counts, made ``-log((p - dark) / (flat - dark))`` on the device;
    values that are not positive become ``FLOOR_TRANSMISSION`` and are counted
    (:attr:`replaced`, after each call), as are NaN and Inf in line integrals."""

    def __init__(self, geometry: ConeGeometry, params: ConeParams | None = None, device=None,
                 context=None, queue=None, filter=None, padding="zero", short_scan=None,
                 memory_limit=None, planes=None, flats=None, darks=None, filtered=False):
        self.geometry = geometry
        self.cl_device, self.context, queue = open_device(device, context, queue)
        self.device = d = describe(self.cl_device)
        if params is not None and not isinstance(params, ConeParams):
            raise TypeError(f"params: expected a pybp.cone.params.ConeParams, got "
                            f"{type(params).__name__}")
        self.params = p = params or default_params(d)
        if p.positions == "double" and "cl_khr_fp64" not in d.extensions:
            raise ValueError(f"params: positions='double' needs doubles, which "
                             f"{d.name} does not have; use positions='float'")
        if p.family == "texture" and not d.image_support:
            raise ValueError(f"params: the texture family needs images, which {d.name} does "
                             "not have; use family='exact'")
        if filter is not None and filter not in FILTERS:
            raise ValueError(f"filter: expected one of {', '.join(FILTERS)} or None; got {filter!r}")
        if padding not in PADDINGS:
            raise ValueError(f"padding: expected one of {', '.join(PADDINGS)}; got {padding!r}")
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        self.queue = queue or cl.CommandQueue(self.context, properties=profiling)
        self.transfer = cl.CommandQueue(self.context, self.cl_device)
        timed = bool(self.queue.properties & profiling)
        self.pacer = pacing.Pacer(d.type, d.timers and timed)
        self.filter = filter
        self.kernel = codegen.declared(
            self.context, d, kernels.backproject_source(p, filter is not None,
                                                        geometry.column_shared()),
            "cone_backproject", kernels.backproject_args(p))
        real = np.float64 if p.positions == "double" else np.float32
        self.matrices = np.ascontiguousarray(geometry.voxel_matrices(), real).reshape(
            geometry.n_angles, kernels.MATRIX_VALUES)
        n_rows, n_cols = geometry.detector_shape
        per_pass = p.projections_per_pass
        matrix_bytes = per_pass * self.matrices.itemsize * kernels.MATRIX_VALUES
        if matrix_bytes > d.constant_memory:
            raise ValueError(f"params: the matrices of {per_pass} projections per pass take "
                             f"{matrix_bytes} bytes, over {d.name}'s {d.constant_memory} of "
                             "constant memory: use fewer projections_per_pass")
        self._filter = self._weights = None
        self.replaced = 0
        flats, darks = checks.flat_field_frames(flats, darks, geometry.detector_shape)
        if filter is None and flats is not None:
            raise ValueError("flats: counts are normalised as FDK's first step; give a filter "
                             "(pybp.fdk), or line integrals to the plain back-projection")
        self.counts = flats is not None
        self._replaced = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 4)
        self.filtered = filtered
        if filtered:  # the caller fills the store (pybp/cone/run.py): passes only
            if filter is None or flats is not None:
                raise ValueError("filtered: the store holds FDK's filtered line integrals; "
                                 "give a filter and no flats")
        elif filter is not None:
            self._prepare_fdk(padding, short_scan, flats, darks)
        else:  # the line integrals' check alone
            self._preweight = codegen.declared(
                self.context, d, kernels.preweight_source(False, "float", FLOOR_TRANSMISSION,
                                                          weighted=False),
                "cone_preweight", kernels.preweight_args(False, weighted=False))
        per_pass_buffers = 2 * (1 + (p.family == "texture")) + \
            (self._filter is not None and not self._filter.in_place)
        self.planes = plane_range(planes, geometry.volume_shape[0])
        self.plan, self.store = self._plan(memory_limit, per_pass_buffers)
        stride = self.plan.row_stride
        pass_bytes = self.plan.pass_bytes(n_cols, per_pass)
        if pass_bytes > d.max_allocation:
            raise ValueError(f"params: {per_pass} projections per pass take "
                             f"{pass_bytes / 2**30:.2f} GiB, over {d.name}'s largest buffer: "
                             "use fewer projections_per_pass")
        if p.family == "texture" and (n_cols > d.image2d_max_width or
                                      stride > d.image2d_max_height):
            raise ValueError(f"params: {stride} x {n_cols} images exceed {d.name}'s largest "
                             f"image ({d.image2d_max_height} x {d.image2d_max_width}); use "
                             "family='exact'")
        _, ny, nx = geometry.volume_shape
        rw = cl.mem_flags.READ_WRITE
        self._volume = cl.Buffer(self.context, rw, self.plan.slab_planes * ny * nx * 4)
        self._staging = Staging(self.transfer)
        self._sets = []
        for _ in range(2):
            images = None
            if p.family == "texture":
                images = cl.create_image(self.context, cl.mem_flags.READ_ONLY,
                                  cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT),
                                  shape=(n_cols, stride, per_pass), is_array=True)
            self._sets.append({
                "staging": self._staging.array(per_pass * stride * n_cols, np.float32)
                           .reshape(per_pass, stride, n_cols),
                "rows": cl.Buffer(self.context, rw, pass_bytes),
                "images": images,
                "matrices": cl.Buffer(self.context, cl.mem_flags.READ_ONLY, matrix_bytes),
                "uploaded": None, "computed": None})
        self._scratch = None
        if self._filter is not None and not self._filter.in_place:
            self._scratch = cl.Buffer(self.context, rw, pass_bytes)
        self._stored = None  # the store (a device buffer, or page-locked host memory)
        self._stop = None  # set: the passes end between launches (from_store)
        # The store's detector rows: from this row, this many (even) per projection.
        self._store_rows = (0, slabs.even(n_rows))
        if self.store == "device":
            self._stored = cl.Buffer(self.context, rw, self._store_bytes())

    def _prepare_fdk(self, padding, short_scan, flats, darks):
        """The pre-weighting kernel (from counts where ``flats`` are given), its
        per-projection frames, column weights and flat and dark means, a counter of
        replaced values, and the row filter (at unit weight: the column weights carry
        the scale)."""
        g, d = self.geometry, self.device
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        columns = weights.column_weights(g, short_scan)
        as_float = lambda values: np.ascontiguousarray(values, np.float32)  # noqa: E731
        self._weights = {
            "frames": cl.Buffer(self.context, flags, hostbuf=as_float(weights.frames(g).packed())),
            "columns": cl.Buffer(self.context, flags, hostbuf=as_float(columns))}
        real = "double" if "cl_khr_fp64" in d.extensions else "float"
        if flats is not None:  # the means in ``real``, as parallel beam's normalisation has them
            flat = _mean(flats, "flats", g.detector_shape)
            dark = _mean(darks, "darks", g.detector_shape)
            as_real = lambda values: np.ascontiguousarray(  # noqa: E731
                values, np.float64 if real == "double" else np.float32)
            self._weights.update(flat=cl.Buffer(self.context, flags, hostbuf=as_real(flat)),
                                 dark=cl.Buffer(self.context, flags, hostbuf=as_real(dark)))
        self._preweight = codegen.declared(
            self.context, d, kernels.preweight_source(flats is not None, real, FLOOR_TRANSMISSION),
            "cone_preweight", kernels.preweight_args(flats is not None, real=real))
        self._filter = device_filter(self.context, d, self.filter, g.detector_shape[1],
                                     np.ones(1), padding)
        self._zeros = cl.Buffer(self.context, flags, hostbuf=np.zeros(
            self.params.projections_per_pass * g.detector_shape[1], np.float32))

    def _plan(self, memory_limit, per_pass_buffers):
        """The slab plan, and where the filtered projections are kept between slabs:
        None (one slab, or no store fits: each slab filters its windows), ``"device"``
        (where the store and slabs fit the budget together: the tallest such slabs) or
        ``"host"`` (page-locked, within :func:`pybp.checks.within_host_share`)."""
        d = self.device
        budget = memory.budget(d, memory_limit)

        def plan(limit):
            return slabs.plan(self.geometry, self.params.projections_per_pass,
                              self.params.voxels_per_item, limit, d.max_allocation,
                              per_pass_buffers, self.planes)

        whole = plan(budget)
        if self.filtered:
            return whole, "host"
        if len(whole.slabs) == 1:
            return whole, None
        store = self._store_bytes()
        if store <= d.max_allocation and store < budget:
            try:
                return plan(budget - store), "device"
            except ValueError:
                pass  # no slab fits beside the store
        if checks.within_host_share(store):
            return whole, "host"
        return whole, None

    def _store_bytes(self) -> int:
        """The filtered projections, whole: ``(n_angles, even rows, n_cols)`` float32."""
        n_rows, n_cols = self.geometry.detector_shape
        return self.geometry.n_angles * slabs.even(n_rows) * n_cols * 4

    def _store_groups(self) -> list:
        """The blocks filtered at once into the store, each what a pass buffer holds:
        ``(first, count, (first_row, n_rows), stride)``, ``count`` projections from
        ``first``, their rows from ``first_row`` in images of ``stride`` rows. Whole
        projections where one fits, else a pass's projections in bands of rows (from
        even rows, in even numbers: the FFT's pairs of rows are those of a whole
        projection)."""
        n_rows = self.geometry.detector_shape[0]
        per, n = slabs.even(n_rows), self.geometry.n_angles
        capacity = self.params.projections_per_pass * self.plan.row_stride  # rows of a buffer
        if capacity >= per:
            most = capacity // per
            return [(a, min(most, n - a), (0, n_rows), per) for a in range(0, n, most)]
        most, band = self.params.projections_per_pass, self.plan.row_stride
        return [(a, min(most, n - a), (r, min(band, n_rows - r)), band)
                for a in range(0, n, most) for r in range(0, n_rows, band)]

    def global_size(self, n_planes) -> tuple:
        _, ny, nx = self.geometry.volume_shape
        (gx, gy), vpi = self.params.group, self.params.voxels_per_item
        return (_round_up(nx, gx), _round_up(ny, gy), -(-n_planes // vpi))

    def _stage(self, s, projections, first, count, window, pool, stride=None):
        """Host: the pass's window of rows into staging set ``s`` (images of ``stride``
        rows; None: the plan's), zeros after it (the FFT pairs an odd last row with the
        next; textures read the next at the edge)."""
        first_row, n_rows = window
        if s["uploaded"] is not None:
            self._wait(s["uploaded"])
        staging = s["staging"]
        if stride is not None:
            n_cols = self.geometry.detector_shape[1]
            staging = staging.reshape(-1)[:count * stride * n_cols].reshape(count, stride, n_cols)
        rows = slice(first_row, first_row + n_rows)
        source = projections[first:first + count, rows] if isinstance(projections, np.ndarray) \
            else _Window(projections, first, count, rows)
        copy_blocks(pool, staging[:count, :n_rows], source)
        if n_rows < staging.shape[1]:
            staging[:count, n_rows:] = 0

    def _wait(self, event):
        """Until ``event`` completes. On a GPU a pass takes milliseconds, so a blocking
        wait keeps Ctrl-C prompt, and polling's sleeps cost 5% of a 512^3 FDK there
        (0.210 s against 0.200, H100); elsewhere a pass may take seconds: polled."""
        if self.device.type == "gpu":
            event.wait()
        else:
            pacing.wait(event)

    def _pass(self, s, first, count, window, slab, accumulate, stride=None):
        """Device: upload set ``s`` (transfer queue), then pre-weight and filter it (FDK),
        fill its images (texture) and back-project it into the slab (compute queue);
        with no ``slab``, keep the filtered rows (images of ``stride`` rows) in the
        store instead."""
        q = self.queue
        first_row, n_rows = window
        n_cols = self.geometry.detector_shape[1]
        stride = stride or self.plan.row_stride
        waits = [s["computed"]] if s["computed"] is not None else None
        values = count * stride * n_cols
        s["uploaded"] = cl.enqueue_copy(self.transfer, s["rows"], s["staging"].reshape(-1)[:values],
                                        wait_for=waits, is_blocking=False)
        matrices = cl.enqueue_copy(self.transfer, s["matrices"], self.matrices[first:first + count],
                                   wait_for=waits, is_blocking=False)
        self.transfer.flush()
        rows = s["rows"]
        grid = (_round_up(n_cols, PREWEIGHT_GROUP[0]), _round_up(n_rows, PREWEIGHT_GROUP[1]), count)
        sizes = dict(images=rows, n_rows=n_rows, row_stride=stride, n_cols=n_cols,
                     replaced_count=self._replaced)
        if self._filter is not None:
            means = {k: self._weights[k] for k in ("flat", "dark") if k in self._weights}
            event = self._preweight(
                q, grid, PREWEIGHT_GROUP, [s["uploaded"], matrices],
                frames=self._weights["frames"], column_weights=self._weights["columns"],
                first_projection=first, first_row=first_row, **sizes, **means)
            target = rows if self._filter.in_place else self._scratch
            event = self._filter(q, rows, target, count * stride, wait_for=[event])
            rows = target
            if n_rows % 2:
                # The FFT pairs an odd last row with the zero row after it and writes
                # its rounding there: zero again, as the detector is beyond its rows
                # (and as the stream's filter, which writes no partner, leaves it).
                row = n_cols * 4
                event = cl.enqueue_copy(q, rows, self._zeros, src_origin=(0, 0, 0),
                                        dst_origin=(0, n_rows, 0), region=(row, 1, count),
                                        src_pitches=(row, row), dst_pitches=(row, stride * row),
                                        wait_for=[event])
        else:
            event = self._preweight(q, grid, PREWEIGHT_GROUP, [s["uploaded"], matrices], **sizes)
        waits = [event]
        if slab is None:
            s["computed"] = self._keep(rows, first, count, window, stride, waits)
        else:
            s["computed"] = self._backproject(s, rows, first, count, window, slab, accumulate,
                                              waits)
        q.flush()

    def _keep(self, rows, first, count, window, stride, waits):
        """``count`` filtered projections from ``first`` (their rows of ``window``, in
        images of ``stride`` rows) from ``rows`` into the store; its event."""
        # On the compute queue, in order: the next pass's filter may write ``rows`` (a
        # shared scratch), and a download on another queue waiting for this pass's
        # filter would hold up the host thread until then (NVIDIA's OpenCL blocks an
        # enqueue that waits on another queue's event), so that the host could not
        # copy the next projections meanwhile.
        return self._box(self.queue, rows, True, first, count, window[0],
                         slabs.even(window[1]), stride, waits)

    def _from_store(self, s, first, count, window, slab, accumulate):
        """A pass of a slab from the store: its window of rows copied as a box into set
        ``s`` (images of the window's even rows, with the zero row after an odd last
        one), then back-projected as :meth:`_pass` does."""
        stride = slabs.even(window[1])
        waits = [s["computed"]] if s["computed"] is not None else None
        # From host memory by DMA on the transfer queue; within the device on the
        # compute queue.
        queue = self.queue if self.store == "device" else self.transfer
        fill = self._box(queue, s["rows"], False, first, count, window[0], stride, stride, waits)
        matrices = cl.enqueue_copy(self.transfer, s["matrices"], self.matrices[first:first + count],
                                   wait_for=waits, is_blocking=False)
        self.transfer.flush()
        s["uploaded"] = fill
        s["computed"] = self._backproject(s, s["rows"], first, count, window, slab, accumulate,
                                          [fill, matrices], stride)
        self.queue.flush()

    def _box(self, queue, buffer, into_store, first, count, first_row, n_rows, stride, waits):
        """Copy rows ``[first_row, first_row + n_rows)`` of ``count`` projections from
        ``first`` between the store and ``buffer`` (images of ``stride`` rows), either
        way (``into_store``), as one rectangular copy; its event."""
        row = self.geometry.detector_shape[1] * 4
        origin, per = self._store_rows
        store = ((0, first_row - origin, first), (row, per * row))
        other = ((0, 0, 0), (row, stride * row))
        (src, src_pitches), (dst, dst_pitches) = (other, store) if into_store else (store, other)
        target, source = (self._stored, buffer) if into_store else (buffer, self._stored)
        box = dict(region=(row, n_rows, count), wait_for=waits)
        if self.store == "device":
            return cl.enqueue_copy(queue, target, source, src_origin=src, dst_origin=dst,
                                   src_pitches=src_pitches, dst_pitches=dst_pitches, **box)
        # Host memory: its side is the host's, whichever way the copy goes.
        (host, host_pitches), (device, device_pitches) = store, other
        return cl.enqueue_copy(queue, target, source, buffer_origin=device, host_origin=host,
                               buffer_pitches=device_pitches, host_pitches=host_pitches,
                               is_blocking=False, **box)

    def _backproject(self, s, rows, first, count, window, slab, accumulate, waits, stride=None):
        """The back-projection of a pass's ``rows`` (images of ``stride`` rows; None:
        the plan's) (texture: through set ``s``'s images) into the slab; the last event."""
        source = rows
        stride = stride or self.plan.row_stride
        if self.params.family == "texture":
            source, waits = s["images"], [self._fill_images(s, rows, count, waits, stride)]
            if stride < self.plan.row_stride and sum(window) >= self.geometry.detector_shape[0]:
                # Past the detector's last row, voxels sample zeros: the image's rows
                # below the window's (a longer window's, before) are cleared.
                waits = [cl.enqueue_fill_image(
                    self.queue, s["images"], np.zeros(4, np.float32), origin=(0, stride, 0),
                    region=(self.geometry.detector_shape[1], self.plan.row_stride - stride,
                            count), wait_for=waits)]
        return self._launch(source, s["matrices"], count, window, slab, accumulate, waits,
                            stride)[-1]

    def _fill_images(self, s, rows, count, waits, stride=None):
        """Set ``s``'s image array from ``count`` images of ``stride`` rows (None: the
        plan's) of ``rows`` (on the device)."""
        return cl.enqueue_copy(self.queue, s["images"], rows, offset=0, origin=(0, 0, 0),
                               region=(self.geometry.detector_shape[1],
                                       stride or self.plan.row_stride, count), wait_for=waits)

    def _launch(self, source, matrices, count, window, slab, accumulate, waits, stride=None):
        """The back-projection of a pass into the slab, in launches of about
        ``pacing.LAUNCH_SECONDS`` (blocks of columns of voxels, each computed as in one
        launch: Ctrl-C stays prompt on a CPU); their events."""
        _, ny, nx = self.geometry.volume_shape
        gx, gy, columns = self.global_size(slab.n_planes)
        cost = gx * gy * self.params.voxels_per_item * count
        events = []
        for first, n in self.pacer.blocks("backproject", columns, cost):
            self.pacer.admit("backproject", n * cost, self._stop)
            event = self.kernel(
                self.queue, (gx, gy, n), self.params.group + (1,), waits, (0, 0, first),
                projections=source, matrices=matrices, n_projections=count, first_row=window[0],
                n_rows=window[1], row_stride=stride or self.plan.row_stride,
                n_cols=self.geometry.detector_shape[1], nx=nx, ny=ny,
                first_plane=slab.first_plane, n_planes=slab.n_planes,
                accumulate=int(accumulate), volume=self._volume)
            self.queue.flush()
            self.pacer.launched(event, "backproject", n * cost)
            events.append(event)
            waits = None  # in order after the first
        return events

    def kernel_events(self, images) -> list:
        """For timing: the back-projection kernel alone over the first slab, every pass
        with its own matrices and the same ``images`` (a pass of them, row_stride x
        n_cols each; their values do not change the time). The kernels' events (their
        device time, on a profiling queue)."""
        s, slab = self._sets[0], self.plan.slabs[0]
        count = min(self.params.projections_per_pass, self.geometry.n_angles)
        cl.enqueue_copy(self.queue, s["rows"], np.ascontiguousarray(images, np.float32))
        source = s["rows"]
        if self.params.family == "texture":
            self._fill_images(s, s["rows"], count, None)
            source = s["images"]
        events = []
        for n, ((first, count), window) in enumerate(zip(self.plan.passes, slab.windows)):
            cl.enqueue_copy(self.queue, s["matrices"], self.matrices[first:first + count])
            events += self._launch(source, s["matrices"], count, window, slab, n > 0, None)
        pacing.wait(events[-1])
        self.pacer.clear()
        return events

    def backproject(self, projections, out, pool=None, progress=None) -> np.ndarray:
        """The back-projection (FDK where a filter was given) of ``projections``
        (checked, ``(n_angles, n_rows, n_cols)``, any real dtype, an array or a dataset)
        into ``out`` (an array of the planes' shape, a memmap or a dataset), slab by
        slab. ``pool``: threads for the host copies; ``progress``: called with the
        voxel updates of each pass."""
        cl.enqueue_copy(self.queue, self._replaced, np.zeros(1, np.uint32))
        if self.store is not None:
            self._fill_store(projections, pool)
            if not self.counts:
                self._refuse_non_finite()  # every value is counted: before any slab
        slabs_left = iter(self.plan.slabs)
        self._slabs(lambda: next(slabs_left, None), projections, out, pool, progress)
        self.replaced = self._count()
        return out

    def from_store(self, stored, out, take, pool=None, progress=None, first_row=0, stop=None):
        """Back-project slabs from ``stored``, filtered line integrals ``(n_angles,
        even rows, n_cols)`` float32 in host memory of the detector's rows from
        ``first_row`` (a ``filtered`` back-projector: filled by the stream, pybp/cone/run.py),
        each slab that ``take()`` gives (None: no more; with several devices, each takes
        the next) into ``out`` (the planes of this back-projector's ``planes``), as
        :meth:`backproject` does; a set ``stop`` (``threading.Event``) ends it between
        launches with :class:`pybp.cl.pacing.Stopped`."""
        self._stored, self._store_rows = stored, (first_row, stored.shape[1])
        self._stop = stop
        try:
            self._slabs(take, None, out, pool, progress)
        finally:
            self._stop = None
        return out

    def _slabs(self, take, projections, out, pool, progress):
        """Each slab ``take()`` gives, pass by pass (from the store, or from
        ``projections``), read back into ``out``."""
        _, ny, nx = self.geometry.volume_shape
        direct = isinstance(out, np.ndarray) and out.dtype == np.float32 and \
            out.flags.c_contiguous
        pending = None  # the last slab's read-back, waited for once the next is enqueued
        try:
            while (slab := take()) is not None:
                for n, ((first, count), window) in enumerate(zip(self.plan.passes,
                                                                 slab.windows)):
                    s = self._sets[n % 2]
                    if self.store is not None:
                        self._from_store(s, first, count, window, slab, n > 0)
                    else:
                        self._stage(s, projections, first, count, window, pool)
                        self._pass(s, first, count, window, slab, n > 0)
                    if progress is not None:
                        progress(slab.n_planes * ny * nx * count)
                if not self.counts and self.store is None:
                    self._refuse_non_finite()  # before the slab is written
                at = slab.first_plane - self.planes.start
                target = out[at:at + slab.n_planes] if direct else \
                    np.empty((slab.n_planes, ny, nx), np.float32)
                # On the compute queue: the next slab's first pass overwrites the slab
                # buffer only after it is read.
                event = cl.enqueue_copy(self.queue, target, self._volume, is_blocking=False)
                self.queue.flush()
                done, pending = pending, (event, at, None if direct else target)
                if done is not None:
                    self._written(done, out, pool)
        finally:
            # Also on an error or Ctrl-C: the slab already read back goes into ``out``
            # whole, and no read-back into the caller's array outlives this call.
            if pending is not None:
                self._written(pending, out, pool)
        self.pacer.clear()

    def _written(self, pending, out, pool):
        """Wait for a slab's read-back ``(event, at, rows)``; put ``rows`` (read into
        memory of its own, where ``out`` is not a float32 array) into ``out`` at plane
        ``at``."""
        event, at, rows = pending
        self._wait(event)
        if rows is not None:
            put_rows(pool, out, at, rows)

    def _fill_store(self, projections, pool):
        """Every projection pre-weighted and filtered into the store, a pass buffer at a
        time (:meth:`_store_groups`: whole projections, or bands of rows), page-locked
        host memory made on the first call and kept; returns when the store is complete."""
        if self.store == "host" and self._stored is None:
            self._stored = self._staging.array(self._store_bytes() // 4, np.float32)
        for n, (first, count, window, stride) in enumerate(self._store_groups()):
            s = self._sets[n % 2]
            self._stage(s, projections, first, count, window, pool, stride)
            self._pass(s, first, count, window, None, False, stride)
        for s in self._sets:  # the passes that follow take the sets from here
            if s["computed"] is not None:
                self._wait(s["computed"])
            s["uploaded"] = s["computed"] = None

    def _count(self) -> int:
        """Values replaced so far in this call (pybp/cone/kernels.py's pre-weighting)."""
        replaced = np.zeros(1, np.uint32)
        self._wait(cl.enqueue_copy(self.queue, replaced, self._replaced, is_blocking=False))
        return int(replaced[0])

    def _refuse_non_finite(self):
        """Line integrals with NaN or Inf: refused (they would spread over the volume),
        as every entry point of pybp does (docs/design.md, section 1)."""
        count = self._count()
        if count:
            self.pacer.clear()
            raise ValueError(f"projections: {count} values are NaN or Inf; they would spread "
                             "over the volume: replace them first (numpy.nan_to_num), or give "
                             "flats (and darks) if these are detector counts")

    def close(self):
        self.queue.finish()
        self.transfer.finish()
        if self._staging is not None:
            self._staging.release()
        self._staging = self._sets = self._volume = self._scratch = self._weights = None
        self._zeros = None
        self._stored = None
        self._replaced = None
