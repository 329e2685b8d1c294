#!/usr/bin/env python3
"""The matched pair's accuracy figures of docs/accuracy.md, printed: parallel beam's A
and A^T against their float64 references and the adjoint mismatch on random float32
data (seed 0) for the two geometries of tests/test_iterative.py, and masked TV against
float64 Chambolle-Pock after 1 and 5 iterations (that file's small case).

    PYBP_DEVICE=Portable python tuning/pair_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import pybp  # noqa: E402
from pybp.parallel import reference  # noqa: E402
from test_iterative import GEOMETRIES, SMALL, dense, relative_rms, tv64  # noqa: E402


def main():
    for name, geometry in GEOMETRIES.items():
        rng = np.random.default_rng(0)
        projector = pybp.Projector(geometry, rows=2)
        x = rng.standard_normal(projector.volume_shape).astype(np.float32)
        y = rng.standard_normal(projector.projection_shape).astype(np.float32)
        ax, aty = projector.forward(x), projector.backward(y)
        left = np.dot(ax.ravel().astype(np.float64), y.ravel())
        right = np.dot(x.ravel().astype(np.float64), aty.ravel())
        print(f"{name}: A {relative_rms(ax, reference.forward_project(x, geometry)):.2g}, "
              f"A^T {relative_rms(aty, reference.backproject(y.transpose(1, 0, 2), geometry)):.2g}, "
              f"adjoint mismatch {left / right - 1:.2g}")
    rng = np.random.default_rng(0)
    a = dense(SMALL)
    b = (a @ (rng.random(SMALL.slice_shape) - 0.2).ravel()).reshape(SMALL.n_angles, SMALL.n_bins)
    mask = rng.random(SMALL.slice_shape) > 0.3
    for iterations in (1, 5):
        got = pybp.tv(b.astype(np.float32), SMALL, iterations, 0.5, mask=mask)
        want = tv64(a, b.ravel(), (1,) + SMALL.slice_shape, iterations, 0.5, 2,
                    inside=mask.ravel())
        print(f"TV masked, {iterations} iteration(s): {relative_rms(got.ravel(), want):.2g}")


if __name__ == "__main__":
    main()
