"""What users of ASTRA and TIGRE reach for first (issue 51's audit): a Projector used as
ASTRA's ``OpTomo``, TIGRE's arguments, and errors that say what to do instead of
failing inside."""

import sys

import numpy as np
import pyopencl.array as cla
import pytest
from test_files import make_input, run, scan  # noqa: F401
from test_files_errors import assert_one_line

import pybp

GEOMETRY = pybp.ParallelGeometry(np.linspace(0, np.pi, 20, endpoint=False), 40,
                                 slice_shape=(30, 36))


def test_a_projector_is_used_as_astras_optomo(cl_device, rng):
    """``P @ x``, ``P * x``, ``P.T @ y`` and ``P.T * y`` as OpTomo's ``W * x`` and
    ``W.T * y``, shaped or flattened; ``with`` and ``close()`` release it."""
    x = rng.standard_normal((30, 36)).astype(np.float32)
    y = rng.standard_normal((20, 40)).astype(np.float32)
    with pybp.Projector(GEOMETRY, device=cl_device) as P:
        ax, aty = P.forward(x), P.backward(y)
        for got in (P @ x, P * x):
            np.testing.assert_array_equal(got, ax)
        np.testing.assert_array_equal(P @ x.ravel(), ax.ravel())
        for got in (P.T @ y, P.T * y):
            np.testing.assert_array_equal(got, aty)
        np.testing.assert_array_equal(P.T * y.ravel(), aty.ravel())
        assert P.T.T is P and P.T.shape == P.shape[::-1] == (36 * 30, 20 * 40)
        on_device = P @ cla.to_device(P.queue, x)
        np.testing.assert_array_equal(on_device.get(), ax)
    with pytest.raises(RuntimeError, match="Projector: closed"):
        P @ x


def test_a_projector_refuses_nan_and_says_to_pass_slices(cl_device):
    P = pybp.Projector(GEOMETRY, device=cl_device)
    with pytest.raises(ValueError, match=r"volume: expected shape \(1, 30, 36\), got "
                                         r"\(8, 30, 36\): 8 slices, where this Projector "
                                         "takes 1; make one with slices=8"):
        P.forward(np.zeros((8, 30, 36), np.float32))
    with pytest.raises(ValueError, match="projections: .*: 3 slices, .* slices=3"):
        P.backward(np.zeros((20, 3, 40), np.float32))
    bad = np.zeros((30, 36), np.float32)
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="volume: contains NaN or Inf"):
        P.forward(bad)
    with pytest.raises(ValueError, match="projections: contains NaN or Inf"):
        P.backward(np.full((20, 40), np.inf, np.float32))


def test_tigres_arguments_get_pybps_names(cl_device):
    sinogram = np.ones((20, 40), np.float32)
    for method in (pybp.sirt, pybp.sart, pybp.cgls):
        with pytest.raises(TypeError, match="iterations: got 20 numbers; the angles\\? "
                                            f"pybp's geometry holds them: pybp.{method.__name__}"):
            method(sinogram, GEOMETRY, GEOMETRY.angles, 10, device=cl_device)
        with pytest.raises(TypeError, match="niter: TIGRE's or ASTRA's name; "
                                            f"pybp.{method.__name__} takes iterations"):
            method(sinogram, GEOMETRY, niter=10, device=cl_device)
    with pytest.raises(TypeError, match="lmbda: .* takes relaxation"):
        pybp.sirt(sinogram, GEOMETRY, 2, lmbda=1.0, device=cl_device)


