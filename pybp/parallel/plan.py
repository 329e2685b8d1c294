"""What is decided once per geometry and device: the parameter set of
every pass width a call can use, the pieces each of its launches reads, and their
per-angle tables. Everything here is checked when the plan is made, so a call never
discovers a bad setting after it has written part of its output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pybp.parallel import profiler
from pybp.cl.device import DeviceDescription
from pybp.geometry.parallel import ParallelGeometry
from pybp.parallel.params import ALU_KERNELS, SLICES_PER_PASS, KernelParams


@dataclass(frozen=True)
class Piece:
    """Part of the sinogram one launch reads: what fits the device's images and
    constant memory, and the L2 cap. Pieces of one pass add up, first one writing."""

    first_angle: int
    n_angles: int
    first_bin: int
    n_bins: int


def split(total, most):
    """``(start, count)`` of the fewest near-equal parts of at most ``most`` each."""
    parts = -(-total // most)
    size = -(-total // parts)
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def plan_pieces(geometry: ParallelGeometry, params: KernelParams, device: DeviceDescription,
                piece_shape=None) -> tuple:
    """The pieces of one pass with ``params``, each within that set's own caps."""
    g = geometry
    max_angles, max_bins = g.n_angles, g.n_bins
    if params.source == "image":
        max_angles = min(max_angles, device.image2d_max_height // params.texel_rows)
        max_bins = min(max_bins, device.image2d_max_width)
    if params.uses_constant_memory:
        max_angles = min(max_angles, device.constant_memory // (4 * params.constant_floats))
    if piece_shape is not None:
        max_angles, max_bins = min(max_angles, piece_shape[0]), min(max_bins, piece_shape[1])
    if params.launch_texel_bytes:
        max_angles = min(max_angles, max(1, params.launch_texel_bytes // (max_bins * params.bytes_per_bin)))
    # The packed texels of a piece are one buffer.
    max_angles = min(max_angles, max(1, device.max_allocation // (max_bins * params.bytes_per_bin)))
    return tuple(Piece(a0, na, b0, nb) for a0, na in split(g.n_angles, max_angles)
                 for b0, nb in split(g.n_bins, max_bins))


def cache_covers(params: KernelParams, geometry: ParallelGeometry) -> bool:
    """Whether an ALU kernel's cache of ``params.cache_width`` bins holds what a square
    of ``params.square`` voxels reaches at every angle of ``geometry`` (Sect. 6.1): its
    span, ``(square - 1) (|cos| + |sin|)`` times the bins per voxel, and three bins for
    the interpolation's next bin and the margins. 1.5 squares hold voxels up to about
    1.03 bins wide; the texture kernels cache nothing, and take any."""
    if params.kernel not in ALU_KERNELS:
        return True
    reach = float(np.max(np.abs(np.cos(geometry.angles)) + np.abs(np.sin(geometry.angles))))
    return (params.square - 1) * reach * geometry.pitch + 3 < params.cache_width


@dataclass(frozen=True)
class PassPlan:
    """One pass width: its parameter set, its pieces and each piece's per-angle table."""

    params: KernelParams
    pieces: tuple
    tables: tuple  # float32 (n_angles, params.constant_floats) per piece

    @property
    def texel_bytes(self) -> int:
        """Bytes of the largest piece's packed texels."""
        return max(p.n_angles * p.n_bins for p in self.pieces) * self.params.bytes_per_bin


@dataclass(frozen=True)
class Plan:
    """Pass widths and their plans. A call's slices go in passes of ``slices_per_pass``;
    a last pass of fewer slices runs the narrowest planned width that holds them.

    ``passes`` maps each planned width to its :class:`PassPlan`; ``unplanned`` maps a
    narrower width that the caller's overrides make invalid to the reason (its
    remainders then run at a wider width, zero-padded, with the same results).
    """

    geometry: ParallelGeometry
    slices_per_pass: int
    passes: dict
    unplanned: dict

    @classmethod
    def create(cls, geometry: ParallelGeometry, device: DeviceDescription, formats, slices_per_pass: int,
               interpolation: str, storage: str, kernel: str = "auto", overrides=None,
               piece_shape=None) -> "Plan":
        if piece_shape is not None and (np.ndim(piece_shape) != 1 or len(piece_shape) != 2
                                        or min(piece_shape) < 1):
            raise ValueError(f"piece_shape: expected positive (angles, bins), got {piece_shape!r}")
        overrides = dict(overrides or {})
        passes, unplanned = {}, {}
        for width in (w for w in SLICES_PER_PASS if w <= slices_per_pass):
            try:
                params = profiler.kernel_params(device, formats, width, interpolation, storage,
                                                kernel, **overrides)
                if not cache_covers(params, geometry):
                    if kernel != "auto" or overrides:
                        raise ValueError(
                            f"kernel: the ALU kernel's cache of {params.cache_width} bins "
                            f"does not hold a square of {params.square} voxels of "
                            f"{geometry.pitch:g} bins each (voxel_size / pixel_size); take "
                            "kernel='auto' or a texture kernel ('standard')")
                    params = profiler.kernel_params(device, formats, width, interpolation,
                                                    storage, "standard")
            except ValueError as exc:
                if width == slices_per_pass or not overrides:
                    raise
                unplanned[width] = str(exc)
                continue
            pieces = plan_pieces(geometry, params, device, piece_shape)
            tables = tuple(geometry.projection_constants(p.first_angle, p.n_angles, p.first_bin,
                                                         params.constant_floats) for p in pieces)
            passes[width] = PassPlan(params, pieces, tables)
        return cls(geometry, slices_per_pass, passes, unplanned)

    def replaced(self, width: int, pass_plan: PassPlan) -> "Plan":
        """This plan with the pass of ``width`` replaced (the first-use fallback of pybp.parallel.prepare)."""
        return replace(self, passes={**self.passes, width: pass_plan})

    def width_for(self, count: int) -> int:
        """The pass width that runs ``count`` slices (at most ``slices_per_pass``)."""
        return min(w for w in self.passes if w >= count)

    @property
    def params(self) -> KernelParams:
        """The parameter set of full passes."""
        return self.passes[self.slices_per_pass].params

    @property
    def texel_bytes(self) -> int:
        return max(p.texel_bytes for p in self.passes.values())

    def describe(self) -> str:
        """One line per width: what runs, in how many launches; what was not planned."""
        lines = [f"{w} slice(s): {p.params.key()}, {len(p.pieces)} launch(es)"
                 for w, p in sorted(self.passes.items())]
        lines += [f"{w} slice(s): not planned ({why}); such passes run at width "
                  f"{self.width_for(w)}" for w, why in sorted(self.unplanned.items())]
        return "\n".join(lines)
