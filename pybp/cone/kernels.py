"""Sources and arguments of the cone-beam kernels (templates/cone/)."""

from __future__ import annotations

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.cone.params import ConeParams

MATRIX_VALUES = 12  # one 3x4 matrix, row by row


def backproject_args(p: ConeParams) -> tuple:
    real = "double" if p.positions == "double" else "float"
    return (
        Arg("projections", "__global const float *", "this pass's n_rows x n_cols images"),
        Arg("matrices", f"__constant {real} *", "voxel (i, j, k, 1) to (c w, r w, w), per image"),
        Arg("n_projections", "const int", "in this pass"),
        *ints("n_rows", "n_cols", "nx", "ny"),
        Arg("first_plane", "const int", "the volume buffer's first z plane (k)"),
        Arg("n_planes", "const int", "z planes in the volume buffer"),
        Arg("accumulate", "const int", "add to the volume (a later pass) or overwrite it"),
        Arg("volume", "__global float *", "n_planes x ny x nx"),
    )


def backproject_source(p: ConeParams) -> str:
    return codegen.render("cone/backproject.cl.mako", {"cone_backproject": backproject_args(p)},
                          p=p, matrix_values=MATRIX_VALUES)
