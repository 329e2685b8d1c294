"""Accuracy of the cone-beam kernels by detector width: relative RMS from the float64
reference (pybp/cone/reference.py) of the plain back-projection and of FDK, zero-mean
random projections, a volume spread over the whole detector, for each family and kind
of positions (docs/benchmarks.md's history).

    python tuning/cone_accuracy.py [--widths 512 1024 2048 4096]
"""

from __future__ import annotations

import argparse

import numpy as np

import pybp
from pybp.cone import reference
from pybp.cone.params import ConeParams
from pybp.geometry.cone import ConeGeometry
from pybp.parallel.verify import TOLERANCES


def case(width, n_angles=12, rows=16):
    """A circular scan whose volume's shadow spans about the detector's width (columns of
    0.2 mm) and height (rows as tall as they must be)."""
    pixel = 0.2
    field = 0.55 * width * pixel  # mm, at the isocentre (magnification 1.5)
    voxel = field / 40
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_angles, endpoint=False), (rows, width),
                              (8 * voxel * 1.8 / rows, pixel), 400.0, 200.0, (8, 40, 40), voxel)
    data = np.random.default_rng(width).standard_normal((n_angles, rows, width)).astype(np.float32)
    return g, data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=int, nargs="*", default=[512, 1024, 2048, 4096])
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    sets = [("exact", "double"), ("exact", "float"), ("texture", "double"), ("texture", "float")]
    print("| width | " + " | ".join(f"{f} {p}: back-projection, FDK" for f, p in sets) + " |")
    print("| --- |" + " --- |" * len(sets))
    for width in args.widths:
        g, data = case(width)
        want = reference.backproject(data, g), reference.fdk(data, g)
        cells = []
        for family, positions in sets:
            params = ConeParams(family, 4, 8, (16, 8), positions)
            errors = []
            for filter, target in zip((None, "ramp"), want):
                with pybp.ConeBackprojector(g, params, filter=filter, device=args.device) as bp:
                    got = bp(data)
                errors.append(float(np.sqrt(np.mean((got - target) ** 2) / np.mean(target ** 2))))
            rule = TOLERANCES["exact" if family == "exact" else "texture"]
            mark = "" if max(errors) <= rule else " (over the rule)"
            cells.append(f"{errors[0]:.1e}, {errors[1]:.1e}{mark}")
        print(f"| {width} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
