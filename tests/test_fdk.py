"""Cone-beam FDK (pybp.fdk), the texture family, and volumes in slabs: against the
float64 NumPy FDK (pybp/cone/reference.py), against the analytic 3-D Shepp-Logan
phantom (exact line integrals through ellipsoids), Parker's short scan against a full
one, and slabs with windows of detector rows against one pass, bit for bit."""

import numpy as np
import pytest

import pybp
from pybp import phantoms
from pybp.cone import reference, slabs
from pybp.geometry import cone_weights as weights
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry
from pybp.parallel.verify import TOLERANCES
from pybp.tune.cone import geometry

EXACT = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=8, group=(16, 8))
EXACT_RTOL = 1e-5  # relative RMS (the bound for the exact family)


def relative_rms(got, want):
    return float(np.sqrt(np.mean((np.asarray(got, np.float64) - want) ** 2) / np.mean(want ** 2)))


def correlation(a, b):
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def scan(angles, volume=(32, 40, 40), detector=(40, 96), **options):
    options = dict(dict(pixel_size=1.0, source_origin=200.0, origin_detector=100.0,
                        voxel_size=0.8), **options)
    return ConeGeometry.circular(angles, detector, volume_shape=volume, **options)


def full_circle(n=90, **options):
    return scan(np.linspace(0, 2 * np.pi, n, endpoint=False), **options)


# ---- weights (float64) ----------------------------------------------------------------------
def test_cosine_weights_and_pitch_of_a_circular_scan():
    """The textbook form: D / sqrt(D^2 + u^2 + v^2) from the detector's centre, and
    the column pitch scaled to the isocentre by SOD / SDD."""
    g = full_circle(n=3, detector=(6, 9), pixel_size=(0.7, 1.3))
    rows, cols = np.meshgrid(np.arange(6) - 2.5, np.arange(9) - 4.0, indexing="ij")
    want = 300 / np.sqrt(300 ** 2 + (cols * 1.3) ** 2 + (rows * 0.7) ** 2)
    for p in range(3):
        np.testing.assert_allclose(weights.cosine(g, p), want, rtol=1e-12)
    np.testing.assert_allclose(weights.poses(g).pitch, 1.3 * 200 / 300, rtol=1e-12)


def test_parker_weights_sum_to_one_over_each_line():
    """A ray (beta, gamma) and its conjugate (beta + pi + 2 gamma, -gamma) weigh 1
    together, the ray's own weight is 1 where no conjugate exists, and 0 at the ends."""
    delta = 0.2
    rng = np.random.default_rng(3)
    gamma = rng.uniform(-delta, delta, 2000)
    beta = rng.uniform(0, 2 * (delta - gamma))  # where a conjugate exists
    w = weights.parker(beta, gamma, delta) + weights.parker(beta + np.pi + 2 * gamma, -gamma, delta)
    np.testing.assert_allclose(w, 1.0, atol=1e-12)
    middle = rng.uniform(2 * (delta - gamma), np.pi - 2 * gamma)
    np.testing.assert_allclose(weights.parker(middle, gamma, delta), 1.0)
    assert np.all(weights.parker(np.zeros(5), np.linspace(-0.1, 0.1, 5), delta) == 0)


# ---- FDK of the analytic phantom ------------------------------------------------------------
@pytest.fixture(scope="module")
def phantom_scan():
    g = full_circle()
    return g, phantoms.shepp_logan_cone(g).astype(np.float32), phantoms.shepp_logan_cone_volume(g)


def test_fdk_reproduces_the_phantom(cl_device, phantom_scan):
    """Scale and correlation in the mid-plane and the volume; the flat regions'
    values; a flip of any axis is detected (the parts of the phantom a flip changes
    must correlate, not anti-correlate); the float64 NumPy FDK within 1e-5."""
    g, projections, truth = phantom_scan
    got = pybp.fdk(projections, g, params=EXACT, device=cl_device)
    assert relative_rms(got, reference.fdk(projections, g)) < EXACT_RTOL
    mid = g.volume_shape[0] // 2
    assert correlation(got[mid], truth[mid]) > 0.94 and correlation(got, truth) > 0.94
    scale = float((got * truth).sum() / (truth * truth).sum())
    assert 0.9 < scale < 1.05
    from scipy import ndimage
    for value in (0.2, 0.3):  # flat regions, away from their edges
        inside = ndimage.binary_erosion(np.isclose(truth, value, atol=1e-9), iterations=2)
        assert inside.sum() > 20
        assert abs(got[inside].mean() - value) < 0.01
    for axis in range(3):
        odd = lambda volume: volume - np.flip(volume, axis)  # noqa: E731
        assert correlation(odd(got), odd(truth)) > 0.8


