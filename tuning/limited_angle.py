#!/usr/bin/env python3
"""The limited-angle table of docs/accuracy.md: +-60 degrees (61 projections) of the
64^2 Shepp-Logan phantom's exact line integrals, each method's relative RMS from the
phantom inside the reconstruction circle after so many iterations
(tests/test_iterative.py::test_limited_angle_iterations_beat_fbp holds three of them).

    PYBP_DEVICE=Portable python tuning/limited_angle.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pybp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_iterative import limited_angle_case  # noqa: E402


def main():
    g, sinogram, error = limited_angle_case()
    angles = g.angles

    def row(name, counts, run):
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
    for iterations in (100, 400):
        print(f"| TV, nonnegative, weight 1 / 3 / 10: {iterations} iterations | " + " / ".join(
            f"{error(pybp.tv(sinogram, g, iterations, w, nonnegative=True)):.3f}"
            for w in (1.0, 3.0, 10.0)) + " |", flush=True)


if __name__ == "__main__":
    main()
