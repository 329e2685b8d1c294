"""Cone beam's iterative methods on several devices (pybp/iterative/team.py): the
pair's runs of projections and planes, the vector steps on spans, and each method on
two or three devices bit for bit with one, in one process and on two PoCL devices."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from conftest import two_pocl_devices
from test_iterative import CONE, laminography

import pybp
from pybp.cl.device import describe, open_device
from pybp.iterative import team
from pybp.iterative.vectors import Vectors

# 32 planes (4 columns of 8) and 40 projections: two devices take 16 planes each, three
# 8, 16 and 8, so that each device's runs start inside the volume and the images; the
# detector sees every plane
SMALL = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 40, endpoint=False), (56, 48),
                                   pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                                   volume_shape=(32, 24, 24), voxel_size=1.0)
METHODS = {"sirt": dict(nonnegative=True), "sart": dict(subsets=5), "cgls": {},
           "tv": dict(weight=0.02)}


def scan():
    """Projections of a random volume: each device's first and last planes differ from
    their neighbours' (the phantom's outer planes are empty, and TV's gradient there
    zero, which hid a device's missing plane before its run)."""
    volume = np.random.default_rng(7).random(SMALL.volume_shape).astype(np.float32)
    with pybp.Projector(SMALL) as projector:
        return projector.forward(volume)


def test_runs_share_units_out_from_aligned_firsts():
    assert team.runs(32, 2, 8) == [(0, 16), (16, 32)]
    assert team.runs(32, 3, 8) == [(0, 8), (8, 24), (24, 32)]
    assert team.runs(40, 3) == [(0, 13), (13, 27), (27, 40)]
    assert team.runs(5, 3, 8) == [(0, 0), (0, 0), (0, 5)]  # fewer columns than devices
    for count, members, align in ((100, 4, 8), (7, 2, 1), (1, 3, 1)):
        got = team.runs(count, members, align)
        assert got[0][0] == 0 and got[-1][1] == count
        assert all(a % align == 0 or a == b for a, b in got)
        assert all(got[d][1] == got[d + 1][0] for d in range(members - 1))


