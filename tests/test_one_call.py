"""One call for every geometry and method (issue 51, part 3): ``pybp.reconstruct``
takes a ParallelGeometry or a ConeGeometry as well as angles, with flats, darks and the
same options for FDK, FBP and the iterative methods; the methods take ``out`` and
``memory_limit``. Each volume is checked against an outside answer (the analytic disc or
ball's value) and against the call it stands for."""

import numpy as np
import pytest
from test_units import MEAN_RTOL, analytic_scan, cone_ball_case, inner_mean

import pybp

I0 = 4000.0  # the flats' counts


def counts_of(line_integrals, rng_seed=0):
    """Counts of ``line_integrals`` under flats of I0 and darks of 100, and the frames
    ``(flats, darks)`` (two each)."""
    shape = line_integrals.shape[1:]
    flats = np.full((2,) + shape, I0 + 100, np.float32)
    darks = np.full((2,) + shape, 100, np.float32)
    counts = (I0 * np.exp(-line_integrals.astype(np.float64)) + 100).astype(np.float32)
    return counts, flats, darks


def test_reconstruct_takes_a_parallel_geometry(cl_device):
    """reconstruct(counts, ParallelGeometry, flats, darks) is reconstruct of its angles
    with its sizes as options, bit for bit, FBP and SIRT; both in the data's units."""
    g, sinogram, value = analytic_scan(0.25, 0.5)
    counts, flats, darks = counts_of(np.repeat(sinogram[:, None, :], 2, axis=1))
    common = dict(device=cl_device, progress=False)
    sizes = dict(pixel_size=0.25, voxel_size=0.5, slice_shape=g.slice_shape)
    for method in (dict(), dict(method="sirt", iterations=40)):
        ours = pybp.reconstruct(counts, g, flats, darks, **method, **common)
        angles = pybp.reconstruct(counts, g.angles, flats, darks, **method, **sizes, **common)
        np.testing.assert_array_equal(ours, angles)
        assert abs(inner_mean(ours, g) / value - 1) < MEAN_RTOL, (method, inner_mean(ours, g))
    with pybp.Reconstructor(g, device=cl_device) as made:
        np.testing.assert_array_equal(made.reconstruct(counts, flats, darks, progress=False),
                                      pybp.reconstruct(counts, g, flats, darks, **common))
    # the name before geometries still works
    np.testing.assert_array_equal(
        pybp.reconstruct(counts, angles=g.angles, flats=flats, darks=darks, **sizes, **common),
        pybp.reconstruct(counts, g, flats, darks, **common))




