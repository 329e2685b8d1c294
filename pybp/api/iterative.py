"""Iterative reconstruction as users call it (``pybp.sirt``, ``pybp.sart``,
``pybp.cgls``, ``pybp.tv``): ASTRA's SIRT, SART and CGLS, and total-variation
regularised least squares, on one device, with the matched pair of
:class:`pybp.Projector`."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pyopencl.array as cla

from pybp import __version__, checks, registry
from pybp.api.projector import fits
from pybp.iterative import methods, options, table
from pybp.iterative.checkpoint import Checkpoint, digest
from pybp.stream.memory import Budget
from pybp.stream.progress import Progress

# TIGRE's and ASTRA's names for the methods' arguments, and pybp's (refused with it)
FOREIGN_NAMES = {"niter": "iterations", "init": "x0", "lmbda": "relaxation",
                 "MinConstraint": "nonnegative=True", "ReconstructionMask": "mask",
                 "angles": "the geometry's (pybp.ParallelGeometry, pybp.ConeGeometry)"}


# Options of pybp.reconstruct that a method's own call, on one device, leaves to it
STREAM_ONLY = ("client", "rows", "flats", "darks", "rings", "phase")


def _foreign(name, method) -> str:
    """What ``method`` takes in place of TIGRE's or ASTRA's ``name``: pybp's name, or
    that it has no such option (and, for TV's step, its own weight)."""
    pybp_name = FOREIGN_NAMES[name]
    option = pybp_name.partition("=")[0]
    if option in options.OPTION_NAMES and option not in table.TABLE[method].options:
        taken = ", ".join(table.TABLE[method].options) or "none"
        instead = "; the TV term's weight is weight" if method == "tv" else ""
        return f"has no {option} (its options: {taken}){instead}"
    return f"takes {pybp_name}"


def _pybp_names(method):
    """``method``, refusing TIGRE's and ASTRA's argument names in one line that gives
    pybp's, and the stream's options in one that says to call it (Python's own error
    names the argument alone)."""
    @functools.wraps(method)
    def checked(*args, **kwargs):
        for name in kwargs:
            if name in FOREIGN_NAMES:
                raise TypeError(f"{name}: TIGRE's or ASTRA's name; pybp.{method.__name__} "
                                f"{_foreign(name, method.__name__)}")
            if name in STREAM_ONLY:
                raise TypeError(
                    f"{name}: pybp.{method.__name__} takes line integrals; "
                    f"pybp.reconstruct(projections, geometry, method="
                    f"'{method.__name__}', iterations=..., {name}=...) takes {name} "
                    "(log=False for line integrals)")
        return method(*args, **kwargs)
    return checked


def _iterations(name, iterations):
    """``iterations`` checked, with a hint where TIGRE's angles stand in its place."""
    if np.ndim(iterations) == 1:
        raise TypeError(f"iterations: got {np.size(iterations)} numbers; the angles? pybp's "
                        f"geometry holds them: pybp.{name}(projections, geometry, "
                        f"iterations), where TIGRE's is {name}(proj, geo, angles, niter)")
    return checks.positive_int(iterations, "iterations")


def _volume_mask(geometry, shape, mask, circle):
    """The float32 mask (1 inside, 0 outside) of ``mask`` (an array of the volume's or
    one slice's shape, nonzero inside) and ``circle``, or None where neither is given."""
    circle = checks.circle_option(circle)
    if mask is None and circle is False:
        return None
    inside = np.ones(shape, np.float32)
    if mask is not None:
        mask = np.asarray(mask)
        checks.array_like(mask.view(np.uint8) if mask.dtype == bool else mask, "mask", (2, 3))
        if tuple(mask.shape) not in (shape, shape[1:]):
            raise ValueError(f"mask: expected the volume's shape {shape} or a slice's "
                             f"{shape[1:]}, got {tuple(mask.shape)}")
        inside *= np.asarray(mask) != 0
    if circle is not False:
        columns = geometry.circle_columns(None if circle is True else circle)
        plane = np.zeros(shape[1:], np.float32)
        for row, (first, stop) in enumerate(columns):
            plane[row, first:stop] = 1
        inside *= plane
    return inside


class _Run:
    """What both methods set up: the checked data on the device, the projector, the
    start, the mask, and the report of each iteration (progress, callback)."""

    def __init__(self, name, *, projections, geometry, iterations, x0, mask, circle, callback,
                 progress, device, devices=None, out=None, memory_limit=None,
                 checkpoint=None, options=None):
        kind = registry.kind_of(geometry)
        self.name, self.iterations = name, _iterations(name, iterations)
        steps_before = table.TABLE[name].steps_before
        if isinstance(projections, cla.Array):  # as the Projector takes them; the method
            projections = projections.get()     # keeps its own copy on its device
        checks.array_like(projections, "projections", (2, 3))
        data, single = kind.method_data(geometry, projections, circle)
        if not np.isfinite(data).all():
            raise ValueError("projections: contain NaN or Inf")
        volumes, sets = table.held(name, kind.dims)

        def check(description, slices):
            fits(description, *kind.shapes(geometry, slices), volumes=volumes,
                 projections=sets, scratch=kind.scratch_bytes(geometry, slices), what=name,
                 budget=Budget.of(description, memory_limit), advice=kind.advice)

        if device is not None and devices is not None:
            raise ValueError("devices: give device or devices, not both")
        self.devices = kind.method_devices(name, geometry, data.shape[1], device, devices,
                                           check)
        shape = self.devices.pair.volume_shape
        self.out_shape = shape[1:] if single else shape
        if out is not None:
            checks.check_output(out, self.out_shape, inputs=dict(projections=projections))
        self.out = out
        self.vectors = self.devices.vectors
        self.data = data  # (n_angles, rows, n_bins); on the device as `b` when asked
        if x0 is None:
            start = np.zeros(shape, np.float32)
        else:
            checks.array_like(x0, "x0", (len(self.out_shape),))
            if tuple(x0.shape) != self.out_shape:
                raise ValueError(f"x0: expected the volume's shape {self.out_shape}, got "
                                 f"{tuple(x0.shape)}")
            start = np.asarray(x0, np.float32).reshape(shape)
            if not np.isfinite(start).all():
                raise ValueError("x0: contains NaN or Inf")
        self.x = self.devices.upload(start)
        inside = _volume_mask(geometry, shape, mask, circle)
        self.mask = None if inside is None else self.devices.upload(inside)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a function (iteration, volume), got "
                            f"{type(callback).__name__}")
        self.callback = callback
        self.checkpoint, self.state, self.keep, done = None, None, None, 0
        if checkpoint is not None:
            key = dict(method=name, options=sorted((options or {}).items()),
                       geometry=digest(*(getattr(geometry, f.name)
                                         for f in dataclasses.fields(geometry))),
                       data=digest(data), x0=digest(start), mask=digest(inside),
                       device=",".join(d.identity for d in self.devices.descriptions),
                       pybp=__version__)
            self.checkpoint = Checkpoint(checkpoint, key)
            self.keep = self.checkpoint.keep
            loaded = self.checkpoint.load(self.iterations)
            if loaded is not None:
                self.state = dict(loaded[1], iteration=loaded[0])
                done = loaded[0] + 1 + steps_before  # TV's norm is in its state
        # TV's power iterations (as long as an iteration each) count as steps of the line:
        # 20 of them took 23 s of a 41 s run without it, and its first estimate was 414 s
        what = "iterations" if not steps_before else \
            f"steps ({steps_before} of ||A||'s estimate, then the iterations)"
        self.progress = Progress(self.iterations + steps_before - done,
                                 2 * self.devices.pair.updates(), progress, what=what)

    def problem(self, geometry) -> methods.Problem:
        """The method's problem: the data go up whole where the method asks for them
        whole, and as the subsets' data where it asks for those (SART)."""
        devices = self.devices
        return methods.Problem(
            devices.pair, self.vectors, geometry.n_angles, lambda: devices.upload(self.data),
            subset=lambda angles, whole: devices.upload(self.data[angles].ravel()),
            variation=lambda: devices.variation(registry.kind_of(geometry).dims),
            norm_report=lambda: self.progress.update(1))

    def report(self, iteration, x):
        self.progress.update(1)
        if self.callback is not None:
            self.callback(iteration, self.devices.fetch(x).reshape(self.out_shape))

    def solve(self, geometry, **options):
        """The method on the problem, with ``options`` (its own: :data:`table.TABLE`),
        its progress line ended however it ends (Ctrl-C's message landed on the line),
        then the volume on the host."""
        try:
            table.TABLE[self.name].solve(
                self.problem(geometry), self.x, iterations=self.iterations, mask=self.mask,
                report=self.report, state=self.state, keep=self.keep,
                allocate=self.devices.allocate, **options)
            volume = self.devices.fetch(self.x).reshape(self.out_shape)
        finally:
            self.progress.close()
            self.devices.close()
        if self.checkpoint is not None:
            self.checkpoint.remove()
        if self.out is None:
            return volume
        self.out[...] = volume
        return self.out


