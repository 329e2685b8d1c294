"""The matched parallel-beam pair (pybp.Projector) and the iterative methods
(pybp.sirt, pybp.sart, pybp.cgls) against float64 NumPy: the operators against
pybp.parallel.reference, the pair's adjointness on random float32 data at 1024 bins,
one and several iterations of each method against the same method in float64 on the
dense matrix, SIRT converged against scipy's lsqr, and a limited-angle scan."""

import importlib.util
import re
import textwrap
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from scipy.sparse.linalg import lsqr
from test_cone_files import assert_caught_within_2_s
from test_first_hour import cpu_sized

import pybp
from pybp.cl.device import describe, open_device
from pybp.cone import reference as cone_reference
from pybp.iterative.tv import Variation
from pybp.parallel import reference

# the limited-angle case of docs/accuracy.md's table, as its script makes it
_TOOL = Path(__file__).resolve().parents[1] / "tuning" / "limited_angle.py"
_spec = importlib.util.spec_from_file_location("limited_angle", _TOOL)
limited_angle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(limited_angle)

OPERATOR_RTOL = 2e-6  # each operator against its float64 reference, relative RMS
# (measured 1.5e-7 for A^T and 2.8e-7 for A at 1024 bins: float32 sums of float weights)
BY_VOXEL_RTOL = 1e-6  # cone beam's operators with row positions by columns (fixed point)
# against voxel by voxel (double), relative RMS (measured 1.4e-7 to 1.6e-7 on PoCL)
ADJOINT_TOLERANCE = 1e-5  # |<A x, y> / <x, A^T y> - 1| on random float32 data
SIRT_RTOL = 1e-6  # SIRT's iterations against float64, relative RMS (measured 7e-8 to 1e-7)
CGLS_RTOL = 1e-4  # CGLS's: conjugate directions carry float32 rounding on (1.5e-7 after
# one iteration, 1.8e-5 after five)


def geometries():
    """1024 bins (where float32 positions go wrong), angles on the diagonals and axes
    (where the forward projection changes its axis of candidates), an off-centre axis
    per angle, a slice offset and a rectangular slice."""
    angles = np.concatenate([np.linspace(0, np.pi, 24, endpoint=False),
                             [np.pi / 4, 3 * np.pi / 4, np.pi / 2, 1.3, -0.4, 4.0]])
    yield "square", pybp.ParallelGeometry(angles, 1024, slice_shape=(96, 96))
    center = 511.3 + 0.7 * np.sin(np.arange(angles.size))
    yield "offsets", pybp.ParallelGeometry(angles, 1024, center=center, slice_shape=(80, 131),
                                           slice_offset=(-300.25, 212.5))


GEOMETRIES = dict(geometries())


def relative_rms(got, want):
    return reference.relative_rms(got, want)


@pytest.mark.parametrize("rows", [2, 11])  # stacks of 2 slices; of 8, the second group 3
@pytest.mark.parametrize("name", GEOMETRIES)
def test_operators_match_float64_and_are_adjoint(cl_device, rng, name, rows):
    geometry = GEOMETRIES[name]
    projector = pybp.Projector(geometry, slices=rows, device=cl_device)
    x = rng.standard_normal(projector.volume_shape).astype(np.float32)
    y = rng.standard_normal(projector.projection_shape).astype(np.float32)
    ax, aty = projector.forward(x), projector.backward(y)
    assert ax.shape == projector.projection_shape and ax.dtype == np.float32
    assert relative_rms(ax, reference.forward_project(x, geometry)) < OPERATOR_RTOL
    assert relative_rms(aty, reference.transpose_project(y, geometry)) \
        < OPERATOR_RTOL
    left = np.dot(ax.ravel().astype(np.float64), y.ravel())
    right = np.dot(x.ravel().astype(np.float64), aty.ravel())
    assert abs(left / right - 1) < ADJOINT_TOLERANCE, left / right - 1


def test_float64_references_are_transposes(rng):
    """The references themselves: <A x, y> = <x, A^T y> to float64 rounding."""
    geometry = GEOMETRIES["offsets"]
    x = rng.standard_normal((1,) + geometry.slice_shape)
    y = rng.standard_normal((geometry.n_angles, 1, geometry.n_bins))
    left = np.dot(reference.forward_project(x, geometry).ravel(), y.ravel())
    right = np.dot(x.ravel(), reference.transpose_project(y, geometry).ravel())
    assert abs(left / right - 1) < 1e-12


def test_one_slice_pyopencl_arrays_and_linear_operator(cl_device, rng):
    """One slice without its axis of rows; pyopencl arrays in give arrays on the
    projector's queue with the same bits; the LinearOperator applies the same pair."""
    geometry = pybp.ParallelGeometry(np.linspace(0, np.pi, 20, endpoint=False), 40,
                                     slice_shape=(30, 36))
    projector = pybp.Projector(geometry, device=cl_device)
    x = rng.standard_normal((30, 36)).astype(np.float32)
    y = rng.standard_normal((20, 40)).astype(np.float32)
    ax, aty = projector.forward(x), projector.backward(y)
    assert ax.shape == (20, 40) and aty.shape == (30, 36)
    on_device = projector.forward(cla.to_device(projector.queue, x))
    assert isinstance(on_device, cla.Array) and on_device.shape == (20, 40)
    np.testing.assert_array_equal(on_device.get(), ax)
    np.testing.assert_array_equal(projector.backward(cla.to_device(projector.queue, y)).get(),
                                  aty)
    operator = projector.as_linear_operator()
    assert operator.shape == (20 * 40, 30 * 36) == projector.shape
    np.testing.assert_array_equal(operator.matvec(x.ravel()), ax.ravel())
    np.testing.assert_array_equal(operator.rmatvec(y.ravel()), aty.ravel())


def dense(geometry):
    """The float64 matrix of the operator, column by column from the reference."""
    ny, nx = geometry.slice_shape
    return np.stack([reference.forward_project(e.reshape(ny, nx), geometry).ravel()
                     for e in np.eye(ny * nx)], axis=1)


def inverse(sums):
    return np.where(sums > 0, 1 / np.where(sums > 0, sums, 1), 0)


def sirt64(a, b, iterations, x=None, nonnegative=False, inside=None):
    row, column = inverse(a.sum(1)), inverse(a.sum(0))
    column = column if inside is None else column * inside
    x = np.zeros(a.shape[1]) if x is None else x.copy()
    for _ in range(iterations):
        x = x + column * (a.T @ (row * (b - a @ x)))
        x = np.maximum(x, 0) if nonnegative else x
    return x


def sart64(a, b, iterations, subsets, n_angles, nonnegative=False, inside=None):
    """OS-SART: SIRT's step on each subset's rows (angles k, k + subsets, ...) in turn."""
    per_angle = a.shape[0] // n_angles
    x = np.zeros(a.shape[1])
    for _ in range(iterations):
        for k in range(subsets):
            rows = np.concatenate([np.arange(per_angle) + angle * per_angle
                                   for angle in range(k, n_angles, subsets)])
            x = sirt64(a[rows], b[rows], 1, x, nonnegative, inside)
    return x


