"""The parallel-beam kernels' sources and arguments (templates/parallel/): the
back-projection of each parameter set, the packing of sinograms into its texels, the
texture-engine probe, and the reconstruction circle. Each kernel's arguments are
declared here once (pybp/cl/kernel.py): they render its parameter list and bind its
launch."""

from __future__ import annotations

import functools

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.parallel.params import KernelParams, TextureParams

# Template of each kernel family; `standard` and `locality` differ only in the index
# mapping, so they share one template.
TEMPLATES = {
    "standard": "parallel/texture.cl.mako",
    "locality": "parallel/texture.cl.mako",
    "multiproj": "parallel/multiproj.cl.mako",
    "alu": "parallel/alu.cl.mako",
}
PACK_ITEMS = 16  # work-items along the bins of the packing kernel
CIRCLE_ITEMS = 64  # work-items along a row of the reconstruction-circle kernel
# What packing depends on: every parameter set with the same texel layout shares one
# packing kernel (one source, one build).
PACK_FIELDS = ("slices_per_pass", "storage", "texel_channels", "texel_rows")

# The back-projection's arguments after the per-angle table, the same for every family.
TAIL = (
    *ints("n_angles", "n_bins", "nx", "ny"),
    Arg("accumulate", "const int", "add to `out` (a later piece) or overwrite it"),
    Arg("first_plane", "const int", "this pass's first slice in `out`"),
    Arg("first_column", "const int", "the launch's first pixel column and row:"),
    Arg("first_row", "const int", "long launches run in tiles (pybp/cl/pacing.py)"),
    Arg("out", "__global float *", "planes of ny x nx (a chunk's slices)"),
)


def _texels(p: KernelParams) -> Arg:
    """The argument that carries the sinogram texels: an image, or a buffer of them."""
    if p.source == "image":
        kind = "__read_only image2d_t"
    elif p.storage == "half":
        kind = "__global const half *"
    else:
        kind = f"__global const float{'' if p.slices_per_pass == 1 else p.slices_per_pass} *"
    return Arg("sinogram", kind, "interleaved sinograms, n_angles rows of n_bins texels")


def backproject_args(p: KernelParams) -> tuple:
    """Arguments of ``backproject`` for ``p``: texels, per-angle table, :data:`TAIL`."""
    if p.family == "alu":
        table = Arg("projection", "__global const float8 *",
                    "per angle: cos, sin, base and the residuals of base, cos and sin")
    elif p.constants == "local":
        table = Arg("projection", "__global const float4 *",
                    "per angle: cos, sin, base; cached in local memory")
    else:
        table = Arg("projection", "__constant const float4 *",
                    "per angle: cos, sin, base (h = x cos - y sin + base)")
    return (_texels(p), table) + TAIL


def probe_args(p: KernelParams) -> tuple:
    return (_texels(p), Arg("row_slope", "const float", "0: the 4 pixels of a work-item "
                            "fetch alike")) + TAIL


PACK_ARGS_HEAD = (
    Arg("sinograms", "__global const float *", "a chunk's planes of n_angles x n_bins"),
    Arg("first_slice", "const int", "this pass's first plane"),
    Arg("n_slices", "const int", "slices in this pass"),
    Arg("n_angles", "const int"),
    Arg("n_bins", "const int"),
    Arg("first_angle", "const int", "the piece: angles [first_angle, +piece_angles)"),
    Arg("first_bin", "const int", "           bins [first_bin, +piece_bins)"),
    Arg("piece_angles", "const int"),
    Arg("piece_bins", "const int"),
    Arg("scales", "__global const float *", "per plane of the chunk: a power of two"),
)


def pack_args(p: KernelParams) -> tuple:
    return PACK_ARGS_HEAD + (Arg("texels", f"__global {'half' if p.storage == 'half' else 'float'} *",
                                 "piece_angles x texel_rows x piece_bins x channels"),)


CIRCLE_ARGS = (
    Arg("slices", "__global float *", "a chunk's planes of nx x ny pixels"),
    Arg("nx", "const int"),
    Arg("ny", "const int"),
    Arg("inside", "__global const int2 *", "per row: first and stop column inside"),
)


@functools.lru_cache(maxsize=256)
def backproject_source(params: KernelParams) -> str:
    """OpenCL source of the back-projection kernel ``backproject`` for ``params``."""
    params.validate()
    return codegen.render(TEMPLATES[params.kernel], {"backproject": backproject_args(params)},
                          p=params, probe=False)


def pack_params(params: KernelParams) -> KernelParams:
    """The packing kernel's parameter set: only the texel layout of ``params``."""
    return TextureParams(**{name: getattr(params, name) for name in PACK_FIELDS})


@functools.lru_cache(maxsize=64)
def pack_source(params: KernelParams) -> str:
    """Source of ``pack``: interleave and convert sinograms into ``params``' texels."""
    params = pack_params(params)
    return codegen.render("parallel/pack.cl.mako", {"pack": pack_args(params)}, p=params,
                          fields=PACK_FIELDS)


@functools.lru_cache(maxsize=64)
def probe_source(params: TextureParams) -> str:
    """Source of ``fetch_only``: the texture-engine ceiling for ``params``' texels,
    measured with the ``multiproj`` schedule (the best fetch pattern we have)."""
    params = params.with_(kernel="multiproj")
    return codegen.render("parallel/multiproj.cl.mako", {"fetch_only": probe_args(params)},
                          p=params, probe=True)


LOCAL_PROBE_ITEMS = 256  # work-items per group of the local-memory probe
LOCAL_PROBE_LOADS = 32  # loads per round, unrolled
LOCAL_PROBE_SPAN = 64  # elements the rounds' start moves over
LOCAL_PROBE_ARGS = (Arg("rounds", "const int", "rounds of LOADS loads per work-item"),
                    Arg("out", "__global float *", "a sum per work-item, so loads stay"))


@functools.lru_cache(maxsize=8)
def local_probe_source(width: int) -> str:
    """Source of ``local_loads``: the local-memory load rate for loads of ``width``
    bytes (4, 8 or 16: one, two or four floats)."""
    if width not in (4, 8, 16):
        raise ValueError(f"width: expected 4, 8 or 16 bytes, got {width!r}")
    return codegen.render("parallel/local_probe.cl.mako", {"local_loads": LOCAL_PROBE_ARGS},
                          width=width, lanes=width // 4, items=LOCAL_PROBE_ITEMS,
                          loads=LOCAL_PROBE_LOADS, span=LOCAL_PROBE_SPAN)


@functools.lru_cache(maxsize=1)
def circle_source() -> str:
    return codegen.render("parallel/circle.cl.mako", {"outside_circle": CIRCLE_ARGS})