@_pybp_names
def sirt(projections, geometry, iterations, x0=None, nonnegative=False, mask=None,
         circle=False, relaxation=1.0, callback=None, progress=True, device=None, devices=None,
         out=None, memory_limit=None, checkpoint=None):
    """SIRT (ASTRA's ``SIRT_CUDA``/``SIRT3D_CUDA``): ``iterations`` of
    x += relaxation C A^T R (b - A x), R and C the inverse row and column sums of A (zero
    where a sum is zero), on one device.

    ``projections`` (line integrals) ``(n_angles, rows, n_bins)`` or one sinogram
    ``(n_angles, n_bins)`` for a :class:`pybp.ParallelGeometry`, ``(n_angles, n_rows,
    n_cols)`` for a :class:`pybp.ConeGeometry` or a :class:`pybp.ParallelVectorGeometry`.
    Defaults as
    ASTRA's: ``x0`` zero, no mask, no constraint. ``nonnegative`` clips at zero after
    each step; ``mask`` (nonzero inside: the volume's shape or a slice's) and ``circle``
    (True: the reconstruction circle, or a radius in pixels) keep the pixels outside at
    their start (``circle``: parallel beam only). ``devices`` (cone beam and other whole
    volumes: ``"all"`` or a list, as :func:`pybp.reconstruct` takes it): several devices
    share each iteration, each holding the volume and the projections whole, with the
    bits of one (pybp/iterative/team.py). ``callback(iteration, volume)`` after
    each iteration (a copy to the host each time); ``progress`` (default on, as in every
    call of pybp) shows iterations done and the time left on standard error, on calls
    longer than 2 s. ``out``: an array of the volume's shape (float dtype) to hold the
    result, returned; ``memory_limit``: the most bytes of the device's memory the method
    keeps (default: 75% of the device's, as :func:`pybp.reconstruct`); ``checkpoint``: a
    ``.npz`` file to keep the run's state in, every 30 s or so, that a call interrupted
    continues from when given it again (with the same data, geometry, options and
    device: another run's is refused), and ends with the same bits; removed once the
    run is done (pybp/iterative/checkpoint.py). Returns the
    float32 volume ``(rows, ny, nx)`` (``(ny, nx)`` for one sinogram; cone beam: the
    geometry's ``(nz, ny, nx)``). Several devices, or a Dask client, reconstruct slices
    of parallel beam through :func:`pybp.reconstruct` ``(method="sirt")``."""
    relaxation = options.relaxation(relaxation)
    nonnegative = checks.flag(nonnegative, "nonnegative")
    run = _Run("sirt", projections=projections, geometry=geometry, iterations=iterations,
               x0=x0, mask=mask, circle=circle, callback=callback, progress=progress,
               device=device, devices=devices, out=out, memory_limit=memory_limit,
               checkpoint=checkpoint,
               options=dict(relaxation=relaxation, nonnegative=nonnegative))
    return run.solve(geometry, relaxation=relaxation, nonnegative=nonnegative)