def gradient64(x, dims):
    """Forward differences, zero at each axis's last index: ``(dims,) + x.shape``, x
    ``(nz, ny, nx)``, along x, y (and z)."""
    out = np.zeros((dims,) + x.shape)
    out[0, :, :, :-1] = x[:, :, 1:] - x[:, :, :-1]
    out[1, :, :-1, :] = x[:, 1:, :] - x[:, :-1, :]
    if dims == 3:
        out[2, :-1] = x[1:] - x[:-1]
    return out


def gradient64_transpose(q):
    dims = q.shape[0]
    out = np.zeros(q.shape[1:])
    for d, axis in zip(range(dims), (2, 1, 0)):
        last = [slice(None)] * 3
        last[axis] = slice(0, -1)
        first = [slice(None)] * 3
        first[axis] = slice(1, None)
        out[tuple(first)] += q[d][tuple(last)]
        out[tuple(last)] -= q[d][tuple(last)]
    return out


def tv64(a, b, shape, iterations, weight, dims, nonnegative=False, inside=None):
    """Chambolle-Pock as pybp.iterative.methods.tv, in float64 on the dense matrix; with
    ``inside``, the primal step inside it alone."""
    m = np.ones(a.shape[1]) if inside is None else inside
    v = np.full(a.shape[1], 1 / np.sqrt(a.shape[1]))
    value = 0.0
    for _ in range(20):
        w = a.T @ (a @ v)
        value = np.linalg.norm(w)
        v = w / value
    norm = np.sqrt(value)
    mu = norm / np.sqrt(4.0 * dims)
    step = 0.99 / (np.sqrt(2.0) * norm)
    x = np.zeros(a.shape[1])
    xbar, p, q = x.copy(), np.zeros(a.shape[0]), np.zeros((dims,) + shape)
    for _ in range(iterations):
        p = (p + step * (a @ xbar - b)) / (1 + step)
        q = q + step * mu * gradient64(xbar.reshape(shape), dims)
        q /= np.maximum(1, np.sqrt((q ** 2).sum(0)) / (weight / mu))
        new = x - m * (step * (a.T @ p) + step * mu * gradient64_transpose(q).ravel())
        new = np.maximum(new, 0) if nonnegative else new
        xbar, x = 2 * new - x, new
    return x


def cgls64(a, b, iterations, inside=None):
    m = np.ones(a.shape[1]) if inside is None else inside
    x = np.zeros(a.shape[1])
    r = b.copy()
    p = m * (a.T @ r)
    gamma = p @ p
    for _ in range(iterations):
        q = a @ p
        alpha = gamma / (q @ q)
        x, r = x + alpha * p, r - alpha * q
        s = m * (a.T @ r)
        following = s @ s
        p, gamma = s + following / gamma * p, following
    return x


SMALL = pybp.ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False) + 0.05, 24,
                              slice_shape=(16, 18))


@pytest.mark.parametrize("iterations", [1, 5])
def test_iterations_match_float64(cl_device, rng, iterations):
    """SIRT (plain, nonnegative, masked), SART (4 subsets; one angle at a time,
    nonnegative and masked), CGLS (plain, in a circle) and TV (nonnegative; masked)
    against the same iterations in float64 on the dense matrix."""
    a = dense(SMALL)
    truth = rng.random(SMALL.slice_shape) - 0.2
    b = (a @ truth.ravel()).reshape(SMALL.n_angles, SMALL.n_bins)
    b32 = b.astype(np.float32)
    mask = rng.random(SMALL.slice_shape) > 0.3
    circle = np.zeros(SMALL.slice_shape)
    for row, (first, stop) in enumerate(SMALL.circle_columns()):
        circle[row, first:stop] = 1
    cases = {
        "sirt": (pybp.sirt(b32, SMALL, iterations, device=cl_device),
                 sirt64(a, b.ravel(), iterations)),
        "sirt nonnegative": (pybp.sirt(b32, SMALL, iterations, nonnegative=True, device=cl_device),
                             sirt64(a, b.ravel(), iterations, nonnegative=True)),
        "sirt mask": (pybp.sirt(b32, SMALL, iterations, mask=mask, device=cl_device),
                      sirt64(a, b.ravel(), iterations, inside=mask.ravel())),
        "sart 4 subsets": (pybp.sart(b32, SMALL, iterations, subsets=4, device=cl_device),
                           sart64(a, b.ravel(), iterations, 4, SMALL.n_angles)),
        "sart one angle at a time, nonnegative, masked": (
            pybp.sart(b32, SMALL, iterations, nonnegative=True, mask=mask, device=cl_device),
            sart64(a, b.ravel(), iterations, SMALL.n_angles, SMALL.n_angles, nonnegative=True,
                   inside=mask.ravel())),
        "cgls": (pybp.cgls(b32, SMALL, iterations, device=cl_device),
                 cgls64(a, b.ravel(), iterations)),
        "tv nonnegative": (pybp.tv(b32, SMALL, iterations, 0.5, nonnegative=True,
                                   device=cl_device),
                           tv64(a, b.ravel(), (1,) + SMALL.slice_shape, iterations, 0.5, 2,
                                nonnegative=True)),
        "tv masked": (pybp.tv(b32, SMALL, iterations, 0.5, mask=mask, device=cl_device),
                      tv64(a, b.ravel(), (1,) + SMALL.slice_shape, iterations, 0.5, 2,
                           inside=mask.ravel())),
        "cgls circle": (pybp.cgls(b32, SMALL, iterations, circle=True, device=cl_device),
                        cgls64(a, b.ravel(), iterations, inside=circle.ravel())),
    }
    for name, (got, want) in cases.items():
        assert got.shape == SMALL.slice_shape and got.dtype == np.float32, name
        error = relative_rms(got.ravel(), want)
        assert error < (CGLS_RTOL if name.startswith("cgls") else SIRT_RTOL), \
            f"{name}: {error:.2e}"


CONVERGED_RTOL = 1e-4  # SIRT after 2000 iterations against lsqr's weighted solution


def test_sirt_converges_to_the_weighted_least_squares_solution(cl_device, rng):
    """SIRT minimises ||b - A x|| weighted by the inverse row sums R: on noisy data its
    limit is lsqr's solution of R^1/2 A x = R^1/2 b (float64, the same operator's
    matrix). The problem is small and well posed: 3 x 4 pixels seen from 40 angles, where
    SIRT's contraction is 0.981 per iteration (most pixel grids leave a checkerboard that
    linear interpolation barely projects: 0.9998 at 4 x 4, so 5e4 iterations to 1e-4).
    CGLS reaches the unweighted lsqr solution in as many iterations as pixels."""
    geometry = pybp.ParallelGeometry(np.linspace(0, np.pi, 40, endpoint=False), 8,
                                     slice_shape=(3, 4))
    a = dense(geometry)
    seen = a.sum(1) > 0
    b = a @ rng.random(12) + 0.05 * rng.standard_normal(a.shape[0]) * seen
    root = np.sqrt(inverse(a.sum(1)))
    weighted = lsqr(root[:, None] * a, root * b, atol=1e-15, btol=1e-15, iter_lim=10000)[0]
    got = pybp.sirt(b.reshape(40, 8).astype(np.float32), geometry, 2000, device=cl_device)
    assert relative_rms(got.ravel(), weighted) < CONVERGED_RTOL
    plain = lsqr(a, b, atol=1e-15, btol=1e-15, iter_lim=10000)[0]
    got = pybp.cgls(b.reshape(40, 8).astype(np.float32), geometry, 40, device=cl_device)
    assert relative_rms(got.ravel(), plain) < CONVERGED_RTOL