def test_reconstruct_takes_a_cone_geometry(cl_device):
    """reconstruct(counts, ConeGeometry, flats, darks) is pybp.fdk of the same, bit for
    bit; transmissions (no flats) are taken -log of, as parallel beam's are, and
    log=False takes line integrals; SIRT and CGLS of the counts are the methods of their
    line integrals; every volume's mean inside the ball is its value within 2%."""
    g, data, value, inside = cone_ball_case()
    counts, flats, darks = counts_of(data)
    common = dict(device=cl_device, progress=False)
    fdk = pybp.reconstruct(counts, g, flats, darks, **common)
    np.testing.assert_array_equal(fdk, pybp.fdk(counts, g, flats=flats, darks=darks, **common))
    line = pybp.fdk(data, g, **common)
    np.testing.assert_array_equal(pybp.reconstruct(data, g, log=False, **common), line)
    transmissions = np.exp(-data.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(pybp.reconstruct(transmissions, g, **common), line, rtol=0,
                               atol=1e-4 * np.abs(line).max())
    means = {"fdk": fdk[inside].mean()}
    integrals = -np.log((counts - 100.0) / I0).astype(np.float32)
    for name, iterations in (("sirt", 40), ("cgls", 15)):
        out = np.zeros(g.volume_shape, np.float32)
        got = pybp.reconstruct(counts, g, flats, darks, method=name, iterations=iterations,
                               out=out, **common)
        assert got is out
        want = getattr(pybp, name)(integrals, g, iterations, device=cl_device)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
        means[name] = got[inside].mean()
    for name, mean in means.items():
        assert abs(mean / value - 1) < MEAN_RTOL, (name, mean)


def test_fdk_takes_log():
    """pybp.fdk's log: default where flats are given; True of transmissions."""
    g, data, _, _ = cone_ball_case()
    transmissions = np.exp(-data.astype(np.float64)).astype(np.float32)
    line = pybp.fdk(data, g, progress=False)
    np.testing.assert_allclose(pybp.fdk(transmissions, g, log=True, progress=False), line,
                               rtol=0, atol=1e-4 * np.abs(line).max())


def test_one_call_refuses_what_a_geometry_does_not_take(cl_device):
    g, data, _, _ = cone_ball_case()
    p, sinogram, _ = analytic_scan(0.5, 0.5)
    stack = np.repeat(sinogram[:, None, :], 2, axis=1)
    bad = [
        (dict(projections=data, geometry=g, center=3.0), ValueError,
         r"^center: a ConeGeometry holds its detector"),
        (dict(projections=data, geometry=g, rows=(0, 2)), ValueError,
         r"^rows: cone beam reconstructs the geometry's volume"),
        (dict(projections=data, geometry=g, chunk_slices=4), ValueError, r"^chunk_slices: "),
        (dict(projections=data, geometry=g, angle_unit="deg"), ValueError, r"^angle_unit: "),
        (dict(projections=data, geometry=g, method="sirt", iterations=2, devices="all"),
         ValueError, r"^devices: give device or devices, not both"),
        (dict(projections=data, geometry=g, method="sirt", iterations=2, filter="hann"),
         ValueError, r"^filter: FDK's window; sirt takes none"),
        (dict(projections=data, geometry=g, iterations=2), ValueError,
         r"^iterations: an option of the iterative methods; FDK takes none"),
        (dict(projections=data, geometry=g, x0=data), ValueError,
         r"^x0: an option of the iterative methods; FDK takes none"),
        (dict(projections=data, geometry=g, nonnegative=True), ValueError,
         r"^nonnegative: an option of the iterative methods; FDK takes none"),
        (dict(projections=data, geometry=g, method="sirt", iterations=2, x0=data), TypeError,
         r"^x0: not an option of pybp.reconstruct's cone-beam sirt; each chunk"),
        (dict(projections=data, geometry=g, method="sirt", iterations=2, weight=1.0),
         ValueError, r"^weight: not an option of sirt"),
        (dict(projections=data, geometry=g, method="art", iterations=2), ValueError,
         r"^method: "),
        (dict(projections=stack, geometry=p, center=3.0), ValueError,
         r"^center: the geometry holds the axis"),
        (dict(projections=stack, geometry=p, angle_unit="deg"), ValueError,
         r"^angle_unit: a ParallelGeometry's angles are radians"),
        (dict(projections=stack, geometry=p, pixel_size=2.0), ValueError,
         r"^pixel_size: the geometry holds it"),
        (dict(projections=stack[:, :, 1:], geometry=p), ValueError,
         r"^projections: expected 90 angles x rows x 68 bins \(the geometry's\)"),
        (dict(projections=stack), TypeError, r"^geometry: give the scan's geometry"),
    ]
    for kwargs, error, message in bad:
        with pytest.raises(error, match=message):
            pybp.reconstruct(device=cl_device, progress=False, log=False, **kwargs)
    for made in (lambda: pybp.Reconstructor(p, center="auto"),
                 lambda: pybp.Reconstructor(p.n_bins, p.angles, center="auto")):
        with pytest.raises(ValueError, match=r"^center: 'auto' finds the axis from the data"):
            made()
    with pytest.raises(ValueError, match=r"^angles: the geometry holds them"):
        pybp.Reconstructor(p, p.angles)


def test_the_methods_take_out_and_memory_limit(cl_device):
    g, sinogram, _ = analytic_scan(0.5, 0.5)
    out = np.full(g.slice_shape, np.nan, np.float32)
    got = pybp.sirt(sinogram, g, 3, device=cl_device, out=out)
    assert got is out
    np.testing.assert_array_equal(out, pybp.sirt(sinogram, g, 3, device=cl_device))
    with pytest.raises(ValueError, match=r"^out: expected shape \(64, 64\)"):
        pybp.cgls(sinogram, g, 3, device=cl_device, out=np.zeros((3, 3), np.float32))
    with pytest.raises(MemoryError, match=r"^tv: .* memory_limit allows"):
        pybp.tv(sinogram, g, 3, 1e-3, device=cl_device, memory_limit=4096)


def test_the_methods_say_where_the_streams_options_go(cl_device):
    """pybp.sirt and the others are calls of line integrals: a client, rows, flats,
    darks, rings and phase are pybp.reconstruct's, and the error says to call it (it was
    Python's "unexpected keyword argument"); parallel beam's devices too."""
    g, sinogram, _ = analytic_scan(0.5, 0.5)
    with pytest.raises(TypeError, match=r"^devices: pybp.cgls of parallel beam runs on one "
                                        r"device; pybp.reconstruct\(projections, geometry, "
                                        r"method='cgls', iterations=\.\.\., devices=\.\.\.\)"):
        pybp.cgls(sinogram, g, 3, devices=[cl_device])
    for name in ("client", "rows", "flats", "rings"):
        with pytest.raises(TypeError, match=rf"^{name}: pybp.cgls takes line "
                                            rf"integrals; pybp.reconstruct\(projections, "
                                            rf"geometry, method='cgls', .*{name}=\.\.\.\)"):
            pybp.cgls(sinogram, g, 3, device=cl_device, **{name: None})
