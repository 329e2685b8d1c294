"""Paganin phase retrieval (pybp/stages/phase.py) on the device against the float64
NumPy Paganin of the same formula: the stage alone through the stream, chunked and in
one pass, and inside ``pybp.reconstruct``; its options checked."""

import numpy as np
import pyopencl as cl
import pytest

import pybp
from pybp.cl.device import describe
from pybp.stages.normalize import Normalize
from pybp.stages.phase import (fft_size, Paganin, PhaseRetrieval, placement, paganin_numpy,
                               wavelength)
from pybp.stream import pipeline
from pybp.stream.executor import Executor, Layout
from pybp.stream.memory import MemoryPlan
from test_reconstruct import make_scan, relative_rms

PHASE_RTOL = 1e-5  # float32 FFTs and -log on the device, against float64
# 25 keV, 0.3 m, delta/beta 200 at 3 um pixels: the filter's length is 5.1 pixels and
# its margin 77 rows, so chunks of a 200-row scan read rows beyond their own but not all.
PHASE = dict(delta_beta=200.0, energy=25.0, distance=0.3, pixel_size=3e-6)
MARGIN = 77


def intensity(n_angles, n_rows, n_bins, seed=0):
    """Transmission through a few overlapping discs, row by row, with noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:n_rows, :n_bins]
    thickness = np.zeros((n_angles, n_rows, n_bins))
    for a in range(n_angles):
        for _ in range(3):
            cy, cx, r = rng.uniform(0, n_rows), rng.uniform(0, n_bins), rng.uniform(4, 20)
            thickness[a] += np.sqrt(np.clip(r ** 2 - (y - cy) ** 2 - (x - cx) ** 2, 0, None)) / r
    return np.exp(-thickness) * (1 + 0.01 * rng.standard_normal(thickness.shape))


def retrieve(cl_device, data, phase, chunk=None):
    """``-log`` of the retrieved intensity as sinograms (rows, angles, bins), through
    the stages of a reconstruction (normalisation with the data taken as normalised,
    then phase retrieval) streamed in chunks of ``chunk`` rows (default: one pass)."""
    n_angles, n_rows, n_bins = data.shape
    device, context = describe(cl_device), cl.Context([cl_device])
    stages = [Normalize(context, device, n_angles, n_bins, np.float32, intensity=True),
              PhaseRetrieval(context, device, n_angles, n_bins, Paganin.create(phase))]
    memory = MemoryPlan.create(stages, device, n_rows, chunk_slices=chunk or n_rows)
    executor = Executor(device, context)
    executor.reserve(stages, Layout("raw", np.dtype(np.float32), (n_angles, n_bins), 1,
                                    "sinograms", (n_angles, n_bins)), memory)
    out = np.full((n_rows, n_angles, n_bins), np.nan, np.float32)
    spans = []

    def read(span):
        spans.append(span)
        return data[:, span.first:span.first + span.rows], None

    def write(start, count, slices):
        out[start:start + count] = slices

    clipped = pipeline.stream(executor, n_rows, read, write)
    executor.close()
    for stage in stages:
        stage.close()
    return out, spans, clipped


@pytest.mark.parametrize("n_angles, n_rows, n_bins", [(4, 200, 100), (5, 3, 33)])
def test_device_paganin_matches_numpy_chunked_and_whole(cl_device, n_angles, n_rows, n_bins):
    data = intensity(n_angles, n_rows, n_bins).astype(np.float32)
    want = paganin_numpy(data, Paganin.create(PHASE)).transpose(1, 0, 2)
    whole, spans, clipped = retrieve(cl_device, data, PHASE)
    assert len(spans) == 1 and clipped == 0
    assert relative_rms(whole, want) < PHASE_RTOL
    chunked, spans, _ = retrieve(cl_device, data, PHASE, chunk=16)
    assert relative_rms(chunked, want) < PHASE_RTOL
    if n_rows > 2 * MARGIN + 16:  # the margins were cut: chunks read 77 rows each side
        assert max(s.rows for s in spans) == 16 + 2 * MARGIN
        # ... and needed: with a tenth of them the seams show.
        cut, _, _ = retrieve(cl_device, data, dict(PHASE, margin=MARGIN // 10), chunk=16)
        assert relative_rms(cut, want) > 10 * PHASE_RTOL
    # The filter does something: -log of the intensity alone is far from it.
    assert relative_rms(-np.log(data).transpose(1, 0, 2), want) > 1e-2


def test_margin_is_the_filter_reach():
    """A step between two flat regions, filtered along a long row by the float64
    reference: beyond the margin from the step the values are those far from it, to
    the margin's tolerance; at half the margin they are not."""
    phase = Paganin.create(PHASE)
    assert wavelength(25.0) == pytest.approx(4.959e-11, rel=1e-3)  # 0.4959 Angstrom
    assert phase.length == pytest.approx(np.sqrt(wavelength(25.0) * 0.3 * 200 / (4 * np.pi)) / 3e-6)
    assert phase.margin_rows() == MARGIN
    step = np.ones((1, 4096, 1))
    step[:, 2048:] = 0.5
    retrieved = np.exp(-paganin_numpy(step, phase)[0, :, 0])
    change = np.abs(retrieved[2048 + np.arange(4 * MARGIN)] - 0.5) / 0.5
    assert change[MARGIN] < 1e-5 < change[MARGIN // 2]
    assert Paganin.create(dict(PHASE, margin=3)).margin_rows() == 3
    # Frames of radices 2, 3 and 5 just holding the margins; rows a multiple of 32.
    assert placement(64, 200, 11) == (90, 256, 11 + 2, 11 + (256 - 222) // 2)
    assert placement(128, 2048, 77) == (288, 2304, 77 + 3, 77 + 51)
    assert [fft_size(n) for n in (1, 7, 17, 97, 282)] == [2, 8, 18, 100, 288]


def test_phase_in_reconstruct_equals_fbp_of_the_numpy_paganin(cl_device):
    n_bins, n_angles, n_rows = 64, 32, 180
    angles, projections, flats, darks = make_scan(n_bins, n_angles, n_rows)
    normalised = (projections - darks.mean(0)) / (flats.mean(0) - darks.mean(0))
    sinograms = paganin_numpy(normalised, Paganin.create(PHASE)).transpose(1, 0, 2)
    want = pybp.fbp(np.ascontiguousarray(sinograms, np.float32), angles, device=cl_device,
                    kernel="alu")
    for chunk in (None, 16):
        got = pybp.reconstruct(projections, angles, flats, darks, device=cl_device, kernel="alu",
                               phase=PHASE, chunk_slices=chunk, progress=False)
        assert relative_rms(got, want) < PHASE_RTOL


@pytest.mark.parametrize("phase, message", [
    (dict(PHASE, distance=-0.3), "phase: distance must be a positive, finite number"),
    (dict(PHASE, delta_beta=0), "phase: delta_beta must be a positive, finite number"),
    (dict(PHASE, energy=float("nan")), "phase: energy must be a positive, finite number"),
    ({k: v for k, v in PHASE.items() if k != "pixel_size"}, "phase: missing pixel_size"),
    (dict(PHASE, wavelength=1e-10), "phase: unknown wavelength"),
    (dict(PHASE, margin=-1), "phase: margin must be a whole number"),
    ("paganin", "phase: expected a dict"),
])
def test_bad_phase_options_name_the_argument(cl_device, phase, message):
    angles, projections, flats, darks = make_scan(16, 8, 2)
    with pytest.raises((ValueError, TypeError), match=message):
        pybp.reconstruct(projections, angles, flats, darks, device=cl_device, phase=phase)


def test_phase_needs_transmission(cl_device):
    angles, projections, flats, darks = make_scan(16, 8, 2)
    with pytest.raises(ValueError, match="phase: retrieval works on the transmission"):
        pybp.reconstruct(projections, angles, device=cl_device, phase=PHASE, log=False,
                         progress=False)
    with pytest.raises(TypeError, match="phase"):
        pybp.Backprojector(16, angles, device=cl_device, phase=PHASE)