def test_limited_angle_iterations_beat_fbp(cl_device):
    """+-60 degrees of the Shepp-Logan phantom (exact line integrals), 64^2: inside the
    reconstruction circle, SIRT (nonnegative, 200 iterations), SART (nonnegative, 10
    subsets, 10 iterations) and TV (nonnegative, weight 3, 100 iterations) come closer to
    the phantom than FBP (measured 0.338, 0.315 and 0.307 against 0.444, relative RMS). The exact line
    integrals are not the voxel model's, so the methods semi-converge: CGLS measured
    0.437 after 5 iterations, 0.536 after 20; SIRT 0.339 after 50, 0.421 after 1000
    (docs/accuracy.md, tuning/limited_angle.py)."""
    geometry, sinogram, error = limited_angle.case(64)
    angles = geometry.angles
    fbp = error(pybp.fbp(sinogram, angles, device=cl_device, progress=False))
    sirt = error(pybp.sirt(sinogram, geometry, 200, nonnegative=True, device=cl_device))
    sart = error(pybp.sart(sinogram, geometry, 10, subsets=10, nonnegative=True,
                           device=cl_device))
    tv = error(pybp.tv(sinogram, geometry, 100, 3.0, nonnegative=True, device=cl_device))
    assert sirt < 0.8 * fbp and sart < 0.8 * fbp and tv < 0.8 * fbp, (fbp, sirt, sart, tv)


def test_callback_progress_and_x0(cl_device, rng, capsys):
    """The callback sees each iteration's volume; starting from the result of 3
    iterations, 2 more give the result of 5 (SIRT's state is its volume)."""
    b = rng.random((SMALL.n_angles, 2, SMALL.n_bins)).astype(np.float32)
    seen = []
    five = pybp.sirt(b, SMALL, 5, device=cl_device,
                     callback=lambda i, volume: seen.append((i, volume.copy())))
    assert [i for i, _ in seen] == list(range(5))
    np.testing.assert_array_equal(seen[-1][1], five)
    three = pybp.sirt(b, SMALL, 3, device=cl_device)
    np.testing.assert_array_equal(pybp.sirt(b, SMALL, 2, x0=three, device=cl_device), five)


def test_tv_progress_counts_the_norms_power_iterations(cl_device, rng, monkeypatch):
    """TV's 20 power iterations (||A||) are steps of its progress line, each as long as
    an iteration: they ran 23 s unseen of a 41 s run, and the first estimate said 414 s
    left."""
    from pybp.api import iterative as api_iterative
    from pybp.iterative.methods import POWER_ITERATIONS

    made, seen = [], []
    real = api_iterative.Progress

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(api_iterative, "Progress", recording)
    b = rng.random((SMALL.n_angles, 2, SMALL.n_bins)).astype(np.float32)
    pybp.tv(b, SMALL, 3, 0.1, device=cl_device, callback=lambda i, v: seen.append(made[0].done))
    assert made[0].total == POWER_ITERATIONS + 3
    assert seen == [POWER_ITERATIONS + 1, POWER_ITERATIONS + 2, POWER_ITERATIONS + 3]
    assert "of ||A||'s estimate" in made[0].what


