"""SIRT and CGLS on one device, for any matched pair of operators (a geometry's
``forward(volume, projections)`` and ``backward(projections, volume)`` on device
buffers, with ``volume_shape``, ``projection_shape`` and ``updates()``): ASTRA's
algorithms, with its weights and its defaults. Each iteration is two operator
applications and a few vector steps on the device; what comes back to the host is a
dot product's partial sums (CGLS), and the iteration is waited for in short sleeps, so
Ctrl-C acts between iterations.

Each method is solved through one call of the same shape, ``solve_*(problem, x,
**options)`` (:class:`Problem`: what the caller has; pybp/iterative/table.py lists
them), so that no caller knows one method from another. Each method takes ``state``
(a dict of arrays: every value it carries from one iteration to the next, after
iteration ``state["iteration"]``) to continue from, and
``keep(iteration, state)`` after each iteration, ``state()`` making that dict: a run
continued from a state kept ends with the bits of one run (pybp/iterative/checkpoint.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyopencl.array as cla

from pybp import checks
from pybp.cl import pacing


def _filled(vectors, allocate, shape, value):
    made = allocate(shape)
    vectors.fill(made, value)
    return made


def allocator(queue):
    """Float32 device arrays by shape, each a buffer of its own: what the methods use
    unless given ``allocate``."""
    return lambda shape: cla.empty(queue, shape, np.float32)


def sirt_weights(pair, vectors, mask=None, allocate=None):
    """``(row, column)``: the inverse row sums A 1 and column sums A^T 1 (ASTRA's
    SIRT weights; zero where a sum is not positive), the column weights times ``mask``."""
    allocate = allocate or allocator(vectors.queue)
    row = allocate(pair.projection_shape)
    column = allocate(pair.volume_shape)
    pair.forward(_filled(vectors, allocate, pair.volume_shape, 1).data, row.data)
    vectors.invert(row, row)
    pair.backward(_filled(vectors, allocate, pair.projection_shape, 1).data, column.data)
    vectors.invert(column, column)
    if mask is not None:
        vectors.scale(column, mask)
    return row, column


def _start(state, arrays):
    """The first iteration to run: 0, or the one after ``state``'s, its arrays put into
    the device ``arrays`` (a dict by name)."""
    if state is None:
        return 0
    for name, array in arrays.items():
        array.set(np.ascontiguousarray(state[name], np.float32).reshape(array.shape))
    return int(state["iteration"]) + 1


def _kept(keep, iteration, arrays, **values):
    """``keep(iteration, state)``, the state the device ``arrays`` and ``values``."""
    if keep is not None:
        keep(iteration, lambda: {**{name: a.get() for name, a in arrays.items()}, **values})


def sirt(pair, vectors, b, x, *, iterations, relaxation=1.0, nonnegative=False, mask=None,
         report=None, allocate=None, state=None, keep=None):
    """``iterations`` of x = x + relaxation C A^T R (b - A x), in place on ``x`` (R and
    C: :func:`sirt_weights`), then x clipped at zero where ``nonnegative``.
    ``report(iteration, x)`` after each. ``allocate(shape)``: the device arrays of
    every method's working set (default :func:`allocator`)."""
    allocate = allocate or allocator(vectors.queue)
    row, column = sirt_weights(pair, vectors, mask, allocate)
    residual = allocate(pair.projection_shape)
    update = allocate(pair.volume_shape)
    for iteration in range(_start(state, dict(x=x)), iterations):
        pair.forward(x.data, residual.data)
        vectors.residual(b, residual, row)
        pair.backward(residual.data, update.data)
        pacing.wait(vectors.step(x, update, column, relaxation, nonnegative))
        if report is not None:
            report(iteration, x)
        _kept(keep, iteration, dict(x=x))
    return x


def _dots(pair, vectors, v, volume) -> np.ndarray:
    """||v||^2 of each of the pair's independent problems (float64), ``v`` a volume or,
    with ``volume`` False, projections."""
    block = pair.volume_block if volume else pair.projection_block
    return vectors.dots(v, block=block, problems=pair.problems)


