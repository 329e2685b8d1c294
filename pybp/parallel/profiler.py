"""Architecture detection and the table of defaults: picks a parameter set.

The profiler owns the whole choice. Order of precedence: what the caller forces, then a
profile tuned on this exact device and driver (``pybp.cl.profiles``, written by ``pybp
tune``), then the first matching row of ``ARCHITECTURES``, whose last row is the generic
default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

from pybp.cl import profiles
from pybp.cl.device import DeviceDescription
from pybp.cl.kinds import DeviceKind, first_match
from pybp.parallel.params import SLICES_PER_PASS, AluParams, KernelParams, TextureParams


@dataclass(frozen=True)
class Architecture(DeviceKind):
    """One row of defaults, for the devices its :class:`pybp.cl.kinds.DeviceKind`
    fields match. ``kernels`` maps slices per pass to the kernel family."""

    kernels: dict = field(default_factory=lambda: {1: "standard", 2: "standard", 4: "standard"})
    constants: str = "constant"
    unroll: int = 4
    # Slices per pass chosen for "auto", per storage: where wide texels filter slower.
    slices_per_pass: dict = field(default_factory=lambda: {"float": 1, "half": 1})
    # Widest texel that filters at full rate; 4 slices are stored as two 2-slice
    # texels (two image rows per projection) where 4-slice texels are wider.
    max_texel_bytes: int = 16
    # Cap on the texels one launch reads, to stay in L2 (0: none); see KernelParams.
    launch_texel_bytes: int = 0
    # ALU kernel defaults (Sect. 6): 64x64 squares, 16 pixels per work-item, a warp
    # per cached row (Table 14, advanced caching mode), 16 projections per round.
    alu: dict = field(default_factory=lambda: dict(
        square=64, items=256, cached_projections=16, items_per_row=32, cache="pair",
        rounding="native", unroll=4))
    # Changes to `alu` for some settings, in order:
    # ((slices or None, interpolation or None, storage or None), dict).
    alu_settings: tuple = ()
    source: str = "paper"


MULTIPROJ = {1: "multiproj", 2: "multiproj", 4: "multiproj"}
ALU = {1: "alu", 2: "alu", 4: "alu"}
NVIDIA = ("nvidia",)
AMD = ("amd", "advanced micro")

# First match wins. Keep the generic row last.
ARCHITECTURES = (
    # H100 (sm_90), measured with `pybp bench` (docs/benchmarks.md's history): Alg. 3 with the
    # constants cached in local memory ran 3% faster than from __constant; 128-bit
    # texels filter at a quarter rate, so 4 float slices go into two RG texel rows;
    # a 64 MB sinogram image (over the 50 MB L2) ran 9% slower than 32 MB ones.
    # The ALU kernel (Sect. 6) ran 3-3.5x faster than the texture kernels with 1 and
    # 2 slices (exact, too); its parameters come from `pybp tune --families alu` and the
    # study in docs/benchmarks.md's history: fixed-point positions for linear interpolation, the
    # folded 2^23 rounding for nearest (both fewer instructions per update).
    Architecture("nvidia-hopper", vendor=NVIDIA, min_capability=(9, 0), kernels=ALU,
                 constants="local", max_texel_bytes=8, launch_texel_bytes=32 << 20,
                 alu=dict(square=64, items=256, cached_projections=32, items_per_row=32,
                          cache="pair", rounding="fixed", unroll=1),
                 alu_settings=(((None, "nearest", None), dict(rounding="float", unroll=16,
                                                        cached_projections=64)),
                               ((2, "linear", None), dict(cache="plain", items_per_row=8)),
                               ((4, None, None), dict(square=32, items_per_row=16,
                                                cached_projections=16)),
                               ((4, "nearest", None), dict(unroll=4)),
                               # Not the half pair cache for half storage: its conversions
                               # cost more than its narrower loads save (H100: 2502
                               # against 3308 GU/s for float values in the cache).
                               ((4, "linear", None), dict(cache="plain", rounding="native"))),
                 slices_per_pass={"float": 4, "half": 4}, source="docs/benchmarks.md"),
    # Maxwell to Ada: Table 13 runs Alg. 3 with constants in __constant memory; 8-byte
    # texels filter at full rate, wider ones do not (Sect. 5.2-5.3).
    Architecture("nvidia-maxwell+", vendor=NVIDIA, min_capability=(5, 0), kernels=MULTIPROJ,
                 max_texel_bytes=8, slices_per_pass={"float": 4, "half": 4},
                 source="paper Table 13, Sect. 5.2-5.3"),
    # Fermi/Kepler: Alg. 3 with constant memory (Kepler prefers it, Sect. 5.6); slow
    # half conversion on Kepler (Sect. 5.3), so float pairs.
    Architecture("nvidia-kepler", vendor=NVIDIA, min_capability=(2, 0), kernels=MULTIPROJ,
                 unroll=8, max_texel_bytes=8, slices_per_pass={"float": 2, "half": 2},
                 source="paper Table 13"),
    Architecture("nvidia", vendor=NVIDIA, kernels=MULTIPROJ, max_texel_bytes=8,
                 slices_per_pass={"float": 2, "half": 2}, source="paper Sect. 5.6"),
    # AMD: slow constant memory, so Alg. 5 caches 256 constants in local memory
    # (Table 13's 256 column); no half-float conversion on older GCN (Sect. 5.3).
    Architecture("amd", vendor=AMD, device_type="gpu", kernels=MULTIPROJ, constants="local",
                 slices_per_pass={"float": 2, "half": 2}, source="paper Table 13, Sect. 5.6"),
    # Intel GPUs: not in the paper; the Z-order mapping helps every texture cache.
    Architecture("intel-gpu", vendor=("intel",), device_type="gpu",
                 kernels={1: "locality", 2: "locality", 4: "locality"},
                 slices_per_pass={"float": 2, "half": 2}, source="untuned"),
    # CPU runtimes (PoCL, Intel CPU): images are emulated in software, so the ALU
    # kernel, which reads each texel once per cached row, runs 10-13x faster than the
    # texture kernels (PoCL 3.0, 2 cores, 256^3: 0.88 against 0.07 GU/s for one slice,
    # 3.08 against 0.31 for four; docs/benchmarks.md's history). Fixed-point positions and the
    # plain cache won every setting of the study there.
    Architecture("cpu", device_type="cpu", unroll=1, kernels=ALU,
                 alu=dict(square=64, items=256, cached_projections=32, items_per_row=32,
                          cache="plain", rounding="fixed", unroll=1),
                 alu_settings=(((1, "nearest", None), dict(cached_projections=16, unroll=4)),
                               ((2, None, None), dict(square=32, items=128, items_per_row=16,
                                                cached_projections=16)),
                               ((4, None, None), dict(square=32, items=128, items_per_row=16,
                                                cached_projections=16))),
                 slices_per_pass={"float": 4, "half": 4}, source="docs/benchmarks.md (PoCL)"),
    Architecture("generic", source="safe default"),
)


def architecture(device: DeviceDescription) -> Architecture:
    return first_match(ARCHITECTURES, device)


# Where a kernel family gives wrong results on a device (pybp.parallel.prepare checks each
# parameter set the first time it runs there), the next of these that passes is used:
# the exact ALU kernel first, then the texture kernels from the fastest on GPUs.
FALLBACK_ORDER = ("alu", "multiproj", "locality", "standard")


def fallbacks(failed: str) -> list:
    """Kernel families to try, in order, instead of ``failed``."""
    return [kernel for kernel in FALLBACK_ORDER if kernel != failed]


def choose_texel(formats, slices_per_pass: int, storage: str, max_texel_bytes: int = 16):
    """``(source, channels, rows)``: the narrowest usable image texel for the slices,
    two texel rows per projection where one texel would be wider than
    ``max_texel_bytes``, or a buffer.

    PoCL lacks two-channel images, so two slices go into RGBA texels there.
    """
    item = 2 if storage == "half" else 4
    if slices_per_pass == 4 and 4 * item > max_texel_bytes and (2, storage) in formats:
        return "image", 2, 2
    for channels in (c for c in (1, 2, 4) if c >= slices_per_pass):
        if (channels, storage) in formats:
            return "image", channels, 1
    return "buffer", slices_per_pass, 1


def auto_slices_per_pass(device: DeviceDescription, interpolation: str, storage: str) -> int:
    """Slices per pass for ``"auto"``: of the widths ``pybp tune`` measured for this
    setting, the fastest per slice (GU/s count every slice's updates); without any,
    the architecture's choice."""
    speeds = profiles.load_speeds(device)
    measured = {width: speeds[key] for width in SLICES_PER_PASS
                if (key := profiles.setting_key(width, interpolation, storage)) in speeds}
    if measured:
        return max(measured, key=measured.get)
    return architecture(device).slices_per_pass[storage]


def kernel_params(device: DeviceDescription, formats, slices_per_pass: int,
                  interpolation: str, storage: str, kernel: str = "auto",
                  tuned: dict | None = None, **overrides) -> KernelParams:
    """The parameter set for this device and setting: texture or ALU family.

    ``tuned`` is a tuned profile entry; by default this device's saved profile is read
    (``pybp.cl.profiles``). ``overrides`` force any field, as tests and benchmarks do.
    """
    if slices_per_pass not in SLICES_PER_PASS:
        raise ValueError(f"slices_per_pass: expected 1, 2, 4 or 'auto'; got {slices_per_pass!r}")
    row = architecture(device)
    if tuned is None:
        tuned = profiles.load_profile(device).get(
            profiles.setting_key(slices_per_pass, interpolation, storage))
    tuned = dict(tuned or {})
    if kernel == "auto":
        kernel = tuned.get("kernel", row.kernels[slices_per_pass])
    elif tuned.get("kernel") != kernel:
        tuned = {}  # tuned for another family
    if kernel == "alu":
        family = AluParams
        # Caching reads whole texels: no filtering rate to protect with two rows.
        source, channels, rows = choose_texel(formats, slices_per_pass, storage)
        values = dict(row.alu)
        for (slices, interp, stored), changes in row.alu_settings:
            if (slices in (None, slices_per_pass) and interp in (None, interpolation)
                    and stored in (None, storage)):
                values.update(changes)
        if interpolation != "linear":
            values["cache"] = "plain"
    else:
        family = TextureParams
        source, channels, rows = choose_texel(formats, slices_per_pass, storage, row.max_texel_bytes)
        values = dict(constants=row.constants, unroll=row.unroll)
    names = {f.name for f in dataclass_fields(family)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"overrides: {', '.join(unknown)} is not a parameter of the {kernel} "
                         f"kernel; known: {', '.join(sorted(names))}")
    values.update({k: v for k, v in tuned.items() if k in names})
    values.update(kernel=kernel, launch_texel_bytes=row.launch_texel_bytes)
    if kernel in ("standard", "locality"):  # local caching is Alg. 5, a multiproj option
        values["constants"] = "constant"
    values.update(slices_per_pass=slices_per_pass, interpolation=interpolation, storage=storage,
                  source=source, texel_channels=channels, texel_rows=rows)
    values.update(overrides)
    if values["source"] == "buffer":
        values.update(texel_channels=slices_per_pass, texel_rows=1)
    params = family(**values).validate()
    # Candidate loop (reikna's habit): halve the cached projections until the cache
    # fits, unless the caller forced their number.
    while (params.local_memory_bytes > device.local_memory and family is AluParams
           and "cached_projections" not in overrides and params.cached_projections > 1):
        params = params.with_(cached_projections=params.cached_projections // 2)
    if params.local_memory_bytes > device.local_memory:
        raise ValueError(f"{params.key()}: needs {params.local_memory_bytes} bytes of local memory, "
                         f"{device.name} has {device.local_memory}; cache fewer projections")
    return params