@pytest.mark.parametrize("call, message", [
    (lambda: pybp.Projector("no"), "geometry: expected a pybp.ParallelGeometry"),
    (lambda: pybp.Projector(SMALL, slices=0), "slices"),
    (lambda: pybp.Projector(SMALL).forward(np.zeros((3, 3))), r"volume: expected shape \(16, 18\)"),
    (lambda: pybp.Projector(SMALL).backward(np.zeros((2, 30, 24))), "projections"),
    (lambda: pybp.sirt(np.zeros((30, 23)), SMALL, 3), "projections: expected"),
    (lambda: pybp.sirt(np.full((30, 24), np.nan), SMALL, 3), "projections: contain NaN"),
    (lambda: pybp.sirt(np.zeros((30, 24)), SMALL, 0), "iterations"),
    (lambda: pybp.sirt(np.zeros((30, 24)), SMALL, 3, relaxation=2.5), "relaxation"),
    (lambda: pybp.sirt(np.zeros((30, 24)), SMALL, 3, mask=np.ones((4, 4))), "mask"),
    (lambda: pybp.sirt(np.zeros((30, 24)), SMALL, 3, x0=np.zeros((2, 2))), "x0"),
    (lambda: pybp.cgls(np.zeros((30, 24)), SMALL, 3, callback=3), "callback"),
    (lambda: pybp.sart(np.zeros((30, 24)), SMALL, 3, subsets=31), "subsets: at most one per angle"),
    (lambda: pybp.sart(np.zeros((30, 24)), SMALL, 3, subsets=0), "subsets"),
    (lambda: pybp.sart(np.zeros((30, 24)), "no", 3), "geometry"),
    (lambda: pybp.tv(np.zeros((30, 24)), SMALL, 3, 0.0), "weight: expected a positive"),
    (lambda: pybp.tv(np.zeros((3, 24)), pybp.ParallelGeometry(  # a slice 400 bins aside
        [0.0, 0.01, 0.02], 24, slice_shape=(4, 4), slice_offset=(0, 400)), 3, 1.0),
     "geometry: no voxel"),
    (lambda: pybp.Projector(CONE["vectors"], slices=2), "slices: a ConeGeometry's volume"),
    (lambda: pybp.sirt(np.zeros((16, 24, 41)), CONE["vectors"], 3), "projections: expected"),
    (lambda: pybp.sirt(np.zeros((16, 24, 40)), CONE["vectors"], 3, circle=True), "circle"),
    (lambda: pybp.cgls(np.zeros((30, 24)), SMALL, 3, circle=-1), "circle"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_slices_give_the_same_bits_however_many_are_projected_at_once(cl_device, rng):
    """A work-item takes up to 8 slices (one position serves them): 9 slices at once
    (a group of 8 and one of 1) equal each slice alone, both ways, bit for bit, so that
    chunks of slices can be cut anywhere."""
    geometry = GEOMETRIES["offsets"]
    x = rng.standard_normal((9,) + geometry.slice_shape).astype(np.float32)
    y = rng.standard_normal((geometry.n_angles, 9, geometry.n_bins)).astype(np.float32)
    nine, one = pybp.Projector(geometry, slices=9, device=cl_device), \
        pybp.Projector(geometry, device=cl_device)
    ax, aty = nine.forward(x), nine.backward(y)
    for row in range(9):
        np.testing.assert_array_equal(ax[:, row], one.forward(x[row]))
        np.testing.assert_array_equal(aty[row], one.backward(y[:, row]))


def test_projector_that_does_not_fit_is_refused_saying_what_it_takes(cl_device, monkeypatch):
    """The memory check counts the pair's copies (two stacked volumes and stacked
    projections, 16 rows for 9 slices) and says what it would take."""
    from pybp.api import projector
    from pybp.parallel import project

    geometry = GEOMETRIES["square"]
    monkeypatch.setattr(projector.memory.Budget, "of", classmethod(
        lambda cls, device, memory_limit=None: cls(2 ** 20, 2 ** 20)))
    copies = project.scratch_bytes(geometry, 9)
    assert copies == 4 * 16 * (2 * 96 * 96 + geometry.n_angles * 1024)
    need, size = 4 * (9 * 96 * 96 + geometry.n_angles * 9 * 1024) + copies, projector.memory.size_text
    assert (size(copies), size(need)) == ("3.0 MiB", "4.4 MiB")  # (0.00 GiB, 0.00 GiB before)
    with pytest.raises(MemoryError, match=r"Projector: 1 volume\(s\) \(9, 96, 96\) and 1 "
                       r"set\(s\) of projections \(30, 9, 1024\) of float32, with the "
                       rf"operators' copies \({re.escape(size(copies))}\), take "
                       rf"{re.escape(size(need))} on the device, more than the 1\.0 MiB it lends"):
        pybp.Projector(geometry, slices=9, device=cl_device)


def test_forward_work_groups_shrink_to_what_the_device_runs(cl_device, rng, monkeypatch):
    """The forward projection takes the first of FORWARD_GROUPS the device runs the
    kernel with (the H100 runs it with 256 work-items at most): a group too large for
    any device gives way to the next, with the same bits."""
    from pybp.parallel import project

    geometry = GEOMETRIES["offsets"]
    x = rng.standard_normal((3,) + geometry.slice_shape).astype(np.float32)
    want = pybp.Projector(geometry, slices=3, device=cl_device).forward(x)
    monkeypatch.setattr(project, "FORWARD_GROUPS", ((2 ** 16, 1, 1), (32, 2, 1)))
    projector = pybp.Projector(geometry, slices=3, device=cl_device)
    assert projector.pair.forward_group == (32, 2, 1)
    np.testing.assert_array_equal(projector.forward(x), want)


@pytest.mark.parametrize("method", ["sirt", "sart", "cgls", "tv"])
def test_methods_give_each_slice_the_same_bits_however_many_share_the_call(cl_device, rng,
                                                                            method):
    """Each slice is its own problem: CGLS's steps and TV's operator norm are a slice's
    own, so 3 slices at once (one of them zero, whose CGLS stops at once) equal each
    slice alone, bit for bit: the stream cuts chunks anywhere and --resume is exact."""
    run = {"sirt": lambda b: pybp.sirt(b, SMALL, 3, device=cl_device),
           "sart": lambda b: pybp.sart(b, SMALL, 2, subsets=3, device=cl_device),
           "cgls": lambda b: pybp.cgls(b, SMALL, 3, device=cl_device),
           "tv": lambda b: pybp.tv(b, SMALL, 3, 0.5, device=cl_device)}[method]
    b = rng.random((SMALL.n_angles, 3, SMALL.n_bins)).astype(np.float32)
    b[:, 1] = 0
    together = run(b)
    for row in range(3):
        np.testing.assert_array_equal(together[row], run(b[:, row]), err_msg=f"slice {row}")


@cpu_sized
def test_ctrl_c_stops_sirt_promptly():
    """16 slices of 256^2 from 256 angles take seconds per iteration on PoCL with 2
    cores: a SIGINT 3 s in (the weights or an iteration) raises KeyboardInterrupt within
    2 s, and a new call then works."""
    script = textwrap.dedent("""
        import time, numpy as np, pybp
        g = pybp.ParallelGeometry(np.linspace(0, np.pi, 256, endpoint=False), 256)
        print("started", flush=True)
        try:
            pybp.sirt(np.ones((256, 16, 256), np.float32), g, 100)
        except KeyboardInterrupt:
            print("caught at", time.time(), flush=True)
            small = pybp.ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 8,
                                          slice_shape=(8, 8))
            volume = pybp.sirt(np.ones((8, 4, 8), np.float32), small, 2)
            print("a new call works:", volume.shape, flush=True)
    """)
    assert_caught_within_2_s(script, delay=3.0)


def cone_geometries():
    """A circular scan onto 1024 detector columns (where float32 positions go wrong);
    one onto pixels 2 to 3 voxels wide and tall (several voxel columns of a pixel column
    on each line, several voxels of a pixel row in each column); and ASTRA vectors with a
    tilted detector and a source off the orbit's plane (no column of voxels shares its
    detector column)."""
    angles = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    yield "circular", pybp.ConeGeometry.circular(angles, (10, 1024), (1.0, 0.06), 80.0, 40.0,
                                                 (6, 36, 40), 1.0)
    yield "coarse", pybp.ConeGeometry.circular(angles, (6, 14), (3.0, 5.0), 80.0, 40.0,
                                               (16, 36, 40), 1.0)
    s, c, zero = np.sin(angles), np.cos(angles), np.zeros_like(angles)
    tilt = 0.15
    vectors = np.stack([60 * s, -60 * c, 5 + zero, -40 * s, 40 * c, -2 + zero,
                        1.1 * c, 1.1 * s, 1.1 * tilt + zero,
                        -1.1 * tilt * s, 1.1 * tilt * c, 1.1 + zero], 1)
    yield "vectors", pybp.ConeGeometry.from_astra(vectors, (24, 40), (10, 14, 12), 1.0)


CONE = dict(cone_geometries())
# voxels of other sides along x, y and z (ASTRA's windows, TIGRE's dVoxel): a ray's
# chord and the faces that make its box compared in length, not in voxels
BOXES = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (20, 30),
                                   (1.3, 0.9), 80.0, 40.0, (12, 26, 20), (1.2, 0.7, 1.9))


def laminography(turn):
    """Parallel rays 0.4 rad from the horizontal onto a detector turned ``turn`` rad about
    its normal (none: a voxel column keeps its detector column, A the gather; else the
    scatter and A^T voxel by voxel): the cone-beam pair's kernels along parallel rays."""
    from pybp.geometry.parallel_vectors import laminography_vectors
    vectors = laminography_vectors(np.linspace(0, 2 * np.pi, 16, endpoint=False), 0.4,
                                   (1.1, 0.9))
    u, v = vectors[:, 6:9].copy(), vectors[:, 9:12].copy()
    vectors[:, 6:9] = np.cos(turn) * u + np.sin(turn) * v
    vectors[:, 9:12] = np.cos(turn) * v - np.sin(turn) * u
    return pybp.ParallelVectorGeometry.from_astra(vectors, (26, 34), (12, 18, 16),
                                                  (1.0, 0.8, 1.1))


# a volume 36 times as tall as the detector sees it: A^T's work-items whose voxels'
# boxes all lie far above or below the image (a column's rows none: read anyway, its
# running totals were read far outside their places, which this case's sums showed)
OVERHANGING = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 12, endpoint=False), (4, 24),
                                         (1.0, 1.0), 80.0, 40.0, (96, 12, 12), 1.0)
WHOLE = {"boxes": BOXES, "laminography": laminography(0.0),
         "laminography-turned": laminography(0.1), "overhanging": OVERHANGING}
# the module constants that shape A's work, per kernel (pybp/cone/project.py)
SHAPES = {"gather": ("GATHER_ITEMS", "SLOTS", "GATHER_COLUMNS", "GATHER_ENTRIES", "CHUNK",
                     "UNROLL", "READ_ROWS"),
          "scatter": ("FORWARD_TILES", "PLANES", "LANES")}