def test_short_scan_with_parker_weights_matches_the_full_scan(cl_device, phantom_scan):
    """180 degrees plus the fan angle, either direction of rotation: within 10% of the
    full scan (relative RMS in the mid-plane); without Parker's weights over 30%."""
    g_full, projections, _ = phantom_scan
    full = pybp.fdk(projections, g_full, params=EXACT, device=cl_device)
    fan = np.abs(weights.fan_angles(g_full)).max()
    mid = g_full.volume_shape[0] // 2
    for sense in (1, -1):
        g = scan(sense * np.linspace(0, np.pi + 2 * fan, 80))
        assert weights.is_short_scan(g)
        short = phantoms.shepp_logan_cone(g).astype(np.float32)
        parker = pybp.fdk(short, g, params=EXACT, device=cl_device)
        assert relative_rms(parker[mid], full[mid]) < 0.1
        assert relative_rms(parker, reference.fdk(short, g)) < EXACT_RTOL
    plain = pybp.fdk(short, g, short_scan=False, params=EXACT, device=cl_device)
    assert relative_rms(plain[mid], full[mid]) > 0.3


def test_fdk_options_and_bad_input(cl_device, rng):
    """Every filter and both paddings against the NumPy FDK; bad options named."""
    g = full_circle(n=12, volume=(8, 24, 24), detector=(12, 64))
    projections = rng.uniform(0, 2, (12, 12, 64)).astype(np.float32)
    for name, padding in (("hann", "zero"), ("shepp-logan", "edge")):
        got = pybp.fdk(projections, g, filter=name, padding=padding, params=EXACT, device=cl_device)
        assert relative_rms(got, reference.fdk(projections, g, name, padding)) < EXACT_RTOL
    cases = [(dict(filter="box"), ValueError, "filter"), (dict(filter=None), ValueError, "filter"),
             (dict(padding="mirror"), ValueError, "padding"),
             (dict(short_scan="yes"), TypeError, "short_scan")]
    for options, error, name in cases:
        with pytest.raises(error, match=name):
            pybp.fdk(projections, g, device=cl_device, **options)
    with pytest.raises(ValueError, match="filter"):
        pybp.cone_backproject(projections, g, filter="ramp", device=cl_device)
    narrow = scan(np.linspace(0, 2.0, 12), volume=(8, 24, 24), detector=(12, 64))
    with pytest.raises(ValueError, match="short_scan.*180"):
        pybp.fdk(projections, narrow, device=cl_device)


# ---- families and trajectories --------------------------------------------------------------
def test_texture_family_within_the_texture_rule(cl_device, rng):
    g = full_circle(n=10, volume=(9, 30, 30), detector=(24, 512), pixel_size=0.3)
    projections = rng.standard_normal((10, 24, 512)).astype(np.float32)
    for filter in (None, "ramp"):
        want = reference.fdk(projections, g) if filter else reference.backproject(projections, g)
        got = pybp.ConeBackprojector(g, ConeParams(family="texture", voxels_per_item=2),
                                     filter=filter, device=cl_device)(projections)
        assert relative_rms(got, want) < TOLERANCES["texture"]


