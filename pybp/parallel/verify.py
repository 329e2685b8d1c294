"""One verification rule: how a result is judged against the float64 reference, by
tests, ``pybp tune`` and ``pybp bench`` alike (docs/design.md, section 6).

Which rule applies follows from the parameter set:

| rule | applies to | passes when |
| --- | --- | --- |
| ``exact`` | ALU kernel, linear, any source and storage | relative RMS <= 1e-5 |
| ``nearest-exact`` | ALU kernel, nearest | every pixel matches, except where a float64 position lies within 1e-4 bin of a bin boundary |
| ``texture`` | texture kernels and the hybrid mode, linear | relative RMS <= 1e-2 (8-bit weights on NVIDIA; float32 positions from the slice corner elsewhere) |
| ``nearest`` | texture kernels and the hybrid mode, nearest | at most 1% of pixels picked another bin |
| ``oversample`` | ALU oversampling (Sect. 7.2) | relative RMS <= 0.04 from exact linear, on the phantom's FBP |
| ``half`` | half storage against float storage; the ALU kernel's half pair cache against the float64 reference of the float data | relative RMS <= 1e-3, any data scale |

The reference sees the data as the texels hold them: half storage rounds each slice,
times its power-of-two scale, to half (``pybp.stages.halfscale``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pybp.stages import filters, halfscale as scaling
from pybp.parallel import reference
from pybp.geometry.parallel import ParallelGeometry

TOLERANCES = {
    "exact": 1e-5,
    "nearest-exact": 0.0,  # share of pixels off the reference away from bin boundaries
    "texture": 1e-2,
    "nearest": 0.01,  # share of pixels that picked another bin
    # Oversampling against the exact linear FBP of the Shepp-Logan phantom at 255 bins:
    # 0.030 measured (nearest: 0.118); quarter-bin steps on the ramp-filtered edges do
    # not reach docs/design.md, section 6's 1e-2 (docs/benchmarks.md's history).
    "oversample": 0.04,
    "half": 1e-3,
}
NEAREST_BOUNDARY = 1e-4  # bins: float64 positions this near a boundary may round either way
NEAREST_PIXEL_RTOL = 1e-4  # a pixel "differs" beyond this share of the result's largest value


@dataclass(frozen=True)
class Verdict:
    rule: str
    error: float
    note: str = ""

    @property
    def tolerance(self) -> float:
        return TOLERANCES[self.rule]

    @property
    def passed(self) -> bool:
        return bool(self.error <= self.tolerance)

    def __str__(self):
        status = "ok" if self.passed else "FAILED"
        return f"{self.rule} {self.error:.2e} (<= {self.tolerance:g}: {status}){self.note}"


def rule_for(params) -> str:
    """The rule that judges results of ``params``."""
    exact_family = params.family == "alu" and params.texture_groups == 0
    if params.interpolation == "nearest":
        return "nearest-exact" if exact_family else "nearest"
    if exact_family and params.cache == "pair" and params.cache_storage == "half":
        return "half"  # differences rounded to half in the cache: not exact
    if exact_family:
        return "oversample" if params.cache == "oversample" else "exact"
    return "texture"


def stored(sinograms, geometry: ParallelGeometry, storage: str, filter=None, padding="zero"):
    """Float64 texels as the kernel reads them: filtered and weighted if ``filter``, and
    rounded to half (each slice times its scale) with half storage."""
    data = np.asarray(sinograms, np.float64)
    single = data.ndim == 2
    data = data[None] if single else data
    weights = geometry.filter_weights()
    if filter is not None:
        data = filters.filter_numpy(data, filter, weights, padding)
    if storage == "half":  # each slice scaled by its largest texel, as on the device
        data = scaling.half_round(data, scaling.half_scales(np.abs(data).reshape(len(data), -1).max(axis=1)))
    return data[0] if single else data


def judge(got, sinograms, geometry: ParallelGeometry, params, filter=None, padding="zero",
          rows=None) -> Verdict:
    """Judge ``got`` (a slice or a stack, all rows) computed with ``params`` from
    ``sinograms`` against the float64 reference, on ``rows`` of the slice (default all).

    For ``oversample`` and ``half`` the reference is exact linear interpolation of the
    float data."""
    rule = rule_for(params)
    got = np.asarray(got, np.float64)
    if rows is not None:
        got = got[..., rows, :]
    texels = stored(sinograms, geometry, "float" if rule in ("oversample", "half") else params.storage,
                    filter, padding)
    interpolation = "linear" if rule == "oversample" else params.interpolation
    want = reference.backproject(texels, geometry, interpolation, rows)
    if rule not in ("nearest", "nearest-exact"):
        return Verdict(rule, reference.relative_rms(got, want))
    differs = np.abs(got - want) > NEAREST_PIXEL_RTOL * np.abs(want).max()
    if rule == "nearest":
        return Verdict(rule, float(np.mean(differs)))
    ambiguous = reference.near_boundary(geometry, NEAREST_BOUNDARY, rows)
    off = differs & ~ambiguous  # broadcasts over slices
    return Verdict(rule, float(np.mean(off)),
                   f"; {np.mean(differs):.2%} differ, all within {NEAREST_BOUNDARY} bin of a boundary"
                   if not off.any() else f"; {int(off.sum())} pixels off away from boundaries")


def judge_half(got_half, got_float) -> Verdict:
    """Half storage against float storage of the same data (rule ``half``)."""
    return Verdict("half", reference.relative_rms(got_half, np.asarray(got_float, np.float64)))


# The case every candidate is checked on before it is timed (tune, bench): positions
# reach a thousand bins, where float32 positions from the slice corner go wrong, on
# zero-mean data, so that errors do not average out; a band of rows keeps it cheap.
CHECK_BINS, CHECK_ANGLES, CHECK_ROWS = 1024, 64, 40


@dataclass(frozen=True)
class Case:
    """Random zero-mean sinograms of ``n_angles`` sorted random angles and ``n_bins``
    bins, the axis ``center_shift`` bins off the middle, into slices of ``slice_shape``;
    run by :func:`pybp.parallel.prepare.check`."""

    n_bins: int
    n_angles: int
    center_shift: float
    slice_shape: tuple


CHECK = Case(CHECK_BINS, CHECK_ANGLES, 3.3, (CHECK_ROWS, CHECK_BINS))
# The first use of a parameter set on a device (pybp.parallel.prepare): small, so that it costs
# little (0.3 M updates per slice), but with partial squares on both axes, more angles
# than any kernel caches per round (64), and the axis off the middle: where a compiler
# that mishandles barriers or vectorisation (docs/portability.md) shows.
FIRST_USE = Case(72, 70, -5.2, (61, 75))
