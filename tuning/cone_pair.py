"""The cone-beam pair's A and A^T alone on issue 69's cases (as tuning/cone_astra.py
makes them: voxels 2.67, 1 and 0.5 pixels wide at the centre, 512^3 from 496 x 960 x
1248, and laminography, 512^3 from 512 x 768 x 768), each the median of ``--repeats``
runs after a warm-up, with a CRC-32 of its output: a variant of the kernels is compared
with main in one call, its speed and whether it gives the same bits.

  PYBP_DEVICE=NVIDIA python tuning/cone_pair.py
  PYBP_DEVICE=NVIDIA python tuning/cone_pair.py --set COLUMN=16 --set "BACKWARD_GROUP=(8, 8, 1)"

``--set NAME=VALUE`` sets a constant of pybp.cone.project (the kernels' shapes) before
the pair is made. A variant of the code (a branch) is timed from a checkout of its own,
``git worktree add ../variant BRANCH``, by ``PYTHONPATH=../variant python
../variant/tuning/cone_pair.py``: the first line says which pybp ran. ``--cases``
takes some of the cases, ``--only A`` or ``--only AT`` one operator, ``--size N`` scales
the volume, the projections and the detector by N / 512 (the voxels' pitch kept). The
data are uniform random floats from a fixed seed.
"""
import argparse
import ast
import zlib

import numpy as np
import pyopencl.array as cla

import pybp
from pybp.bench.iterative import median_seconds
from pybp.cone import project
from pybp.tune import cone

CASES = ("standard", "pitch-1", "pitch-0.5", "laminography")


def setting(text):
    name, equals, value = text.partition("=")
    if not equals or not hasattr(project, name.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME=VALUE, NAME a constant of pybp.cone.project")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not a Python literal")


parser = argparse.ArgumentParser(description="the cone pair's A and A^T alone, with CRCs")
parser.add_argument("--size", type=int, default=512)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
parser.add_argument("--only", choices=("A", "AT"))
parser.add_argument("--set", type=setting, action="append", default=[], dest="settings",
                    metavar="NAME=VALUE")
args = parser.parse_args()
if args.size < 8 or args.repeats < 1:
    parser.error("--size: at least 8; --repeats: at least 1")
for name, value in args.settings:
    setattr(project, name, value)

n = args.size
angles, detector = round(496 * n / 512), (round(960 * n / 512), round(1248 * n / 512))
geometries = {
    "standard": lambda: cone.geometry(n, angles, detector),
    "pitch-1": lambda: cone.geometry(n, angles, detector, pitch=1.0),
    "pitch-0.5": lambda: cone.geometry(n, angles, detector, pitch=0.5),
    "laminography": lambda: cone.laminography(n, round(512 * n / 512), (round(768 * n / 512),) * 2),
}
print(f"pybp from {pybp.__file__}; settings: "
      f"{', '.join(f'{k}={v!r}' for k, v in args.settings) or 'none'}", flush=True)
print("| case | A's kernel | A s (least-most) | A^T s (least-most) | CRC A | CRC A^T |")
print("| --- | --- | --- | --- | --- | --- |")
for case in args.cases:
    projector = pybp.Projector(geometries[case]())
    queue, pair = projector.queue, projector.pair
    rng = np.random.default_rng(0)
    volume = cla.to_device(queue, rng.random(projector.volume_shape, np.float32))
    images = cla.to_device(queue, rng.random(projector.projection_shape, np.float32))
    cells = []
    for operator, work, source, out_shape in (
            ("A", pair.forward, volume, projector.projection_shape),
            ("AT", pair.backward, images, projector.volume_shape)):
        if args.only and args.only != operator:
            cells.append(("-", "-"))
            continue
        out = cla.empty(queue, out_shape, np.float32)
        median, least, most = median_seconds(lambda: work(source.data, out.data), queue,
                                             args.repeats)
        cells.append((f"{median:.4f} ({least:.4f}-{most:.4f})",
                       f"{zlib.crc32(out.get().tobytes()):08x}"))
    print(f"| {case} | {pair.method} | {cells[0][0]} | {cells[1][0]} | {cells[0][1]} | "
          f"{cells[1][1]} |", flush=True)
    del projector, pair, volume, images