@_pybp_names
def sart(projections, geometry, iterations, subsets=None, x0=None, nonnegative=False,
         mask=None, circle=False, relaxation=1.0, callback=None, progress=True, device=None,
         devices=None, out=None, memory_limit=None, checkpoint=None):
    """SART in ordered subsets (ASTRA's ``SART_CUDA`` with ``subsets=None``: one
    projection at a time): each iteration steps through ``subsets`` subsets of the
    angles in turn, subset k holding angles k, k + subsets, ..., and takes SIRT's step on
    each subset's rows alone (its own row and column sums). Where ASTRA takes the
    projections in a random order by default, pybp takes them in that fixed order, so
    that a run is the same every time. Arguments and result as :func:`sirt`'s."""
    relaxation = options.relaxation(relaxation)
    nonnegative = checks.flag(nonnegative, "nonnegative")
    registry.kind_of(geometry)
    order = methods.subset_order(geometry.n_angles, subsets)
    run = _Run("sart", projections=projections, geometry=geometry, iterations=iterations,
               x0=x0, mask=mask, circle=circle, callback=callback, progress=progress,
               device=device, devices=devices, out=out, memory_limit=memory_limit,
               checkpoint=checkpoint,
               options=dict(subsets=len(order), relaxation=relaxation,
                            nonnegative=nonnegative))
    return run.solve(geometry, subsets=len(order), relaxation=relaxation,
                     nonnegative=nonnegative)