def _each(pair, vectors, out, a, x, b, y, volume):
    """out = a x + b y with a coefficient of each problem (:func:`_dots`)."""
    block = pair.volume_block if volume else pair.projection_block
    return vectors.combine_each(out, a, x, b, y, block, pair.problems)


# The exponents of CGLS's scales (:func:`unit_scales`): powers of two a float32 holds
SCALE_EXPONENTS = (-120, 120)


def unit_scales(pair, vectors, b, x) -> np.ndarray:
    """A power of two for each of the pair's problems that brings the largest of its
    ``|b|`` and ``|x|`` to [0.5, 1) (1 where both are zero), float64."""
    peaks = np.maximum(vectors.peaks(b, pair.projection_block, pair.problems),
                       vectors.peaks(x, pair.volume_block, pair.problems))
    exponents = np.frexp(np.where(peaks > 0, peaks, 0.5))[1]
    return np.ldexp(1.0, -np.clip(exponents, *SCALE_EXPONENTS))


def cgls(pair, vectors, b, x, *, iterations, mask=None, report=None, allocate=None,
         state=None, keep=None):
    """``iterations`` of conjugate gradients on the normal equations A^T A x = A^T b
    (ASTRA's CGLS), in place on ``x``; with ``mask``, of A M. Each of the pair's
    independent problems (parallel beam's slices) takes its own steps, so that a slice
    has the same values whatever others share the call; a problem stops where its
    gradient vanishes (x is then a least-squares solution) or A p does.

    Each problem runs on its data and start times a power of two that brings them near
    1 (:func:`unit_scales`), undone for ``report`` and at the end: its squared norms
    then stay within float32's range (data of 1e18 made them overflow, and the volume
    NaN; data of 1e-25 made them 0, and the method stop at once), and a power of two
    scales every step exactly, so that data in range give the bits they gave before."""
    allocate = allocate or allocator(vectors.queue)
    r, q = allocate(pair.projection_shape), allocate(pair.projection_shape)
    p, s = allocate(pair.volume_shape), allocate(pair.volume_shape)
    ones, zeros = np.ones(pair.problems), np.zeros(pair.problems)

    def scaled(by):
        return _each(pair, vectors, x, by, x, zeros, x, True)

    def gradient(into):
        pair.backward(r.data, into.data)
        if mask is not None:
            vectors.scale(into, mask)

    carried = dict(x=x, r=r, p=p)  # x scaled, as the iterations hold it
    if state is None:
        scale = unit_scales(pair, vectors, b, x)
        scaled(scale)
        pair.forward(x.data, r.data)
        _each(pair, vectors, r, scale, b, -ones, r, False)  # r = s b - A (s x)
        gradient(p)
        gamma = _dots(pair, vectors, p, True)
    else:
        scale, gamma = (np.asarray(state[name], np.float64) for name in ("scale", "gamma"))
    for iteration in range(_start(state, carried), iterations):
        if not gamma.any():
            break
        pair.forward(p.data, q.data)
        energy = _dots(pair, vectors, q, False)
        done = (gamma == 0) | (energy == 0)
        if done.all():
            break
        alpha = np.where(done, 0.0, gamma / np.where(done, 1.0, energy))
        _each(pair, vectors, x, ones, x, alpha, p, True)
        _each(pair, vectors, r, ones, r, -alpha, q, False)
        gradient(s)
        following = np.where(done, 0.0, _dots(pair, vectors, s, True))
        beta = np.where(done, 0.0, following / np.where(done, 1.0, gamma))
        pacing.wait(_each(pair, vectors, p, ones, s, beta, p, True))
        gamma = following
        if report is not None:
            scaled(1 / scale)
            report(iteration, x)
            scaled(scale)
        _kept(keep, iteration, carried, gamma=gamma, scale=scale)
    pacing.wait(scaled(1 / scale))
    return x