@pytest.mark.parametrize("name", [*CONE, *WHOLE])
def test_cone_operators_match_float64_and_are_adjoint(cl_device, rng, name):
    geometry = CONE.get(name) or WHOLE[name]
    projector = pybp.Projector(geometry, device=cl_device)
    assert projector.volume_shape == geometry.volume_shape
    x = rng.standard_normal(projector.volume_shape).astype(np.float32)
    y = rng.standard_normal(projector.projection_shape).astype(np.float32)
    ax, aty = projector.forward(x), projector.backward(y)
    assert relative_rms(ax, cone_reference.forward_project(x, geometry)) < OPERATOR_RTOL
    assert relative_rms(aty, cone_reference.transpose_project(y, geometry)) < OPERATOR_RTOL
    left = np.dot(ax.ravel().astype(np.float64), y.ravel())
    right = np.dot(x.ravel().astype(np.float64), aty.ravel())
    assert abs(left / right - 1) < ADJOINT_TOLERANCE, left / right - 1


@pytest.mark.parametrize("name", CONE)
def test_cone_forward_sums_do_not_depend_on_the_work_shape(cl_device, rng, monkeypatch, name):
    """A's pixel sums are the same bits whatever the shapes of its work. Its gather
    (where the matrices share a voxel column's c and w: the circular scans,
    project.shared_column) adds each pixel's terms in one fixed order: work-groups of
    other sizes, rows and columns, and lists short enough to be split, give the same
    bits. Its scatter adds 64-bit integers: tiles, batches of planes and lanes of other
    shapes give the same bits, and so does finding c and w voxel by voxel (forced on
    the circular scans, with A^T, to the rounding of its row positions, which are in
    fixed point where c and w are the column's). A voxel left out or added twice would
    show. On the circular scans the gather and the scatter agree to float rounding."""
    from pybp.cone import project
    geometry = CONE[name]
    x = rng.standard_normal(geometry.volume_shape).astype(np.float32)
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)
    shared = name != "vectors"
    assert project.shared_column(project.tables(geometry)[0]) == shared
    # (the gather's bands split the images' rows at 2 and 4 work-items; lists of 2, 5, 7;
    # readers of 1, 2 and 4 rows at a time)
    shapes = {"gather": [(128, 8, 4, (128,), 4, 4, 2), (4, 2, 3, (2,), 3, 4, 2),
                         (32, 1, 1, (7,), 1, 1, 2), (8, 3, 16, (512,), 2, 2, 2),
                         (2, 2, 5, (5,), 4, 4, 1), (2, 4, 2, (5,), 3, 2, 4)],
              "scatter": [(((32, 128),), {False: 8, True: 8}, 16),
                          (((4, 8),), {False: 3, True: 3}, 32),
                          (((8, 4),), {False: 1, True: 1}, 4)]}
    results = {}
    for method in ("gather", "scatter") if shared else ("scatter",):
        for shape in shapes[method]:
            with monkeypatch.context() as patch:
                patch.setattr(project, "GATHER_BELOW", np.inf if method == "gather" else -1.0)
                for attribute, value in zip(SHAPES[method], shape):
                    patch.setattr(project, attribute, value)
                projector = pybp.Projector(geometry, device=cl_device)
                assert projector.pair.method == method
                results.setdefault(method, []).append(projector.forward(x))
    want = cone_reference.forward_project(x, geometry)
    for got in results.values():
        assert relative_rms(got[0], want) < OPERATOR_RTOL
        for other in got[1:]:
            assert np.array_equal(other, got[0])
    if shared:
        assert relative_rms(results["gather"][0], results["scatter"][0]) < OPERATOR_RTOL
        transpose = projector.backward(y)
        monkeypatch.setattr(project, "shared_column", lambda matrices: False)
        projector = pybp.Projector(geometry, device=cl_device)
        assert not projector.pair.shared
        by_voxel = projector.forward(x), projector.backward(y)
        assert relative_rms(by_voxel[0], results["scatter"][0]) < BY_VOXEL_RTOL
        assert relative_rms(by_voxel[1], transpose) < BY_VOXEL_RTOL


def test_cone_rows_beyond_the_fixed_point_are_refused_and_those_within_are_right(cl_device,
                                                                                  rng):
    """Where a voxel column's c and w are its own, the kernels hold its voxels' row
    positions in fixed point, within project.FIXED_REACH (2^30) pixels. A volume whose
    columns reach further (just in front of the source, on pixels of 0.001 voxel) is
    refused in one line naming the geometry; one just within (rows up to 9.7e8 pixels
    away) gives A and A^T as their float64 references."""
    from pybp.cone import project
    angles = np.linspace(0, np.pi, 4, endpoint=False)
    near = pybp.ConeGeometry.circular(angles, (8, 8), 1e-3, 2.2, 50.0, (3, 3, 3), 1.0)
    with pytest.raises(ValueError, match=r"^geometry: .* reach 1\.09e\+09 pixels .* 2\^30"):
        pybp.Projector(near, device=cl_device)
    within = pybp.ConeGeometry.circular(angles, (8, 8), 1e-3, 2.3, 50.0, (3, 3, 3), 1.0)
    assert 9e8 < project.row_reach(within) < project.FIXED_REACH
    projector = pybp.Projector(within, device=cl_device)
    assert projector.pair.shared
    x = rng.standard_normal(within.volume_shape).astype(np.float32)
    y = rng.standard_normal((within.n_angles,) + within.detector_shape).astype(np.float32)
    want = cone_reference.forward_project(x, within)
    assert np.count_nonzero(want) > 0
    assert relative_rms(projector.forward(x), want) < OPERATOR_RTOL
    assert relative_rms(projector.backward(y), cone_reference.transpose_project(y, within)) < OPERATOR_RTOL


def test_cone_gather_fits_the_local_memory_it_is_given(cl_device):
    """gather_shape sizes A's gather to the device's local memory: the list, the
    profiles and their margins. Built here for devices with less
    local memory than this one, the kernel takes (as the device reports it) no more than
    each has; one with room for the list and two rows a work-item but not for the
    margins gets one row a work-item."""
    import dataclasses

    import pyopencl as cl

    from pybp.cone import project
    geometry = pybp.ConeGeometry.circular(np.linspace(0, np.pi, 2, endpoint=False), (1000, 16),
                                          (1.0, 1.0), 80.0, 40.0, (8, 8, 8), 1.0)
    assert project.forward_method(geometry) == "gather"
    projector = pybp.Projector(geometry, device=cl_device)
    items, entries = projector.pair.gather[0], projector.pair.gather[3]
    row = items * 4 * project.CHUNK  # the profiles: a row a work-item
    listed = project.LISTED_BYTES * entries + 4 * items
    for budget, slots in ((listed + 2 * row + 16, 1), (listed + 3 * row + 1024, 3),
                          (listed + 8 * row + 4096, 8)):
        device = dataclasses.replace(projector.device, local_memory=budget)
        pair = project.ConePair(geometry, projector.context, projector.queue, device)
        used = pair._kernels["cone_gather"].kernel.get_work_group_info(
            cl.kernel_work_group_info.LOCAL_MEM_SIZE, projector.context.devices[0])
        assert pair.gather[1] == slots and used <= budget, (budget, pair.gather, used)