@_pybp_names
def cgls(projections, geometry, iterations, x0=None, mask=None, circle=False, callback=None,
         progress=True, device=None, devices=None, out=None, memory_limit=None,
         checkpoint=None):
    """CGLS (ASTRA's ``CGLS_CUDA``/``CGLS3D_CUDA``): conjugate gradients on the normal
    equations, ``iterations`` of them, on one device; with ``mask`` or ``circle``, of
    A restricted to the pixels inside. Arguments and result as :func:`sirt`'s; there is
    no nonnegativity, which the conjugate directions do not allow (ASTRA's CGLS has none
    either: take :func:`sirt`). Stops early at an exact least-squares solution."""
    run = _Run("cgls", projections=projections, geometry=geometry, iterations=iterations,
               x0=x0, mask=mask, circle=circle, callback=callback, progress=progress,
               device=device, devices=devices, out=out, memory_limit=memory_limit,
               checkpoint=checkpoint)
    return run.solve(geometry)


@_pybp_names
def tv(projections, geometry, iterations, weight, x0=None, nonnegative=False, mask=None,
       circle=False, callback=None, progress=True, device=None, devices=None, out=None,
       memory_limit=None, checkpoint=None):
    """Total-variation regularised least squares: ``iterations`` of Chambolle and Pock's
    primal-dual method on 1/2 ||A x - b||^2 + ``weight`` TV(x), on one device. TV is
    isotropic, the sum of each voxel's gradient length (forward differences): within
    each slice for parallel beam (slices stay independent), in 3-D for cone beam.
    The steps come from ||A||, estimated by 20 power iterations
    (:func:`pybp.iterative.methods.tv`). ``nonnegative`` constrains x >= 0; ``mask`` and
    ``circle`` keep the pixels outside at their start (the primal step is taken inside
    alone). Other arguments and result as :func:`sirt`'s."""
    weight = options.weight(weight)
    nonnegative = checks.flag(nonnegative, "nonnegative")
    run = _Run("tv", projections=projections, geometry=geometry, iterations=iterations,
               x0=x0, mask=mask, circle=circle, callback=callback, progress=progress,
               device=device, devices=devices, out=out, memory_limit=memory_limit,
               checkpoint=checkpoint, options=dict(weight=weight, nonnegative=nonnegative))
    return run.solve(geometry, weight=weight, nonnegative=nonnegative)


# The methods' calls by name, one for each of the table's: pybp reconstruct --method
# (cone beam's, and its centre sweep)
BY_NAME = {name: globals()[name] for name in table.ITERATIVE}


def by_method(chosen: dict, projections, geometry, **kwargs):
    """The method ``chosen`` names (``method``, ``iterations`` and its options, as
    :func:`pybp.iterative.options.check_options` gives them) of ``projections``, with
    ``kwargs`` (``device``, ``progress``)."""
    options = dict(chosen)
    name, iterations = options.pop("method"), options.pop("iterations")
    return BY_NAME[name](projections, geometry, iterations, **options, **kwargs)
