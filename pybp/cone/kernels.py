"""Sources and arguments of the cone-beam kernels (templates/cone/)."""

from __future__ import annotations

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.cone.params import ConeParams
from pybp.geometry.cone_weights import POSE_VALUES

MATRIX_VALUES = 12  # one 3x4 matrix, row by row


def backproject_args(p: ConeParams) -> tuple:
    real = "double" if p.positions == "double" else "float"
    images = ("__read_only image2d_array_t", "this pass's images, one layer each") \
        if p.family == "texture" else ("__global const float *", "this pass's images, "
                                       "row_stride x n_cols each")
    return (
        Arg("projections", *images),
        Arg("matrices", f"__constant {real} *", "voxel (i, j, k, 1) to (c w, r w, w), per image"),
        Arg("n_projections", "const int", "in this pass"),
        Arg("first_row", "const int", "the detector row of the images' first row"),
        Arg("n_rows", "const int", "detector rows in the images (a window of the detector)"),
        Arg("row_stride", "const int", "rows from one image to the next (n_rows or more)"),
        *ints("n_cols", "nx", "ny"),
        Arg("first_plane", "const int", "the volume buffer's first z plane (k)"),
        Arg("n_planes", "const int", "z planes in the volume buffer"),
        Arg("accumulate", "const int", "add to the volume (a later pass) or overwrite it"),
        Arg("volume", "__global float *", "n_planes x ny x nx"),
    )


def backproject_source(p: ConeParams, distance_weight: bool = False,
                       shared_column: bool = False) -> str:
    """``distance_weight``: each sample times ``1 / w^2`` (FDK); ``shared_column``: the
    geometry's matrices have no z term in the column and the depth (a circular orbit,
    untilted detector), so a column of voxels shares them."""
    return codegen.render("cone/backproject.cl.mako", {"cone_backproject": backproject_args(p)},
                          p=p, matrix_values=MATRIX_VALUES, distance_weight=distance_weight,
                          shared_column=shared_column)


def preweight_args(flat_field: bool, weighted: bool = True, real: str = "float",
                   raw: str | None = None) -> tuple:
    """The pre-weighting's arguments; the flat and dark means in ``real`` (as parallel
    beam's normalisation takes them); ``raw``: the OpenCL type of the counts where they
    come in a buffer of their own (None: in the images, as floats)."""
    counts = (Arg("counts", f"__global const {raw} *", "the pass's counts, laid out as the "
                  "images"),) if raw else ()
    means = (Arg("flat", f"__global const {real} *", "the flats' mean, n_rows x n_cols of the detector"),
             Arg("dark", f"__global const {real} *", "the darks' mean")) if flat_field else ()
    weights = (Arg("poses", "__global const float *", f"per projection: {POSE_VALUES} values "
                   "(pybp/geometry/cone_weights.py)"),
               Arg("column_weights", "__global const float *", "per projection: n_cols weights"),
               Arg("first_projection", "const int", "the pass's first projection"),
               Arg("first_row", "const int", "the detector row of the images' first row")) \
        if weighted else ()
    return (
        Arg("images", "__global float *", "the pass's images, row_stride x n_cols each, in place"),
        *counts, *means, *weights,
        *ints("n_rows", "row_stride", "n_cols"),
        Arg("counted_first", "const int", "the window's first row whose replaced values are counted"),
        Arg("counted_stop", "const int", "and its row after the last (rows an earlier slab counted: none)"),
        Arg("replaced_count", "volatile __global uint *", "values replaced (not positive, not finite)"),
    )


def preweight_source(flat_field: bool, real: str, floor: float, weighted: bool = True,
                     raw: str | None = None) -> str:
    """``flat_field``: the images are counts, made line integrals first (``floor``: what
    a non-positive transmission becomes), in ``real`` arithmetic; ``raw``: the counts
    come as that OpenCL integer type in a buffer of their own. Not ``weighted`` (the
    plain back-projection): only the line integrals' check, NaN and Inf counted."""
    return codegen.render("cone/preweight.cl.mako",
                          {"cone_preweight": preweight_args(flat_field, weighted, real, raw)},
                          pose_values=POSE_VALUES, flat_field=flat_field, real=real,
                          floor=repr(float(floor)), weighted=weighted, raw=raw)
