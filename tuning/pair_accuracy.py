#!/usr/bin/env python3
"""The matched pair's accuracy figures of docs/accuracy.md, printed: A and A^T against
their float64 references and the adjoint mismatch on random float32 data (seed 0) for
the parallel and cone geometries of tests/test_iterative.py (cone beam's A by its gather
and its scatter where both apply), and masked TV against float64 Chambolle-Pock after 1
and 5 iterations (that file's small case).

    PYBP_DEVICE=Portable python tuning/pair_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import pybp  # noqa: E402
from pybp.cone import project, reference as cone_reference  # noqa: E402
from pybp.parallel import reference  # noqa: E402
from test_iterative import CONE, GEOMETRIES, SMALL, dense, relative_rms, tv64  # noqa: E402


def cone(name, geometry):
    """Cone beam's rows for ``geometry``: each of A's kernels that applies to it."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(geometry.volume_shape).astype(np.float32)
    y = rng.standard_normal((geometry.n_angles,) + geometry.detector_shape).astype(np.float32)
    want = cone_reference.forward_project(x, geometry)
    results = {}
    for below in (np.inf, -1.0):  # the gather wherever it applies, then the scatter
        project.GATHER_BELOW = below
        projector = pybp.Projector(geometry)
        method = projector.pair.method
        if method in results:
            continue
        ax, aty = projector.forward(x), projector.backward(y)
        results[method] = ax
        left = np.dot(ax.ravel().astype(np.float64), y.ravel())
        right = np.dot(x.ravel().astype(np.float64), aty.ravel())
        # (on few values <Ax, y> may be far smaller than |Ax| |y|: that ratio too)
        scale = np.linalg.norm(ax.astype(np.float64)) * np.linalg.norm(y)
        print(f"cone {name}, {method}: A {relative_rms(ax, want):.2g}, "
              f"A^T {relative_rms(aty, cone_reference.transpose_project(y, geometry)):.2g}, "
              f"adjoint mismatch {left / right - 1:.2g} ({(left - right) / scale:.2g} of "
              f"|Ax| |y|)")
    if len(results) == 2:
        print(f"cone {name}: gather against scatter "
              f"{relative_rms(results['gather'], results['scatter']):.2g}")


def main():
    for name, geometry in GEOMETRIES.items():
        rng = np.random.default_rng(0)
        projector = pybp.Projector(geometry, slices=2)
        x = rng.standard_normal(projector.volume_shape).astype(np.float32)
        y = rng.standard_normal(projector.projection_shape).astype(np.float32)
        ax, aty = projector.forward(x), projector.backward(y)
        left = np.dot(ax.ravel().astype(np.float64), y.ravel())
        right = np.dot(x.ravel().astype(np.float64), aty.ravel())
        print(f"{name}: A {relative_rms(ax, reference.forward_project(x, geometry)):.2g}, "
              f"A^T {relative_rms(aty, reference.transpose_project(y, geometry)):.2g}, "
              f"adjoint mismatch {left / right - 1:.2g}")
    below = project.GATHER_BELOW
    for name, geometry in CONE.items():
        cone(name, geometry)
    project.GATHER_BELOW = below
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