@pytest.mark.parametrize("method", ["gather", "scatter"])
def test_cone_pair_in_launches_of_one_image_or_plane_gives_the_same_bits(cl_device, rng,
                                                                         monkeypatch, method):
    """A launch of A takes images from its first on, one of A^T planes (pybp/cl/pacing.py:
    enough to fill the device, about LAUNCH_SECONDS long): launches of one image (A) and
    of one column of planes (A^T) give the bits of one launch of all."""
    from pybp.cl import pacing
    from pybp.cone import project
    geometry = CONE["coarse"]
    monkeypatch.setattr(project, "GATHER_BELOW", np.inf if method == "gather" else -1.0)
    x = rng.standard_normal(geometry.volume_shape).astype(np.float32)
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)
    steps, launches = [], pacing.launches

    def counted(launch, total, step, wait_for=None):
        steps.append((total, step))
        return launches(launch, total, step, wait_for)

    monkeypatch.setattr(pacing, "launches", counted)
    whole = pybp.Projector(geometry, device=cl_device)
    assert whole.pair.method == method
    want = whole.forward(x), whole.backward(y)
    assert all(step == total for total, step in steps)  # one launch each, here
    steps.clear()
    monkeypatch.setattr(pacing, "LAUNCH_SECONDS", 1e-12)
    monkeypatch.setattr(pacing, "LAUNCH_ITEMS_PER_UNIT", {})
    monkeypatch.setattr(pacing, "OTHER_LAUNCH_ITEMS", 1)
    many = pybp.Projector(geometry, device=cl_device)
    got = many.forward(x), many.backward(y)
    assert steps == [(geometry.n_angles, 1), (geometry.volume_shape[0], project.COLUMN)]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("name", ["coarse", "circular", "boxes", "laminography", "overhanging"])
def test_cone_transpose_rows_in_batches_give_the_same_bits(cl_device, rng, monkeypatch, name):
    """A^T (where a voxel column's c and w are its own) makes its rows' sums AT_BATCH at
    a time on a GPU, a batch past a work-item's last row reading that row again, and one
    at a time elsewhere (project.AT_BATCH): batches of 2, 3 and 8, forced on this device,
    give the bits of one at a time, and the float64 transpose (the batches of the GPU,
    run where CI runs)."""
    from pybp.cone import project
    geometry = CONE.get(name) or WHOLE[name]
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)
    kind = pybp.Projector(geometry, device=cl_device).device.type
    results = []
    for batch in (1, 2, 3, 8):
        monkeypatch.setattr(project, "AT_BATCH", {kind: batch})
        projector = pybp.Projector(geometry, device=cl_device)
        assert projector.pair.shared
        results.append(projector.backward(y))
    assert relative_rms(results[0], cone_reference.transpose_project(y, geometry)) < OPERATOR_RTOL
    for got in results[1:]:
        assert np.array_equal(got, results[0])


@pytest.mark.parametrize("name", ["coarse", "boxes", "laminography"])
def test_cone_transpose_keeps_faint_voxels_beside_bright_rows(cl_device, name):
    """A^T takes a voxel's sum as the difference of its column's rows' running totals at
    its box's edges (where a voxel column's c and w are its own): each total with its
    rounding error, and the part of an edge's row from its nearer edge, so that a voxel
    whose box sees only rows a million times fainter than rows above it in its column
    keeps float32's relative accuracy (5.3e-7 on PoCL; one float a total gave 0.84, the
    part of a row from its first edge alone 7.7e-6)."""
    geometry = CONE.get(name) or WHOLE[name]
    projector = pybp.Projector(geometry, device=cl_device)
    assert projector.pair.shared
    shape = projector.projection_shape
    y = np.full(shape, 1e-6, np.float32)
    y[:, :shape[1] // 2] = 1.0  # the upper half of each image a million times brighter
    got = projector.backward(y)
    want = cone_reference.transpose_project(y.astype(np.float64), geometry)
    bright = cone_reference.transpose_project(np.where(y == 1, 1.0, 0.0), geometry)
    faint = (want > 1e-9) & (bright == 0)
    assert faint.sum() > 500
    assert np.max(np.abs(got[faint] - want[faint]) / want[faint]) < 2e-6
    assert relative_rms(got, want) < OPERATOR_RTOL


@pytest.mark.parametrize("name", ["circular", "coarse"])
def test_cone_pair_in_float_where_a_device_has_no_double(cl_device, rng, monkeypatch, name):
    """A device without cl_khr_fp64 (many GPUs) takes positions in float: the margins of
    the gather's strips and the scatter's boxes are float's, and each voxel-pixel weight
    is still the same float in A and A^T, so the pair stays adjoint; A's gather keeps its
    bits whatever its work's shape and agrees with the scatter (6.5e-8, 2.2e-7 on PoCL).
    Against float64 the positions show float's rounding: 1.2e-3 (A) and 1.6e-3 (A^T) at
    1024 columns, nearly all of it in the image at 225 degrees, where the rays to the
    voxels of a diagonal run as much along x as along y, and float and float64 choose
    the boxes' axis apart for some (the model's own edge, where its axis turns)."""
    import dataclasses

    from pybp.cone import project
    geometry = CONE[name]
    found, context, _ = open_device(cl_device)
    described = describe(found)
    device = dataclasses.replace(described, extensions=tuple(
        e for e in described.extensions if e != "cl_khr_fp64"))
    queue = cl.CommandQueue(context)
    x = rng.standard_normal(geometry.volume_shape).astype(np.float32)
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)

    def apply(pair):
        volume, images = cla.to_device(queue, x), cla.to_device(queue, y)
        ax, aty = cla.empty_like(images), cla.empty_like(volume)
        pair.forward(volume.data, ax.data)
        pair.backward(images.data, aty.data)
        return ax.get(), aty.get()
    results = {}
    for method, shape in (("gather", (128, 8, 4, (128,), 4, 4)),
                          ("gather", (4, 2, 3, (2,), 3, 4)), ("scatter", None)):
        with monkeypatch.context() as patch:
            patch.setattr(project, "GATHER_BELOW", np.inf if method == "gather" else -1.0)
            if shape:
                for attribute, value in zip(SHAPES["gather"], shape):
                    patch.setattr(project, attribute, value)
            pair = project.ConePair(geometry, context, queue, device)
            assert pair.real == "float" and pair.method == method
            ax, aty = apply(pair)
        left = np.dot(ax.ravel().astype(np.float64), y.ravel())
        right = np.dot(x.ravel().astype(np.float64), aty.ravel())
        scale = np.linalg.norm(ax.astype(np.float64)) * np.linalg.norm(y)
        assert abs(left - right) < 1e-6 * scale  # 1e-10 to 1e-9 of it on PoCL
        assert relative_rms(ax, cone_reference.forward_project(x, geometry)) < 3e-3
        results.setdefault(method, []).append(ax)
    assert np.array_equal(results["gather"][1], results["gather"][0])
    assert relative_rms(results["gather"][0], results["scatter"][0]) < OPERATOR_RTOL