def test_a_tilted_trajectory_takes_the_per_voxel_path(cl_device, rng):
    """A helix with a tilted detector: no shared column; the exact family still
    within 1e-5 of the reference, FDK as well."""
    n = 9
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    s, c = np.sin(t), np.cos(t)
    source = np.stack([s * 150, -c * 150, np.linspace(-5, 5, n)], 1)
    centre = np.stack([-s * 80, c * 80, np.linspace(-5, 5, n)], 1)
    u = np.stack([c, s, 0.1 * np.ones(n)], 1) * 0.9
    v = np.stack([0.05 * np.ones(n), np.zeros(n), np.ones(n)], 1) * 0.9
    g = ConeGeometry.from_astra(np.concatenate([source, centre, u, v], 1), (20, 64), (10, 20, 22), 1.1)
    assert not g.column_shared() and full_circle(n=4).column_shared()
    projections = rng.standard_normal((n, 20, 64)).astype(np.float32)
    for params in (ConeParams(voxels_per_item=4, projections_per_pass=4, group=(8, 4)),):
        got = pybp.cone_backproject(projections, g, params=params, device=cl_device)
        assert relative_rms(got, reference.backproject(projections, g)) < EXACT_RTOL
        got = pybp.fdk(projections, g, params=params, short_scan=False, device=cl_device)
        assert relative_rms(got, reference.fdk(projections, g, short_scan=False)) < EXACT_RTOL


def test_three_constructors_give_one_volume(cl_device, rng):
    """circular, from_astra (its cone_vec rows) and from_matrices (scaled) for one
    scan: the same FDK within 1e-5 (matrices: 1e-4)."""
    g = full_circle(n=20, volume=(8, 24, 24), detector=(16, 64), detector_offset=(1.5, -2.0))
    poses = weights.poses(g)
    vectors = []
    for p in range(g.n_angles):  # ASTRA's rows, from the geometry's own poses
        src = g.sources[p]
        scale = np.linalg.norm(poses.u[p]) / 1.0  # the poses' scale: pixel_size is 1
        u, v, first = poses.u[p] / scale, poses.v[p] / scale, poses.first[p] / scale
        d = src + first + (64 - 1) / 2 * u + (16 - 1) / 2 * v
        vectors.append(np.concatenate([src, d, u, v]))
    a = ConeGeometry.from_astra(np.array(vectors), (16, 64), (8, 24, 24), 0.8)
    m = ConeGeometry.from_matrices(g.matrices * rng.uniform(0.5, 3, (20, 1, 1)), (16, 64),
                                   (8, 24, 24), 0.8)
    projections = rng.uniform(0, 1, (20, 16, 64)).astype(np.float32)
    want = pybp.fdk(projections, g, params=EXACT, device=cl_device)
    assert relative_rms(pybp.fdk(projections, a, params=EXACT, device=cl_device), want) < EXACT_RTOL
    assert relative_rms(pybp.fdk(projections, m, params=EXACT, device=cl_device), want) < 1e-4


# ---- slabs ----------------------------------------------------------------------------------
def _no_store(monkeypatch):
    """Kept back-projectors without a store: each slab filters its windows again."""
    from pybp.cone import store

    monkeypatch.setattr(store, "stored", lambda *args, **options: None)


