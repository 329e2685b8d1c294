"""Every kernel family once at a tiny size, for tests/test_oclgrind.py to run under
Oclgrind: ``python oclgrind_cases.py images|buffers``. Prints one ``RESULT`` line per
case (its parameter set and verdict by the one rule); Oclgrind's diagnostics go to
standard error.

``images``: texture and ALU kernels on images and buffers, the filters, normalisation,
half scaling and the circle mask. ``buffers``: the same with every sinogram in a buffer
and the image-format probe off, for Oclgrind's uninitialised-value checker, which
reports image reads of defined data as undefined (docs/portability.md).
"""

import sys

import numpy as np
import pyopencl.characterize

import pybp
from pybp import phantoms
from pybp.cone import project, reference as cone_reference
from pybp.parallel import reference, verify
from pybp.cl import device as cl_devices
from pybp.parallel import prepare
from pybp.geometry.parallel import ParallelGeometry

_nv = pyopencl.characterize.nv_compute_capability


def _nv_only(device):
    # pyopencl asks every device for NVIDIA's compute capability, without checking the
    # extension; Oclgrind's API check reports each such query (pyopencl's, not pybp's).
    if "cl_nv_device_attribute_query" not in device.extensions:
        return None
    return _nv(device)


pyopencl.characterize.nv_compute_capability = _nv_only

SMALL_ALU = dict(square=32, items=128, items_per_row=8, cached_projections=8)
# kernel, overrides, slices per pass, storage, interpolation; sources that need an
# image (the hybrid mode) only in the images run.
BACKPROJECTION = [
    ("standard", {}, 1, "float", "linear"),
    ("locality", {}, 2, "float", "linear"),
    ("multiproj", dict(constants="constant"), 4, "float", "linear"),
    ("multiproj", dict(constants="local"), 1, "half", "nearest"),
    ("alu", dict(SMALL_ALU), 1, "float", "linear"),
    ("alu", dict(SMALL_ALU, cache="plain", rounding="fixed"), 2, "float", "linear"),
    ("alu", dict(SMALL_ALU, rounding="float"), 4, "half", "nearest"),
    ("alu", dict(SMALL_ALU, offset_cache="hx"), 1, "float", "linear"),
    ("alu", dict(SMALL_ALU, cache="plain", cache_storage="half"), 1, "half", "linear"),
    ("alu", dict(SMALL_ALU, texture_groups=4), 1, "float", "linear"),
]
N_BINS, N_ANGLES, SHAPE = 24, 20, (20, 36)


def case(name):
    """Mark where a case starts, on both streams: Oclgrind's reports follow on stderr.
    Each case has a context of its own, as before pybp kept one per device."""
    cl_devices._CONTEXTS.clear()
    print("CASE", name, flush=True)
    print("CASE", name, file=sys.stderr, flush=True)