def test_cone_forward_method_follows_the_voxels_image(cl_device):
    """The gather where a voxel's image is at most GATHER_BELOW pixels tall, the scatter
    where it is taller or the matrices do not share a column's c and w."""
    from pybp.cone import project
    angles = np.linspace(0, 2 * np.pi, 8, endpoint=False)

    def geometry(pixel):
        return pybp.ConeGeometry.circular(angles, (64, 64), pixel, 80.0, 40.0, (16, 32, 32), 1.0)

    assert project.forward_method(geometry(1.5)) == "gather"  # a voxel's image 1.0 pixel tall
    assert project.forward_method(geometry(0.5)) == "gather"  # 3.0 pixels
    assert project.forward_method(geometry(0.1)) == "scatter"  # 15 pixels
    vectors = CONE["vectors"]
    assert project.forward_method(vectors) == "scatter"
    # a detector turned a quarter, its rows along the orbit: a voxel column's voxels
    # share an image row (no step along it), so the scatter, which takes it as any other
    s, c, zero = np.sin(angles), np.cos(angles), np.zeros_like(angles)
    turned = pybp.ConeGeometry.from_astra(
        np.stack([60 * s, -60 * c, zero, -40 * s, 40 * c, zero, zero, zero, 1 + zero,
                  c, s, zero], 1), (24, 40), (10, 14, 12), 1.0)
    assert project.voxel_step(turned) == 0 and project.gather_phases(turned) == 0
    assert project.forward_method(turned) == "scatter"
    x = np.random.default_rng(0).standard_normal(turned.volume_shape).astype(np.float32)
    got = pybp.Projector(turned, device=cl_device).forward(x)
    assert relative_rms(got, cone_reference.forward_project(x, turned)) < OPERATOR_RTOL
    # the memory checks count the gather's transposed volume, and only the gather's
    assert project.scratch_bytes(geometry(1.5)) == 4 * 16 * 32 * 32
    assert project.scratch_bytes(geometry(0.1)) == project.scratch_bytes(vectors) == 0


@pytest.mark.parametrize("pixel", [0.2, 0.75, 1.0, 2.0, 4.5])
def test_cone_gather_phases_keep_each_phases_rows_apart(pixel):
    """The gather's premise, which no run on a CPU would catch (its work-items take turns
    there; tests/test_oclgrind.py runs it under a race checker): in every image, the
    boxes of two voxels of a column ``phases`` apart or more share no row, so the voxels
    of one phase write distinct places. Checked on every voxel of the volume in float64,
    the boxes' rows as the kernels find them (pixel r spans r to r + 1 from the first
    pixel's edge)."""
    from pybp.cone import project
    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    geometry = pybp.ConeGeometry.circular(angles, (64, 64), pixel, 80.0, 40.0, (24, 20, 28),
                                          1.0)
    phases = project.gather_phases(geometry)
    assert phases >= 2
    nz, ny, nx = geometry.volume_shape
    m = geometry.voxel_matrices()
    j, i = np.mgrid[:ny, :nx]
    for matrix in m:
        w = matrix[2, 0] * i + matrix[2, 1] * j + matrix[2, 3]
        r = matrix[1, 0] * i + matrix[1, 1] * j + matrix[1, 3]
        edges = (r[None] + matrix[1, 2] * (np.arange(nz + 1) - 0.5)[:, None, None]) / w[None] + 0.5
        low, high = np.minimum(edges[:-1], edges[1:]), np.maximum(edges[:-1], edges[1:])
        first, last = np.floor(low), np.ceil(high) - 1
        # the rows of box k + phases lie wholly past box k's, in the step's direction
        up = matrix[1, 2] > 0
        apart = (first[phases:] - last[:-phases]) if up else (first[:-phases] - last[phases:])
        assert apart.min() >= 1, (pixel, phases, apart.min())
        # and one step fewer would not do
        closer = (first[phases - 1:] - last[:1 - phases]) if up else (
            first[:1 - phases] - last[phases - 1:])
        assert closer.min() < 1
    assert project.voxel_step(geometry) == pytest.approx(
        min(abs(matrix[1, 2]) / (matrix[2, 0] * i + matrix[2, 1] * j + matrix[2, 3]).max()
            for matrix in m))


@pytest.mark.parametrize("method", ["gather", "scatter"])
def test_cone_forward_sums_keep_small_values_and_flag_non_finite(cl_device, monkeypatch,
                                                                 method):
    """Rays through voxels a millionth of the largest keep float32's relative accuracy
    (as they do in a volume of the faint voxels alone: 4.4e-7): the gather's float sums
    hold each pixel's own terms; the scatter's fixed point is scaled by the volume's L1
    norm. A non-finite voxel gives NaN in just the pixels its box covers (on the
    device: a NumPy volume with one is refused); a zero volume gives zeros."""
    from pybp.cone import project
    monkeypatch.setattr(project, "GATHER_BELOW", np.inf if method == "gather" else -1.0)
    geometry = CONE["circular"]
    projector = pybp.Projector(geometry, device=cl_device)
    assert projector.pair.method == method
    x = np.full(geometry.volume_shape, 1e-6, np.float32)
    x[:, :, :20] = 1.0  # half the volume a million times larger
    got = projector.forward(x)
    want = cone_reference.forward_project(x.astype(np.float64), geometry)
    bright = cone_reference.forward_project(np.where(x == 1, 1.0, 0.0), geometry)
    # rays through the faint half alone, less those a tiny fraction of a voxel's weight
    # reaches (float32's weights, 1 - f with f near 1, are what limits those)
    faint = (want > 1e-7) & (bright == 0)
    assert faint.sum() > 1000
    assert np.max(np.abs(got[faint] - want[faint]) / want[faint]) < 1e-6  # 5.0e-7 on PoCL
    assert relative_rms(got, want) < OPERATOR_RTOL
    assert not projector.forward(np.zeros_like(x)).any()
    x[3, 18, 21] = np.nan
    # (the pixels its box covers by more than rounding: at an exact edge, a float's
    # share may be 0 where float64's is 1e-12)
    reached = cone_reference.forward_project(
        (np.arange(x.size) == np.ravel_multi_index((3, 18, 21), x.shape)).reshape(x.shape)
        .astype(np.float64), geometry) > 1e-6
    with pytest.raises(ValueError, match="volume: contains NaN or Inf"):
        projector.forward(x)
    got = projector.forward(cla.to_device(projector.queue, x)).get()
    assert reached.any() and np.isnan(got[reached]).all()
    assert np.isfinite(got[~reached]).mean() > 0.99


def test_cone_forward_tile_fits_local_memory():
    from pybp.cone import project
    small = type("Device", (), {"local_memory": 16 * 1024})()
    large = type("Device", (), {"local_memory": 48 * 1024})()
    assert project.forward_tile(small) == project.FORWARD_TILES[-1]
    assert project.forward_tile(large) == project.FORWARD_TILES[0]
    for tile in project.FORWARD_TILES[1:]:
        assert 9 * tile[0] * tile[1] + 256 <= 16 * 1024


def test_cone_float64_references_are_transposes(rng):
    geometry = CONE["vectors"]
    x = rng.standard_normal(geometry.volume_shape)
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape)
    left = np.dot(cone_reference.forward_project(x, geometry).ravel(), y.ravel())
    right = np.dot(x.ravel(), cone_reference.transpose_project(y, geometry).ravel())
    assert abs(left / right - 1) < 1e-12