@pytest.mark.parametrize("stored", [True, False], ids=["store", "no-store"])
@pytest.mark.parametrize("family", ["exact", "texture"])
def test_slabs_and_row_windows_equal_one_pass_bit_for_bit(cl_device, rng, family, tmp_path,
                                                          stored, monkeypatch):
    """A memory limit a quarter of the volume: at least 4 slabs, each reading only its
    detector rows (from the store of filtered projections, or pre-weighting and
    filtering them again), into a float64 array and a memmap, FDK and the plain
    back-projection alike; odd detector rows (the FFT's pairs at the last row). From
    the store, each slab's passes go up by DMA through the one-thread stream, and the
    fill's chunks up, through and down in place on their slots' queues."""
    from pybp.stream import pipeline

    g = full_circle(n=14, volume=(48, 40, 40), detector=(41, 64), voxel_size=0.6)
    projections = rng.standard_normal((14, 41, 64)).astype(np.float32)
    params = ConeParams(family=family, voxels_per_item=4, projections_per_pass=2, group=(8, 4))
    limit = 48 * 40 * 40 * 4 // 4
    if not stored:
        _no_store(monkeypatch)
    direct, one_thread = [], pipeline._direct
    monkeypatch.setattr(pipeline, "_direct", lambda *a: direct.append(1) or one_thread(*a))
    in_place, slot_queues = [], pipeline._in_place
    monkeypatch.setattr(pipeline, "_in_place",
                        lambda *a: in_place.append(1) or slot_queues(*a))
    for filter in ("ramp", None):
        one = pybp.ConeBackprojector(g, params, filter=filter, device=cl_device)(projections)
        with pybp.ConeBackprojector(g, params, filter=filter, memory_limit=limit,
                                    device=cl_device) as bp:
            assert len(bp.plan.slabs) >= 4
            assert bp.store_bytes == (14 * 41 * 64 * 4 if stored else 0)
            if stored and filter:  # the store holds FDK's filtered rows: the float64 rule's
                bp(projections)
                want = reference.filtered(projections.astype(np.float64), g)
                assert relative_rms(bp._fill.store.array, want) < EXACT_RTOL
            windows = [w for slab in bp.plan.slabs for w in slab.windows]
            assert max(rows for _, rows in windows) < 41  # rows left out
            out = np.lib.format.open_memmap(tmp_path / f"v{filter}.npy", "w+", np.float32,
                                            g.volume_shape)
            direct.clear()
            in_place.clear()
            bp(projections, out=out)
            assert np.array_equal(out, one)
            threads = bp._recipe.executor.threads  # (a simulator takes one step at a time)
            assert len(direct) == (len(bp.plan.slabs) if stored and threads else 0)
            assert len(in_place) == (1 if stored and threads else 0)
            wide = bp(projections.astype(np.float64), out=np.zeros(g.volume_shape))
            assert np.array_equal(wide, one)


def test_slabs_from_counts_and_their_nan_are_one_volume_or_refused(cl_device, rng):
    """Counts with flats and darks normalised by each slab's passes give the volume of
    one piece; line integrals with a NaN are refused before any slab is written."""
    g = full_circle(n=14, volume=(48, 40, 40), detector=(41, 64), voxel_size=0.6)
    line = np.abs(rng.standard_normal((14, 41, 64))).astype(np.float32) * 0.1
    counts, flats, darks = phantoms.detector_counts(line, 3)
    one = pybp.fdk(counts, g, flats=flats, darks=darks, params=EXACT, device=cl_device)
    # (the flats' and darks' means take 42 KiB of the limit)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", flats=flats, darks=darks,
                                memory_limit=2 * 48 * 40 * 40, device=cl_device) as bp:
        assert len(bp.plan.slabs) >= 4
        assert np.array_equal(bp(counts), one)
    line[3, 2, 30] = np.nan  # in the first slab's windows
    out = np.full(g.volume_shape, 7.0, np.float32)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=48 * 40 * 40,
                                device=cl_device) as bp:
        with pytest.raises(ValueError, match="^projections: 1 values are NaN or Inf"):
            bp(line, out=out)
    assert (out == 7.0).all()  # no slab written


def test_slabs_refused_at_a_nan_leave_those_above_it_whole(cl_device, rng, monkeypatch):
    """Slabs, each filtering its own windows, refuse line integrals with a NaN at the
    first slab whose windows reach it, and the slabs above it are in ``out`` whole,
    equal to the volume without the NaN; no plane from that slab on is touched."""
    _no_store(monkeypatch)
    g = full_circle(n=14, volume=(48, 40, 40), detector=(41, 64), voxel_size=0.6)
    line = np.abs(rng.standard_normal((14, 41, 64))).astype(np.float32) * 0.1
    clean = pybp.fdk(line, g, params=EXACT, device=cl_device)
    line[3, 36, 30] = np.nan
    out = np.full(g.volume_shape, 7.0)  # float64: each slab is put in after its read-back
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=48 * 40 * 40,
                                device=cl_device) as bp:
        assert len(bp.plan.slabs) >= 4
        with pytest.raises(ValueError, match="^projections: 1 values are NaN or Inf"):
            bp(line, out=out)
        written = next(slab for slab in bp.plan.slabs
                       if max(map(sum, slab.windows)) > 36).first_plane
    assert written >= 8 and np.array_equal(out[:written], clean[:written])
    assert (out[written:] == 7.0).all()