def test_the_methods_take_pyopencl_arrays(cl_device, rng):
    """As the Projector takes them (it raised "setting an array element with a
    sequence"): the same volume as from the NumPy array."""
    sinogram = rng.random((20, 40), np.float32)
    want = pybp.sirt(sinogram, GEOMETRY, 3, device=cl_device)
    queue = pybp.Projector(GEOMETRY, device=cl_device).queue
    got = pybp.sirt(cla.to_device(queue, sinogram), GEOMETRY, 3, device=cl_device)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name, value, hint", [
    ("x0", np.zeros((30, 36)), "each chunk's method starts at zero"),
    ("mask", np.ones((30, 36)), "take a mask; the stream takes circle=True"),
    ("callback", print, "the stream shows progress"),
    ("niter", 10, "TIGRE's name; pybp's is iterations"),
    ("colour", "red", "its docstring lists them"),
])
def test_reconstruct_names_options_it_does_not_take(cl_device, name, value, hint):
    projections = np.ones((20, 2, 40), np.float32)
    with pytest.raises(TypeError, match=f"{name}: not an option of pybp.reconstruct; .*{hint}"):
        pybp.reconstruct(projections, GEOMETRY.angles, method="sirt", iterations=2, log=False,
                         device=cl_device, **{name: value})


def test_fdk_names_the_iterative_methods():
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), (8, 16), 1.0,
                                   50.0, 20.0, (4, 8, 8), 1.0)
    with pytest.raises(TypeError, match="method: pybp.fdk is FDK; .* pybp.sirt"):
        pybp.fdk(np.zeros((8, 8, 16), np.float32), g, method="sirt")


def test_resume_with_another_method_names_the_method(scan, tmp_path, cl_device,  # noqa: F811
                                                     capsys):
    """It named the device (--device), whose kernels the other method changes too."""
    out = tmp_path / "out"
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", repr(scan["center"]), "--iterations", "2", "--device", cl_device.name,
        "--quiet", "-o", str(out)]
    assert run(argv + ["--method", "sirt"])[0] == 0
    (out / "slice_00002.tif").unlink()
    line = assert_one_line(capsys, run(argv + ["--method", "cgls", "--resume"])[0], "resume:",
                           "method='sirt'", "'cgls'")
    assert "--device" not in line


def test_cone_memory_errors_give_cone_advice(cl_device, monkeypatch):
    """A cone-beam pair that does not fit is not told to take fewer rows (it takes
    none), and the command's --memory-limit holds for its iterative methods (it was
    ignored)."""
    from pybp.api import projector

    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), (8, 16), 1.0,
                                   50.0, 20.0, (4, 8, 8), 1.0)
    monkeypatch.setattr(projector.memory.Budget, "of", classmethod(
        lambda cls, device, memory_limit=None: cls(2 ** 10, 2 ** 10)))
    with pytest.raises(MemoryError, match="it lends .*; make the volume or the scan smaller, "
                                          "or take a device with more memory") as caught:
        pybp.Projector(g, device=cl_device)
    assert "rows" not in str(caught.value)


def test_the_cone_command_keeps_its_memory_limit_for_methods(tmp_path, cl_device, capsys):
    from pybp.cli import commands as cli

    folder = tmp_path / "cone"
    folder.mkdir()
    assert cli.main(["demo", "--cone", "--size", "16", "--angles", "24", "--write-scan",
                     str(folder / "scan.h5")]) == 0
    capsys.readouterr()
    out = tmp_path / "volume"
    argv = ["reconstruct", str(folder / "scan.h5"), "-o", str(out), "--geometry",
            str(folder / "scan-cone.json"), "--method", "sirt", "--iterations", "2",
            "--device", cl_device.name, "--quiet", "--memory-limit", "16K"]
    line = assert_one_line(capsys, cli.main(argv), "--method sirt:",
                           "more than the 16.0 KiB --memory-limit allows")
    assert "rows" not in line
    assert not out.exists()


def test_subsets_beyond_the_angles_are_refused_before_the_centre_search(
        scan, tmp_path, cl_device, capsys):  # noqa: F811
    """One line naming --subsets (it named subsets:, after the centre was searched for)."""
    argv = make_input("dxchange", scan, tmp_path) + [
        "--center", "auto", "--method", "sart", "--iterations", "2", "--subsets", "10000",
        "--device", cl_device.name, "-o", str(tmp_path / "out")]
    code = run(argv)[0]
    printed = capsys.readouterr()
    assert code == 2 and "center:" not in printed.out, printed.out
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and "--subsets: at most one per angle" in lines[0], printed.err
    assert not (tmp_path / "out").exists()