def sart(parts, vectors, b_parts, x, *, iterations, relaxation=1.0, nonnegative=False,
         mask=None, report=None, allocate=None, state=None, keep=None):
    """``iterations`` of ordered subsets (OS-SART), in place on ``x``: for each subset's
    pair in ``parts`` in turn (a pair restricted to its angles) and its data in
    ``b_parts``, SIRT's step on the subset's rows alone, x = x + relaxation C_s A_s^T
    R_s (b_s - A_s x), then x clipped at zero where ``nonnegative``. R_s are the
    subset's rows of SIRT's inverse row sums, kept; C_s, the inverse column sums of the
    subset, is made again at each step from A_s^T 1 (one more transpose per subset:
    a volume per subset would not fit)."""
    allocate = allocate or allocator(vectors.queue)
    largest = max(int(np.prod(part.projection_shape)) for part in parts)
    ones = _filled(vectors, allocate, largest, 1)
    volume_ones = _filled(vectors, allocate, parts[0].volume_shape, 1)
    rows = []
    for part in parts:
        row = allocate(int(np.prod(part.projection_shape)))
        part.forward(volume_ones.data, row.data)
        vectors.invert(row, row)
        rows.append(row)
    residual_buffer = allocate(largest)
    update = allocate(parts[0].volume_shape)
    column = allocate(parts[0].volume_shape)
    for iteration in range(_start(state, dict(x=x)), iterations):
        for part, b, row in zip(parts, b_parts, rows):
            residual = residual_buffer[:row.size]
            part.forward(x.data, residual.data)
            vectors.residual(b, residual, row)
            part.backward(residual.data, update.data)
            part.backward(ones.data, column.data)
            vectors.invert(column, column)
            if mask is not None:
                vectors.scale(column, mask)
            event = vectors.step(x, update, column, relaxation, nonnegative)
        pacing.wait(event)
        if report is not None:
            report(iteration, x)
        _kept(keep, iteration, dict(x=x))
    return x


POWER_ITERATIONS = 20  # of the operator norm's estimate (TV's step sizes)
STEP_MARGIN = 0.99  # tau sigma ||K||^2 < 1, as the primal-dual iteration needs


def operator_norm(pair, vectors, iterations=POWER_ITERATIONS, allocate=None,
                  report=None) -> float:
    """||A||, by power iteration on A^T A from a volume of ones, on each of the pair's
    independent problems apart (their largest): a problem's arithmetic is its own, so
    the norm of a slice's A has the same bits however many slices share the call.
    ``report()`` after each power iteration (a progress line's step)."""
    allocate = allocate or allocator(vectors.queue)
    shape = pair.volume_shape
    v = _filled(vectors, allocate, shape, 1.0 / np.sqrt(pair.volume_block))
    w = allocate(shape)
    projected = allocate(pair.projection_shape)
    value = np.zeros(pair.problems)
    zeros = np.zeros(pair.problems)
    for _ in range(iterations):
        pair.forward(v.data, projected.data)
        pair.backward(projected.data, w.data)
        value = np.sqrt(_dots(pair, vectors, w, True))  # ||A^T A v||, v of unit length
        if not value.any():
            break
        _each(pair, vectors, v, np.where(value > 0, 1.0 / np.where(value > 0, value, 1.0), 0.0),
              w, zeros, w, True)
        if report is not None:
            report()
    return float(np.sqrt(value.max()))