def test_vector_steps_take_their_span_alone(cl_device, rng):
    """Each step on elements [first, stop) changes those alone, with float64's values;
    dots and peaks of a span's problems are those of the same elements whole."""
    cl_dev, context, _ = open_device(cl_device)
    queue = cl.CommandQueue(context)
    vectors = Vectors(context, queue, describe(cl_dev))
    n, span = 5000, (1234, 4321)
    x, y, w = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    inside = np.zeros(n, bool)
    inside[span[0]:span[1]] = True

    def run(step, *arrays):
        device = [cla.to_device(queue, a) for a in arrays]
        step(*device)
        return device[0].get()

    cases = {
        "combine": (lambda o, a, b: vectors.combine(o, 2.0, a, -0.5, b, span=span),
                    (w, x, y), 2.0 * x.astype(np.float64) - 0.5 * y),
        "fill": (lambda o: vectors.fill(o, 3.0, span=span), (w,), np.full(n, 3.0)),
        "residual": (lambda r, b, v: vectors.residual(b, r, v, span=span), (w, x, y),
                     (x.astype(np.float64) - w) * y),
        "scale": (lambda a, b: vectors.scale(a, b, span=span), (w, x), w.astype(np.float64) * x),
    }
    for name, (step, arrays, want) in cases.items():
        got = run(step, *(a.copy() for a in arrays))
        np.testing.assert_array_equal(got[~inside], arrays[0][~inside], err_msg=name)
        np.testing.assert_allclose(got[inside], want[inside], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    block = 87  # (span: 35 runs of 87 elements from 1234 on, 3045 of them)
    units = (span[1] - span[0]) // block
    span = (span[0], span[0] + units * block)
    xs, ys = cla.to_device(queue, x), cla.to_device(queue, y)
    dots = vectors.dots(xs, ys, block=block, problems=units, span=span)
    want = (x[span[0]:span[1]].astype(np.float64) * y[span[0]:span[1]]).reshape(units, block)
    np.testing.assert_allclose(dots, want.sum(axis=1), rtol=1e-5, atol=1e-5)
    for k in (0, units - 1):  # a run alone is the same sum, bit for bit
        one = vectors.dots(xs, ys, block=block, problems=1,
                           span=(span[0] + k * block, span[0] + (k + 1) * block))
        assert one[0] == dots[k]
    peaks = vectors.peaks(xs, block=block, problems=units, span=span)
    np.testing.assert_array_equal(peaks, np.abs(x[span[0]:span[1]]).reshape(units, block)
                                  .max(axis=1))


@pytest.mark.parametrize("name", ["coarse", "vectors", "laminography"])
def test_the_pair_on_runs_gives_the_bits_of_the_whole(cl_device, rng, name):
    """A on runs of projections and A^T on runs of planes (from multiples of its
    column) give each image and plane the bits of one call of all; A^T from another
    plane is refused."""
    geometry = laminography(0.0) if name == "laminography" else CONE[name]
    projector = pybp.Projector(geometry, device=cl_device)
    pair, queue = projector.pair, projector.queue
    x = rng.standard_normal(projector.volume_shape).astype(np.float32)
    y = rng.standard_normal(projector.projection_shape).astype(np.float32)
    want = projector.forward(x), projector.backward(y)
    xs, ys = cla.to_device(queue, x), cla.to_device(queue, y)
    forward, backward = cla.zeros_like(ys), cla.zeros_like(xs)
    n_angles, nz = projector.projection_shape[0], projector.volume_shape[0]
    for run in team.runs(n_angles, 3):
        pair.forward(xs.data, forward.data, angles=run)
    for run in team.runs(nz, 2, pair.column):
        pair.backward(ys.data, backward.data, planes=run)
    np.testing.assert_array_equal(forward.get(), want[0])
    np.testing.assert_array_equal(backward.get(), want[1])
    if nz > 1:
        with pytest.raises(ValueError, match="planes: the first, 1, is not a multiple"):
            pair.backward(ys.data, backward.data, planes=(1, nz))


@pytest.mark.parametrize("name", METHODS)
def test_each_method_on_two_and_three_devices_gives_one_devices_bits(cl_device, name):
    """SIRT (nonnegative, a mask), SART, CGLS and TV of a cone-beam scan on a team of two
    and of three (the same device named again: each its own queue and copies), bit for
    bit one device's."""
    p = scan()
    method = getattr(pybp, name)
    options = dict(METHODS[name], progress=False)
    if name == "sirt":
        options["mask"] = np.ones(SMALL.volume_shape[1:], bool)
        options["mask"][:2] = False
    one = method(p, SMALL, 3, device=cl_device, **options)
    assert np.abs(one).max() > 0.05
    for members in (2, 3):
        got = method(p, SMALL, 3, devices=[cl_device] * members, **options)
        np.testing.assert_array_equal(got, one, err_msg=f"{name} on {members}")


def test_reconstruct_takes_devices_for_cone_iterations(cl_device):
    """pybp.reconstruct(method=, devices=) of counts: the line integrals and CGLS on
    two devices, the bits of one."""
    p = scan()
    counts = (1000 * np.exp(-p)).astype(np.float32)
    flats = np.full(SMALL.detector_shape, 1000, np.float32)
    one = pybp.reconstruct(counts, SMALL, flats=flats, method="cgls", iterations=3,
                           device=cl_device, progress=False)
    two = pybp.reconstruct(counts, SMALL, flats=flats, method="cgls", iterations=3,
                           devices=[cl_device, cl_device], progress=False)
    np.testing.assert_array_equal(two, one)
    with pytest.raises(TypeError, match="^devices: pybp.sirt of parallel beam runs on one"):
        pybp.sirt(np.zeros((8, 2, 16), np.float32), pybp.ParallelGeometry(
            np.linspace(0, np.pi, 8, endpoint=False), 16), 2, devices=[cl_device])


def test_two_pocl_devices_give_one_devices_iterations_bit_for_bit(tmp_path):
    """POCL_DEVICES="pthread pthread": two OpenCL devices, each its own context, share
    each method's iterations; every volume has the bits of the first device alone."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np, pyopencl as cl, pybp
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_iterative_team import SMALL as g, scan
        p = scan()
        platforms = [pl for pl in cl.get_platforms() if "Portable" in pl.name]
        devices = platforms[0].get_devices() if platforms else []
        if len(devices) != 2:
            sys.exit(f"expected two PoCL devices, found {{len(devices)}}")
        for name, options in {METHODS!r}.items():
            method = getattr(pybp, name)
            one = method(p, g, 3, device=devices[0], progress=False, **options)
            two = method(p, g, 3, devices=devices, progress=False, **options)
            print(name, np.array_equal(one, two))
    """)
    env = two_pocl_devices(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [word for name in METHODS for word in (name, "True")]


def test_a_team_whose_host_memory_would_not_fit_is_refused(cl_device, monkeypatch):
    """Sharing the iterations out takes page-locked host memory of the larger of a
    volume and the projections: refused, naming devices, where that is more than the
    machine's share (one device takes none)."""
    from pybp import checks

    p = scan()
    monkeypatch.setattr(checks, "host_memory", lambda: 4 * p.size)  # a share of half the data
    with pytest.raises(ValueError, match=r"^devices: sharing the iterations out takes .* GiB "
                                         r"of page-locked host memory"):
        pybp.sirt(p, SMALL, 1, devices=[cl_device, cl_device], progress=False)
    assert pybp.sirt(p, SMALL, 1, devices=[cl_device], progress=False).shape == \
        SMALL.volume_shape


@pytest.mark.parametrize("name", ["cgls", "tv"])
def test_a_teams_run_interrupted_resumes_to_one_devices_bits(cl_device, tmp_path, monkeypatch,
                                                             name):
    """checkpoint= on two devices: Ctrl-C after iteration 3, the call again continues
    from the state kept (each vector put whole on every device; CGLS's and TV's carry
    the most) and ends with one device's bits."""
    from pybp.iterative import checkpoint as kept

    monkeypatch.setattr(kept, "CHECKPOINT_SECONDS", 0.0)  # a state after every iteration
    monkeypatch.setattr(kept, "WRITE_SHARE", float("inf"))
    p, method, options = scan(), getattr(pybp, name), dict(METHODS[name], progress=False)
    want = method(p, SMALL, 6, device=cl_device, **options)
    path, pair = tmp_path / "state.npz", [cl_device, cl_device]

    def stop(iteration, volume):
        if iteration == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        method(p, SMALL, 6, devices=pair, checkpoint=path, callback=stop, **options)
    with np.load(path) as state:
        assert int(state["iteration"]) == 2
    np.testing.assert_array_equal(method(p, SMALL, 6, devices=pair, checkpoint=path, **options),
                                  want)
    assert not path.exists()