def test_cone_iterations_match_float64(cl_device, rng):
    """SIRT, SART (3 subsets), CGLS and TV (3-D) on the tilted cone geometry against
    float64 on the dense matrix, 3 iterations each."""
    geometry = CONE["vectors"]
    n = int(np.prod(geometry.volume_shape))
    a = np.stack([cone_reference.forward_project(e.reshape(geometry.volume_shape),
                                                 geometry).ravel() for e in np.eye(n)], axis=1)
    b = a @ (rng.random(n) - 0.2)
    b32 = b.astype(np.float32).reshape((geometry.n_angles,) + geometry.detector_shape)
    n_angles = geometry.n_angles
    cases = {
        "sirt": (pybp.sirt(b32, geometry, 3, device=cl_device), sirt64(a, b, 3)),
        "sart": (pybp.sart(b32, geometry, 3, subsets=3, device=cl_device),
                 sart64(a, b, 3, 3, n_angles)),
        "cgls": (pybp.cgls(b32, geometry, 3, device=cl_device), cgls64(a, b, 3)),
        "tv": (pybp.tv(b32, geometry, 3, 0.5, device=cl_device),
               tv64(a, b, geometry.volume_shape, 3, 0.5, 3)),
    }
    for name, (got, want) in cases.items():
        assert got.shape == geometry.volume_shape, name
        error = relative_rms(got.ravel(), want)
        assert error < (CGLS_RTOL if name == "cgls" else SIRT_RTOL), f"{name}: {error:.2e}"


@pytest.mark.parametrize("dims", [2, 3])
def test_tv_gradient_transpose_is_exact(cl_device, rng, dims):
    """The gradient's transpose on the device against float64 (and <grad x, q> =
    <x, grad^T q>), on a volume of odd sizes."""
    shape = (5, 7, 9)
    device, context, _ = open_device(cl_device)
    queue = cl.CommandQueue(context)
    variation = Variation(context, queue, describe(device), shape, dims)
    x = rng.standard_normal(shape).astype(np.float32)
    q = rng.standard_normal((dims,) + shape).astype(np.float32)
    g, t = cla.empty(queue, (dims,) + shape, np.float32), cla.empty(queue, shape, np.float32)
    variation.gradient(cla.to_device(queue, x), g)
    variation.transpose(cla.to_device(queue, q), t)
    np.testing.assert_allclose(g.get(), gradient64(x.astype(np.float64), dims), atol=1e-6)
    np.testing.assert_allclose(t.get(), gradient64_transpose(q.astype(np.float64)), atol=1e-5)
    left = np.vdot(gradient64(x.astype(np.float64), dims), q)
    right = np.vdot(x.astype(np.float64), gradient64_transpose(q.astype(np.float64)))
    assert abs(left / right - 1) < 1e-12


def test_the_projectors_rows_are_slices_now(cl_device):
    """rows means one thing, a range of detector rows (pybp.reconstruct): a Projector's
    number of slices is slices=; rows=, its old name, still works and warns."""
    with pytest.warns(DeprecationWarning, match="rows: a Projector's slices are slices="):
        old = pybp.Projector(SMALL, rows=2, device=cl_device)
    assert old.volume_shape == pybp.Projector(SMALL, slices=2, device=cl_device).volume_shape
    with pytest.raises(TypeError, match="rows: give slices"):
        pybp.Projector(SMALL, slices=2, rows=2)


CHECKPOINT_CASES = {"sirt": dict(nonnegative=True), "sart": dict(subsets=5),
                    "cgls": {}, "tv": dict(weight=0.05)}


@pytest.mark.parametrize("geometry", ["parallel", "cone"])
@pytest.mark.parametrize("name", CHECKPOINT_CASES)
def test_a_checkpointed_run_interrupted_resumes_to_the_same_bits(name, geometry, cl_device,
                                                                 rng, tmp_path, monkeypatch):
    """checkpoint=: a run Ctrl-C stopped after iteration 3, called again with its
    checkpoint, continues from the state kept after iteration 2 and ends with the bits
    of one run (each method's state: SIRT's and SART's x, CGLS's scaled x, r, p, gamma
    and scale, TV's x, xbar, p, q and norm); the file is removed at the end; another
    run's state, or one past the run's iterations, is refused. An interrupted cone
    run started again from iteration 0 (issue 51)."""
    from pybp.iterative import checkpoint as kept

    monkeypatch.setattr(kept, "CHECKPOINT_SECONDS", 0.0)  # a state after every iteration
    monkeypatch.setattr(kept, "WRITE_SHARE", float("inf"))
    g = SMALL if geometry == "parallel" else CONE["coarse"]
    shape = (g.n_angles, 2, g.n_bins) if geometry == "parallel" else \
        (g.n_angles,) + g.detector_shape
    b = rng.random(shape).astype(np.float32)
    method = getattr(pybp, name)
    extra = CHECKPOINT_CASES[name]
    args = (b, g, 6) if name != "tv" else (b, g, 6, extra["weight"])
    options = {k: v for k, v in extra.items() if k != "weight"}
    want = method(*args, device=cl_device, **options)
    path = tmp_path / "state.npz"

    def stop(iteration, volume):
        if iteration == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        method(*args, device=cl_device, checkpoint=path, callback=stop, **options)
    assert path.exists()
    with np.load(path) as state:
        assert int(state["iteration"]) == 2
    other = (b * 2,) + args[1:]
    with pytest.raises(ValueError, match=r"^checkpoint: .* holds the state of another run "
                                         r"\(its data differs\)"):
        method(*other, device=cl_device, checkpoint=path, **options)
    short = args[:2] + (2,) + args[3:]
    with pytest.raises(ValueError, match=r"^checkpoint: .* after iteration 3; this run takes 2"):
        method(*short, device=cl_device, checkpoint=path, **options)
    np.testing.assert_array_equal(method(*args, device=cl_device, checkpoint=path, **options),
                                  want)
    assert not path.exists()


class PeakAllocator:
    """The methods' allocator (pybp.iterative.methods.allocator), counting the bytes of
    the arrays alive at once and their peak: a method's working set, as the device
    holds it (an array is freed when its last reference goes)."""

    def __init__(self, monkeypatch):
        import weakref

        from pybp.iterative import methods
        self.live = self.peak = 0
        made = methods.allocator

        def allocator(queue):
            allocate = made(queue)

            def counted(shape):
                array = allocate(shape)
                self.live += array.nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(array, self._freed, array.nbytes)
                return array
            return counted
        monkeypatch.setattr(methods, "allocator", allocator)

    def _freed(self, nbytes):
        self.live -= nbytes


WORKING_SET_CASES = {"sirt": {}, "sart": dict(subsets=1), "cgls": {}, "tv": dict(weight=0.1)}


@pytest.mark.parametrize("geometry", ["parallel", "cone"])
@pytest.mark.parametrize("name", WORKING_SET_CASES)
def test_each_method_holds_the_working_set_of_the_table(cl_device, rng, monkeypatch, name,
                                                        geometry):
    """pybp/iterative/table.py's working set is what the method's arrays take at their
    peak, to the byte (SART of one subset: its subset's arrays are whole sets), for
    slices and for a whole volume: the memory checks of the API, the stream and the
    command all read it."""
    from pybp.iterative import table

    if geometry == "parallel":
        geometry = pybp.ParallelGeometry(np.linspace(0, np.pi, 12, endpoint=False), 20,
                                         slice_shape=(16, 18))
        data, dims = rng.random((12, 3, 20)).astype(np.float32), 2
        volume = 3 * 16 * 18
    else:
        geometry = CONE["circular"]
        data = rng.random((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)
        volume, dims = int(np.prod(geometry.volume_shape)), 3
    counter = PeakAllocator(monkeypatch)
    getattr(pybp, name)(data, geometry, 2, device=cl_device, progress=False,
                        **WORKING_SET_CASES[name])
    volumes, sets = table.TABLE[name].working_set(dims)
    assert counter.peak == 4 * (volumes * volume + sets * data.size), (name, counter.peak)
