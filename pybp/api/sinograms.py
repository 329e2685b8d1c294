"""The sinogram API: :class:`Backprojector` (one geometry, any number of calls) and
:func:`skimage_options`; :func:`pybp.fbp` and :func:`pybp.backproject` are one call of
a Backprojector (pybp/api/oneshot.py)."""

from __future__ import annotations

import threading

import numpy as np

from pybp import checks
from pybp.geometry.angles import in_radians
from pybp.parallel import speed
from pybp.parallel.prepare import Setup, ParallelRecipe
from pybp.stages import halfscale


class Backprojector:
    """Back-project sinograms of one geometry on one OpenCL device.

    Calling it on a sinogram ``(n_angles, n_bins)`` returns a slice ``(ny, nx)``; on a
    stack ``(n_slices, n_angles, n_bins)`` it returns ``(n_slices, ny, nx)``. Compiled
    kernels, images and buffers are kept between calls.

    ParallelGeometry (``pybp.geometry.parallel``): ``angles`` in radians (``angle_unit="deg"``:
    degrees; radians spanning more than one turn are refused unless ``angle_unit="rad"``
    says so: :func:`pybp.geometry.angles.in_radians`); the rotation axis at detector
    column ``center``, counted from the first bin's centre, by default the middle of the
    detector, ``(n_bins - 1) / 2`` (scalar, or one value per angle); slices of
    ``slice_shape`` (default as many voxels as span the detector: ``(n_bins, n_bins)``
    where they are the bins' size) centred on the axis, moved by ``slice_offset``
    ``(rows, columns)`` voxels. ``pixel_size`` (a bin's width) and ``voxel_size`` (a
    slice pixel's side), in any one unit: the FBP of line integrals is attenuation per
    that unit (both 1, the default: per voxel). ``circle=True`` zeroes the pixels
    outside the reconstruction circle (those some projection did not see; a number:
    outside that radius in voxels about the axis), as
    scikit-image's ``iradon`` does. scikit-image's ``radon`` puts the axis at
    ``n_bins // 2`` and the slice centre on that pixel: for an even ``n_bins`` that is
    half a pixel from pybp's default; :func:`pybp.skimage_options` gives the options
    that reconstruct its sinograms on its grid.

    ``filter`` makes every call a filtered back-projection (FBP) with that window (see
    :data:`pybp.FILTERS`), its rows padded with zeros or, with
    ``padding="edge"``, their first and last values (for truncated scans); ``None``
    back-projects the data as given. ``angle_weights`` replaces the FBP's weight of each
    projection (radians it stands for; see :meth:`pybp.geometry.parallel.ParallelGeometry.angle_weights`
    for the default rule). ``overrides`` forces parameter-set fields (tests, benchmarks,
    tuning); ``piece_shape`` caps the ``(angles, bins)`` read by one launch.
    ``progress`` shows the slices done, GU/s and time left on standard error when a
    call runs longer than 2 s. ``device``, ``context`` or ``queue`` (then the compute
    queue) choose the device; ``filter_method`` (default ``"auto"``: the FFT in local
    memory where a padded row fits, else through global memory) forces ``"fft"``,
    ``"global-fft"`` or ``"convolution"``. ``memory_limit``: the most bytes of device
    memory a call keeps (None: 75% of the device's, the rule of both geometries):
    chunks of slices are cut to fit, and a slice that does not fit is refused.

    ``verify`` (default True): the first time a parameter set runs on a device and
    driver, it is checked on a small reference case (:data:`pybp.parallel.verify.FIRST_USE`,
    judged by the one rule; the verdict is kept with the device's records). A set the
    profiler chose that fails gives way, with one warning, to the next kernel family
    that passes; a set the caller forced (``kernel``, ``overrides``) that fails raises
    ``RuntimeError``. ``pybp bench`` and ``pybp tune``, which check every candidate on
    their own case, turn it off.

    The parameter set and pieces of every pass width are chosen and checked here
    (``self.plan``, prepared by :class:`pybp.parallel.prepare.ParallelRecipe`); a call checks
    its data before it writes anything to ``out``, then streams the stack through
    ``self.executor`` in chunks. ``close()``, or leaving a
    ``with`` block, releases device memory. Calls from several threads take turns (a
    lock); for work on several devices at once, use one ``Backprojector`` per device.
    """

    def __init__(self, n_bins, angles, center=None, slice_shape=None, device=None,
                 interpolation="linear", slices_per_pass="auto", precision="float",
                 kernel="auto", filter=None, slice_offset=None, overrides=None,
                 piece_shape=None, progress=False, padding="zero", angle_weights=None,
                 context=None, queue=None, filter_method="auto", circle=False, verify=True,
                 angle_unit=None, memory_limit=None, pixel_size=1.0, voxel_size=1.0):
        angles = in_radians(angles, angle_unit)
        if device is None and context is None and queue is None:
            speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
        setup = Setup(n_bins, angles, center=center, slice_shape=slice_shape,
                      slice_offset=slice_offset, angle_weights=angle_weights,
                      interpolation=interpolation, slices_per_pass=slices_per_pass,
                      precision=precision, kernel=kernel, filter=filter, padding=padding,
                      filter_method=filter_method, circle=circle, overrides=overrides,
                      piece_shape=piece_shape, verify=verify, memory_limit=memory_limit,
                      pixel_size=pixel_size, voxel_size=voxel_size)
        progress = checks.flag(progress, "progress")
        self._closed = True  # until made
        self._lock = threading.Lock()  # one call at a time: they share the device buffers
        self.recipe = ParallelRecipe(setup, device=device, context=context, queue=queue)
        self._closed = False
        self.progress = progress
        recipe = self.recipe
        self.geometry, self.plan, self.device = recipe.geometry, recipe.plan, recipe.device
        self.cl_device, self.context, self.formats = (self.recipe.cl_device, self.recipe.context,
                                                      self.recipe.formats)
        self.executor, self.queue = self.recipe.executor, self.recipe.executor.queue
        self.slices_per_pass = self.recipe.slices_per_pass
        self.interpolation, self.precision, self.kernel = interpolation, precision, kernel
        self.filter, self.padding = filter, padding
        self.last_kernel_seconds = 0.0  # back-projection launches of the last call
        self.last_filter_seconds = 0.0  # FBP filtering of the last call

    @property
    def params(self):
        """The parameter set of full passes (``self.plan`` holds every width's)."""
        return self.plan.params

    def __call__(self, sinograms, out=None):
        with self._lock:
            return self._call(sinograms, out)

    def _call(self, sinograms, out):
        if self._closed:
            raise RuntimeError("Backprojector: closed (by close() or its with block); make "
                               "a new one")
        stack, single, peaks = checks.as_sinogram_stack(sinograms, self.geometry)
        halfscale.check_range(peaks * self.recipe.result_bound)
        ny, nx = self.geometry.slice_shape
        n = stack.shape[0]
        shape = (ny, nx) if single else (n, ny, nx)
        self.recipe.memory(n)  # fits, or ValueError before out is touched
        if out is None:
            out = np.empty(shape, np.float32)
        else:
            checks.check_output(out, shape, inputs=dict(sinograms=sinograms))
        self.recipe.sinograms(stack, out, single, self.progress)
        self.last_kernel_seconds = self.executor.stage_seconds["backproject"]
        self.last_filter_seconds = self.executor.stage_seconds["filter"]
        return out

    def close(self):
        """Release device memory now (also on leaving a ``with`` block); calling it
        after is an error."""
        with self._lock:
            self._closed = True
            self.recipe.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def skimage_options(n_bins: int) -> dict:
    """Options that reconstruct a ``skimage.transform.radon`` sinogram of ``n_bins``
    bins on scikit-image's grid: its axis at bin ``n_bins // 2``, its slice centred on
    that pixel (half a pixel from pybp's default for an even ``n_bins``), and zero
    outside the circle ``iradon(circle=True)`` keeps (radius ``n_bins // 2`` about that
    pixel)::

        sinogram = radon(image, theta)                    # (n_bins, n_angles), degrees
        slice_ = pybp.fbp(sinogram.T, np.radians(theta), **pybp.skimage_options(len(sinogram)))

    The slice then equals ``iradon(sinogram, theta, filter_name=...)`` to float32's
    rounding for the ramp, Shepp-Logan and cosine filters, but for the circle's
    outermost ring of pixels where ``n_bins`` is even (it reaches half a pixel beyond the
    detector, where ``iradon``'s padded sinogram, once filtered, is not zero); the
    Hamming and Hann windows differ by up to 6e-4 of the peak, as ``iradon`` samples them
    on its own padded length (docs/guide.md, "Parallel beam")."""
    n_bins = checks.positive_int(n_bins, "n_bins")
    shift = (n_bins - 1) / 2 - n_bins // 2  # -0.5 for an even size, 0 for an odd one
    return dict(center=n_bins // 2, slice_offset=(shift, shift), circle=n_bins // 2)
