#!/usr/bin/env python3
"""The limited-angle table of docs/accuracy.md: +-60 degrees (61 projections) of the
64^2 Shepp-Logan phantom's exact line integrals, each method's relative RMS from the
phantom inside the reconstruction circle after so many iterations
(tests/test_iterative.py::test_limited_angle_iterations_beat_fbp holds three of them).

    PYBP_DEVICE=Portable python tuning/limited_angle.py [--size 64] [--most ITERATIONS]

``--most`` caps every count of iterations (a quick look, or CI's smoke test).
"""

from __future__ import annotations

import argparse

import numpy as np

import pybp
from pybp import phantoms


def case(n):
    """``(geometry, sinogram, error)``: +-60 degrees (61 projections) of the n^2
    Shepp-Logan phantom's exact line integrals, and a volume's relative RMS from the
    phantom inside the reconstruction circle."""
    geometry = pybp.ParallelGeometry(np.radians(np.linspace(-60, 60, 61)), n)
    sinogram = phantoms.shepp_logan_radon(geometry).astype(np.float32)
    truth = phantoms.shepp_logan_image(geometry)
    inside = np.zeros((n, n), bool)
    for row, (first, stop) in enumerate(geometry.circle_columns()):
        inside[row, first:stop] = True

    def error(image):
        return float(np.linalg.norm((image - truth)[inside]) / np.linalg.norm(truth[inside]))

    return geometry, sinogram, error


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="pixels a side (default 64)")
    parser.add_argument("--most", type=int, default=None, help="cap every count of iterations")
    args = parser.parse_args(argv)
    g, sinogram, error = case(args.size)
    angles = g.angles

    def capped(counts):
        return tuple(dict.fromkeys(min(k, args.most or k) for k in counts))

    def row(name, counts, run):
        counts = capped(counts)
        print(f"| {name}: {' / '.join(map(str, counts))} iterations | "
              f"{' / '.join(f'{error(run(k)):.3f}' for k in counts)} |", flush=True)

    print("| method | error |\n| --- | --- |")
    print(f"| FBP (ramp) | {error(pybp.fbp(sinogram, angles, progress=False)):.3f} |")
    row("SIRT, nonnegative", (50, 200, 1000),
        lambda k: pybp.sirt(sinogram, g, k, nonnegative=True))
    row("SIRT, plain", (50, 200, 1000), lambda k: pybp.sirt(sinogram, g, k))
    row("SART, nonnegative, 10 subsets", (2, 5, 10, 20),
        lambda k: pybp.sart(sinogram, g, k, subsets=10, nonnegative=True))
    row("SART, nonnegative, one angle at a time", (2, 5, 10, 20),
        lambda k: pybp.sart(sinogram, g, k, nonnegative=True))
    row("CGLS", (5, 10, 20, 50), lambda k: pybp.cgls(sinogram, g, k))
    row("CGLS in the circle", (5, 10, 20, 50), lambda k: pybp.cgls(sinogram, g, k, circle=True))
    for iterations in capped((100, 400)):
        print(f"| TV, nonnegative, weight 1 / 3 / 10: {iterations} iterations | " + " / ".join(
            f"{error(pybp.tv(sinogram, g, iterations, w, nonnegative=True)):.3f}"
            for w in (1.0, 3.0, 10.0)) + " |", flush=True)


if __name__ == "__main__":
    main()