def tv(pair, variation, vectors, b, x, *, iterations, weight, nonnegative=False, mask=None,
       report=None, allocate=None, norm_report=None, state=None, keep=None):
    """``iterations`` of Chambolle and Pock's primal-dual method on
    1/2 ||A x - b||^2 + weight TV(x) (isotropic: the length of each voxel's gradient),
    x >= 0 where ``nonnegative``, in place on ``x``. K = [A; mu grad] with mu = ||A|| /
    ||grad|| (||grad||^2 <= 4 dims), so that both blocks take steps of one size (with
    mu = 1 the TV term's dual grows too slowly to matter in hundreds of iterations), and
    the TV term weight/mu ||mu grad x||; tau = sigma = 0.99 / (sqrt 2 ||A||), ||K|| being
    at most sqrt 2 ||A||. ``norm_report()`` after each of the norm's power iterations.
    """
    allocate = allocate or allocator(vectors.queue)
    norm = float(state["norm"]) if state is not None else \
        operator_norm(pair, vectors, allocate=allocate, report=norm_report)
    if norm == 0.0:
        raise ValueError("geometry: no voxel of the volume projects onto the detector (A is "
                         "zero), so there is nothing to fit")
    mu = norm / np.sqrt(4.0 * variation.dims)
    step = STEP_MARGIN / (np.sqrt(2.0) * norm)
    xbar = allocate(pair.volume_shape)
    vectors.combine(xbar, 1.0, x, 0.0, x)
    p = _filled(vectors, allocate, pair.projection_shape, 0.0)
    q = _filled(vectors, allocate, (variation.dims,) + pair.volume_shape, 0.0)
    ax = allocate(pair.projection_shape)
    atp = allocate(pair.volume_shape)
    gtq = allocate(pair.volume_shape)
    carried = dict(x=x, xbar=xbar, p=p, q=q)
    for iteration in range(_start(state, carried), iterations):
        pair.forward(xbar.data, ax.data)
        variation.data_dual(p, ax, b, step)
        variation.dual(q, xbar, step * mu, weight / mu)
        pair.backward(p.data, atp.data)
        variation.transpose(q, gtq)
        if mask is not None:  # the primal step inside the mask alone: outside, x keeps its start
            vectors.scale(atp, mask)
            vectors.scale(gtq, mask)
        pacing.wait(variation.primal(x, xbar, atp, gtq, step, step * mu, nonnegative))
        if report is not None:
            report(iteration, x)
        _kept(keep, iteration, carried, norm=norm)
    return x


def subset_order(n_angles, subsets) -> list:
    """SART's subsets of ``n_angles`` angles (None: one angle each), subset k holding
    angles k, k + subsets, ..."""
    subsets = n_angles if subsets is None else checks.positive_int(subsets, "subsets")
    if subsets > n_angles:
        raise ValueError(f"subsets: at most one per angle ({n_angles}), got {subsets}")
    return [np.arange(k, n_angles, subsets) for k in range(subsets)]


@dataclass
class Problem:
    """What a method is solved on, as its caller has it: the matched ``pair`` and its
    ``vectors``; the data of ``n_angles`` angles on the device, made by ``data()``
    where first asked (:attr:`b`); ``subset(angles, whole)``, the data of those
    angles alone on the device (SART's subsets: from the host's data, or copied from
    ``whole()``, the whole data); ``variation()``, the TV term (:class:`pybp.iterative.tv.Variation`);
    ``norm_report()`` after each of TV's power iterations (None: none)."""

    pair: object
    vectors: object
    n_angles: int
    data: Callable
    subset: Callable
    variation: Callable
    norm_report: Callable | None = None

    @functools.cached_property
    def b(self):
        return self.data()

    def subsets(self, order) -> list:
        """The data of each run of angles of ``order`` on the device; the whole data
        are then let go (the subsets hold them: one set, not two)."""
        parts = [self.subset(angles, lambda: self.b) for angles in order]
        self.__dict__.pop("b", None)
        return parts


def solve_sirt(problem: Problem, x, **options):
    return sirt(problem.pair, problem.vectors, problem.b, x, **options)


def solve_cgls(problem: Problem, x, **options):
    return cgls(problem.pair, problem.vectors, problem.b, x, **options)


def solve_sart(problem: Problem, x, *, subsets=None, **options):
    order = subset_order(problem.n_angles, subsets)
    parts = [problem.pair.restricted(angles) for angles in order]
    b_parts = problem.subsets(order)
    return sart(parts, problem.vectors, b_parts, x, **options)


def solve_tv(problem: Problem, x, **options):
    return tv(problem.pair, problem.variation(), problem.vectors, problem.b, x,
              norm_report=problem.norm_report, **options)