def test_slabs_whose_windows_skip_rows_equal_one_piece(cl_device, rng):
    """A detector much taller than the volume's shadow (the toy case of ``pybp bench
    --cone``): the first slabs read its top rows, the last its bottom ones, and the
    rows between none; the volume of one piece bit for bit."""
    g = geometry(32, 8, (24, 48))  # pybp bench --cone --size 32 --detector 24x48
    projections = rng.standard_normal((8, 24, 48)).astype(np.float32)
    params = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=8, group=(32, 8))
    one = pybp.ConeBackprojector(g, params, filter="ramp", device=cl_device)(projections)
    with pybp.ConeBackprojector(g, params, filter="ramp", memory_limit=32 ** 3,
                                device=cl_device) as bp:
        assert len(bp.plan.slabs) >= 4
        read = np.zeros(24, bool)
        for slab in bp.plan.slabs:
            first_row, n_rows = slab.windows[0]
            read[first_row:first_row + n_rows] = True
        assert not read.all()  # rows no slab reads
        assert np.array_equal(bp(projections), one)


def test_windows_hold_every_row_a_slab_reads(rng):
    """Every voxel centre of a slab projects inside its window, a row from its
    edges where the detector goes on; windows start and end on even rows."""
    g = scan(np.linspace(0, 2 * np.pi, 7, endpoint=False), volume=(40, 20, 20), detector=(61, 40),
             volume_offset=(1.0, 2.0, 3.0))
    for planes in (range(0, 8), range(8, 20), range(36, 40)):
        for p in range(g.n_angles):
            first, n_rows = slabs.window(g, planes, range(p, p + 1))
            rows, _, _ = reference.project_voxels(g, p, planes)
            assert first % 2 == 0 and ((first + n_rows) % 2 == 0 or first + n_rows == 61)
            assert rows.min() >= first + 1 or first == 0
            assert np.floor(rows.max()) + 1 < first + n_rows or first + n_rows == 61


def test_windows_of_passes_are_those_of_every_voxel_they_project():
    """A pass's window (:func:`slabs.windows`, every pass from one projection of the
    corners) is the rows that every voxel centre of the planes projects onto in any of
    its projections (float64, voxel by voxel), with the bilinear sample's second row
    and a row of margin each side, made even and clipped to the detector."""
    g = scan(np.linspace(0, 2 * np.pi, 11, endpoint=False), volume=(40, 20, 20), detector=(61, 40),
             volume_offset=(1.0, 2.0, 3.0))
    passes = ((0, 3), (3, 3), (6, 3), (9, 2))
    for planes in (range(0, 8), range(8, 20), range(36, 40)):
        found = slabs.windows(g, planes, passes)
        for (a, n), (first, n_rows) in zip(passes, found):
            rows = np.concatenate([reference.project_voxels(g, p, planes)[0].ravel()
                                   for p in range(a, a + n)])
            low = int(np.clip(np.floor(rows.min()) - 1, 0, 60))
            high = int(np.clip(np.floor(rows.max()) + 3, low + 1, 61))
            assert (first, first + n_rows) == (low - low % 2, min(61, high + high % 2))
            assert slabs.window(g, planes, range(a, a + n)) == (first, n_rows)


def test_several_devices_each_take_a_slab_of_their_share(cl_device, rng):
    """With several devices a volume that one device holds whole is cut into slabs of
    at most each device's share of the planes (from multiples of 16), so that every
    device has one; the volume is one device's bit for bit."""
    from pybp.cone.backproject import SlabRecipe

    g = full_circle(n=16, volume=(48, 24, 24), detector=(40, 48), voxel_size=0.8)
    params = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=4, group=(8, 4))
    alone = SlabRecipe(g, params, filter="ramp", device=cl_device)
    shared = SlabRecipe(g, params, filter="ramp", device=cl_device, devices=2)
    try:
        assert len(alone.plan.slabs) == 1
        assert [s.n_planes for s in shared.plan.slabs] == [32, 16]
    finally:
        alone.close()
        shared.close()
    projections = rng.standard_normal((16, 40, 48)).astype(np.float32)
    one = pybp.fdk(projections, g, params=params, device=cl_device, progress=False)
    two = pybp.fdk(projections, g, params=params, devices=[cl_device, cl_device],
                   progress=False)
    assert np.array_equal(one, two)