def main(mode):
    buffers = mode == "buffers"
    if buffers:
        prepare.usable_image_formats = lambda context: frozenset()
    device = "oclgrind"
    rng = np.random.default_rng(0)
    angles = np.sort(rng.uniform(0, np.pi, N_ANGLES))
    for kernel, overrides, slices, storage, interpolation in BACKPROJECTION:
        if buffers and overrides.get("texture_groups"):
            continue  # the hybrid mode's texture path reads images
        case(f"{kernel}-{slices}-{storage}-{interpolation}-{overrides}")
        data = rng.standard_normal((slices, N_ANGLES, N_BINS)).astype(np.float32)
        bp = pybp.Backprojector(N_BINS, angles, slice_shape=SHAPE, kernel=kernel,
                                slices_per_pass=slices, overrides=overrides, precision=storage,
                                interpolation=interpolation, device=device, verify=False)
        print("RESULT", bp.params.key(), verify.judge(bp(data), data, bp.geometry, bp.params),
              flush=True)
    # Oversampling, judged on the phantom's FBP; the filters (FFT, convolution, zero and
    # edge padding) and the circle mask.
    geometry = ParallelGeometry.create(31, np.linspace(0, np.pi, 32, endpoint=False))
    sinogram = phantoms.shepp_logan_radon(geometry).astype(np.float32)
    case("oversample")
    bp = pybp.Backprojector(31, geometry.angles, filter="ramp", kernel="alu", device=device,
                            overrides=dict(SMALL_ALU, cache="oversample"), verify=False)
    want = reference.fbp(sinogram[None], geometry)
    print("RESULT", bp.params.key(), "oversample-fbp",
          f"{reference.relative_rms(bp(sinogram[None]), want):.2e}", flush=True)
    filters = [(method, padding) for method in ("fft", "global-fft", "convolution") for padding in ("zero", "edge")]
    if buffers:  # Oclgrind's checker reports a process's first convolution launch
        filters.insert(4, ("convolution", "zero"))  # (test_oclgrind.py): run it twice
    for number, (method, padding) in enumerate(filters):
        case(f"filter-{method}-{padding}-{number}")
        bp = pybp.Backprojector(31, geometry.angles, filter="hann", padding=padding,
                                filter_method=method, kernel="alu", overrides=SMALL_ALU,
                                device=device, circle=True, verify=False)
        got = bp(sinogram)
        want = reference.fbp(sinogram, geometry, filter="hann", padding=padding)
        columns = np.arange(want.shape[1])
        inside = np.array([(columns >= a) & (columns < b) for a, b in bp.geometry.circle_columns()])
        want = np.where(inside, want, 0.0)  # what circle=True gives
        print("RESULT", f"filter-{method}-{padding}", f"{reference.relative_rms(got, want):.2e}",
              flush=True)
    # Normalisation (uint16 projections with flats and darks) and half scaling, streamed.
    case("reconstruct")
    n_rows = 3
    projections = rng.integers(1000, 3000, (N_ANGLES, n_rows, N_BINS)).astype(np.uint16)
    flats = np.full((2, n_rows, N_BINS), 4000, np.uint16)
    darks = np.full((2, n_rows, N_BINS), 100, np.uint16)
    volume = pybp.reconstruct(projections, angles, flats, darks, device=device, progress=False,
                              kernel="alu", overrides=SMALL_ALU, precision="half", verify=False)
    sinograms = -np.log((projections.astype(np.float64) - 100) / 3900).transpose(1, 0, 2)
    want = reference.fbp(sinograms, ParallelGeometry.create(N_BINS, angles))
    print("RESULT", "reconstruct-uint16-half", f"{reference.relative_rms(volume, want):.2e}",
          flush=True)
    # The matched pair: 9 slices, stacks of 8 and a group of 1 beside 7 zeros.
    case("pair-parallel")
    geometry = pybp.ParallelGeometry(angles, N_BINS, slice_shape=SHAPE)
    projector = pybp.Projector(geometry, slices=9, device=device)
    x = rng.standard_normal(projector.volume_shape).astype(np.float32)
    y = rng.standard_normal(projector.projection_shape).astype(np.float32)
    forward = reference.relative_rms(projector.forward(x), reference.forward_project(x, geometry))
    backward = reference.relative_rms(projector.backward(y),
                                      reference.transpose_project(y, geometry))
    print("RESULT", "pair-parallel-9", f"{forward:.2e}", f"{backward:.2e}", flush=True)
    # The cone pair, A by its gather: voxels under a pixel tall (three phases), bands of 8 rows on a detector of 10 (readers of 2
    # rows at once), lists of 5.
    case("pair-cone")
    geometry = pybp.ConeGeometry.circular(angles[:4], (10, 14), (2.0, 5.0), 80.0, 40.0,
                                          (8, 12, 12), 1.0)
    assert project.gather_phases(geometry) == 3
    (project.GATHER_ITEMS, project.SLOTS, project.GATHER_COLUMNS, project.GATHER_ENTRIES,
     project.CHUNK, project.UNROLL) = 2, 4, 3, (5,), 2, 2
    projector = pybp.Projector(geometry, device=device)
    assert projector.pair.method == "gather"
    x = rng.standard_normal(projector.volume_shape).astype(np.float32)
    y = rng.standard_normal(projector.projection_shape).astype(np.float32)
    forward = reference.relative_rms(projector.forward(x),
                                     cone_reference.forward_project(x, geometry))
    backward = reference.relative_rms(projector.backward(y),
                                      cone_reference.transpose_project(y, geometry))
    print("RESULT", "pair-cone-gather", f"{forward:.2e}", f"{backward:.2e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