def test_a_centre_sweep_with_a_method_shows_the_method(scan, tmp_path, cl_device,  # noqa: F811
                                                       capsys):
    """--center-sweep with --method gave FBP images: now the method's, as the volume."""
    argv = make_input("dxchange", scan, tmp_path) + ["--center-sweep", "50:51:1", "--device",
                                                     cl_device.name]
    code, printed = run(argv + ["-o", str(tmp_path / "fbp")], capsys)
    assert code == 0 and "(FBP)" in printed.out, printed.err
    code, printed = run(argv + ["-o", str(tmp_path / "sirt"), "--method", "sirt",
                                "--iterations", "5"], capsys)
    assert code == 0 and "(SIRT, 5 iterations)" in printed.out, printed.err
    for name in ("center_50.00.png", "center_51.00.png"):
        assert (tmp_path / "sirt" / name).read_bytes() != (tmp_path / "fbp" / name).read_bytes()


def test_scipys_solvers_run_on_the_linear_operator_without_warnings(cl_device, rng):
    """lsmr on the float32 operator warned 'overflow encountered in cast' (its 1e100
    start cast to float32): the operator is float64 to scipy, float32 on the device."""
    import warnings

    from scipy.sparse.linalg import lsmr, lsqr

    A = pybp.Projector(GEOMETRY, device=cl_device).as_linear_operator()
    b = rng.random(A.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x_lsmr = lsmr(A, b, maxiter=5)[0]
        x_lsqr = lsqr(A, b, iter_lim=5)[0]
    assert A.dtype == np.float64 and x_lsmr.dtype == np.float64
    for x in (x_lsmr, x_lsqr):  # both fit the data better than nothing does
        assert np.linalg.norm(A @ x - b) < 0.5 * np.linalg.norm(b)


def test_an_interrupted_method_ends_its_progress_line(cl_device, monkeypatch, capsys):
    """Ctrl-C's message landed on the progress line of cone beam's command (its method's
    line had no end): the method ends it, however it stops."""
    from pybp.api import iterative
    from pybp.stream.progress import Progress

    monkeypatch.setattr(iterative, "Progress", lambda *args, **kwargs: Progress(
        *args, **dict(kwargs, delay=0.0, stream=sys.stderr)))

    def stop(iteration, volume):
        if iteration == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pybp.sirt(np.ones((20, 40), np.float32), GEOMETRY, 5, progress=True, callback=stop,
                  device=cl_device)
    err = capsys.readouterr().err
    assert "/5 iterations" in err and err.endswith("\n"), repr(err)


@pytest.mark.parametrize("scale", [1e18, 1e-25])
def test_cgls_of_any_scale(cl_device, rng, scale):
    """CGLS of data times 1e18 was all NaN (its squared norms overflowed float32), of
    1e-25 wrong (they were 0): now the same volume times that scale. A power of two
    scales every step exactly: the same bits, times it."""
    b = rng.random((20, 3, 40), np.float32)
    want = pybp.cgls(b, GEOMETRY, 5, device=cl_device)
    got = pybp.cgls((b * scale).astype(np.float32), GEOMETRY, 5, device=cl_device)
    assert np.isfinite(got).all()
    # (the data's own rounding to float32, carried by the conjugate directions: 3e-5
    # and 2e-5 measured; tests/test_iterative.py's CGLS_RTOL)
    assert np.linalg.norm(got / scale - want) < 1e-4 * np.linalg.norm(want)
    np.testing.assert_array_equal(pybp.cgls(b * 2.0 ** 40, GEOMETRY, 5, device=cl_device),
                                  want * 2.0 ** 40)