def test_no_slab_of_rows_with_a_nan_is_written_whatever_slab_comes_first(cl_device, rng,
                                                                       monkeypatch):
    """Line integrals with a NaN in rows that two slabs share: the call is refused
    before either slab is written, in whatever order the slabs come (several devices
    take them as they are free: here the last first, which holds the NaN's row). Each
    slab checks all its rows, not only those no earlier slab of the plan reads."""
    from pybp.cone import run
    from pybp.stream.slabs import Parts

    monkeypatch.setattr(run, "Parts", lambda parts, stop: Parts(parts[::-1], stop))
    g = full_circle(n=14, volume=(48, 40, 40), detector=(41, 64), voxel_size=0.6)
    line = np.abs(rng.standard_normal((14, 41, 64))).astype(np.float32) * 0.1
    out = np.full(g.volume_shape, 7.0, np.float32)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=2 * 48 * 40 * 40,
                                device=cl_device) as bp:
        last, before = bp.plan.slabs[-1], bp.plan.slabs[-2]
        top, bottom = last.windows[0][0], sum(before.windows[0])
        assert bottom - top >= 4  # rows both read in the first pass (margins at the ends)
        shared = (top + bottom) // 2
    line[0, shared, 30] = np.nan
    with pytest.raises(ValueError, match="^projections: 1 values are NaN or Inf"):
        pybp.fdk(line, g, params=EXACT, device=cl_device, out=out,
                 memory_limit=2 * 48 * 40 * 40, progress=False)
    assert (out == 7.0).all()  # (the NaN itself becomes 1 on the device: it never spreads)


def test_a_kept_store_of_filtered_projections_gives_one_piece_and_refuses_first(cl_device,
                                                                              rng):
    """A kept back-projector in slabs pre-weights and filters the projections once into
    page-locked memory, chunks of a pass in two slots (each used again) going down by DMA into
    the rows they came up from (the next chunk waits for them), and each slab takes
    its windows from there: counts with flats and darks give one piece's volume and
    count, call after call; the rows kept are those the planes project onto; line
    integrals with a NaN are refused before any slab is written."""
    g = full_circle(n=14, volume=(48, 40, 40), detector=(41, 64), voxel_size=0.6)
    line = np.abs(rng.standard_normal((14, 41, 64))).astype(np.float32) * 0.1
    counts, flats, darks = phantoms.detector_counts(line, 3)
    counts[2, 5, 7] = 0  # no transmission: floored and counted once
    params = ConeParams(family="exact", voxels_per_item=4, projections_per_pass=4, group=(8, 4))
    options = dict(filter="ramp", flats=flats, darks=darks, device=cl_device)
    with pytest.warns(RuntimeWarning, match="normalised values had no transmission") as warned:
        one = pybp.ConeBackprojector(g, params, **options)(counts)
        with pybp.ConeBackprojector(g, params, memory_limit=400_000, **options) as bp:
            fill = bp._fill
            assert len(bp.plan.slabs) >= 2 and bp.store_bytes == 14 * 41 * 64 * 4
            assert fill.memory().slots == 2 and 14 / fill.memory().chunk_slices > 2
            assert np.array_equal(bp(counts), one)
            assert np.array_equal(bp(counts), one)
    assert len({str(w.message) for w in warned}) == 1  # the same count each time
    planes = (16, 32)  # rows the other planes project onto are neither kept nor read
    part = pybp.ConeBackprojector(g, params, filter="ramp", planes=planes, device=cl_device)
    with pybp.ConeBackprojector(g, params, filter="ramp", planes=planes,
                                memory_limit=100_000, device=cl_device) as bp:
        assert bp.store_bytes and bp._fill.shape[1] < 41
        line[0, 0, 0] = np.nan  # in no window
        assert np.array_equal(bp(line), part(line))
        line[3, 20, 30] = np.nan
        out = np.full((16, 40, 40), 7.0, np.float32)
        with pytest.raises(ValueError, match="^projections: 1 values are NaN or Inf"):
            bp(line, out=out)
        assert (out == 7.0).all()
    part.close()
