"""The kernel parameter set: the one structure that flows profiler -> template -> stage.

Each family has one frozen dataclass with ``validate()``; work sizes, local-memory needs
and every fixed size a template uses are defined here and nowhere else. Each field's
``metadata`` carries its help text and choices, from which ``pybp render`` builds its
options.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

TEXTURE_KERNELS = ("standard", "locality", "multiproj")
ALU_KERNELS = ("alu",)
KERNELS = TEXTURE_KERNELS + ALU_KERNELS
INTERPOLATIONS = ("nearest", "linear")
STORAGES = ("float", "half")
SLICES_PER_PASS = (1, 2, 4)
SOURCES = ("image", "buffer")
CONSTANT_MODES = ("constant", "local")
CACHE_MODES = ("plain", "pair", "oversample")
ROUNDINGS = ("native", "float", "fixed")
OFFSET_CACHES = ("hm", "hx")

# Every (slices per pass, interpolation, storage) a kernel is benchmarked and tuned for.
SETTINGS = tuple((n, i, s) for n in SLICES_PER_PASS for i in ("linear", "nearest") for s in STORAGES)

TEXTURE_GROUP_SIDE = 16  # every texture kernel covers 16x16 pixels per work-group (Sect. 5.1, 5.6)
MULTIPROJ_PROJECTIONS = 4  # projections in flight per work-group in `multiproj` (Alg. 3)
LOCAL_CONSTANTS = 256  # projection constants cached per round in local memory (Alg. 5)
ZORDER_SIDE = 4  # 4x4 pixel squares walked along a Z-order curve (Sect. 5.5, 6.3)
OVERSAMPLING = 4  # samples cached per bin in `oversample` mode (Sect. 7.2)
HYBRID_PERIOD = 8  # hybrid mode: texture_groups of every 8 work-groups (Sect. 7.1)
# Floats per angle in the projection table: texture kernels read (cos, sin, base, base
# residual) as one 128-bit load (Sect. 5.7); the ALU kernel also reads the residuals of
# cos and sin, so that the square origin is exact at any detector width (docs/design.md, section 6).
TEXTURE_CONSTANT_FLOATS = 4
ALU_CONSTANT_FLOATS = 8


def _field(default, help, choices=None):
    return field(default=default, metadata=dict(help=help, choices=choices))


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(str, choices))}; got {value!r}")


@dataclass(frozen=True)
class KernelParams:
    """What every kernel family shares: slices, interpolation and the texel layout.

    - ``slices_per_pass`` (n_v): sinograms interleaved into one texel (Sect. 5.2).
    - ``texel_channels``: channels of the stored texel; 4 where a device lacks the
      two-channel format, with the spare channels zero.
    - ``texel_rows``: image rows per projection: 1, or 2 to store 4 slices as two
      2-slice texels in adjacent rows where wide texels filter slower (128-bit at a
      quarter rate on NVIDIA); adjacent rows keep both fetches in one cache tile.
    - ``storage``: ``float`` or ``half`` texels (Sect. 5.3); arithmetic stays float.
    - ``source``: ``image`` (read through the texture engine) or ``buffer`` (global
      memory, for devices without usable images).
    - ``unroll``: unroll hint for the projection loop (1 = none).
    - ``launch_texel_bytes``: most texel bytes one launch reads (0: no cap). Work-groups
      sweep all projections out of step, so a launch's texels should fit the L2
      cache; more angles are split into launches that accumulate.
    """

    kernel: str = _field("standard", "kernel family", KERNELS)
    slices_per_pass: int = _field(1, "n_v: sinograms interleaved into one texel", SLICES_PER_PASS)
    interpolation: str = _field("linear", "nearest or linear", INTERPOLATIONS)
    storage: str = _field("float", "texel precision (arithmetic stays float)", STORAGES)
    texel_channels: int = _field(1, "channels per texel (>= slices per texel row)", (1, 2, 4))
    texel_rows: int = _field(1, "image rows per projection (2: 4 slices as two RG rows)", (1, 2))
    source: str = _field("image", "texture images or global-memory buffers", SOURCES)
    constants: str = _field("constant", "projection table in __constant or local memory",
                            CONSTANT_MODES)
    unroll: int = _field(4, "unroll hint of the projection loop (1: none)")
    launch_texel_bytes: int = _field(0, "most texel bytes one launch reads (0: no cap)")

    family = "texture"

    def _validate_layout(self):
        for f in fields(self):
            if f.metadata.get("choices") and f.name != "kernel":
                _check_choice(f.name, getattr(self, f.name), f.metadata["choices"])
        if self.texel_rows == 2 and (self.slices_per_pass != 4 or self.source != "image"
                                     or self.texel_channels == 1):
            raise ValueError("texel_rows: two rows hold 4 slices in images, 2 per texel")
        if self.texel_channels * self.texel_rows < self.slices_per_pass:
            raise ValueError(
                f"texel_channels: {self.texel_channels} channels cannot hold "
                f"{self.slices_per_pass} slices per pass"
            )
        if self.source == "buffer" and self.texel_channels != self.slices_per_pass:
            raise ValueError("texel_channels: buffers store exactly slices_per_pass channels")
        if not 1 <= self.unroll <= 64:
            raise ValueError(f"unroll: expected 1..64, got {self.unroll}")
        if self.launch_texel_bytes < 0:
            raise ValueError(f"launch_texel_bytes: expected >= 0, got {self.launch_texel_bytes}")

    def _layout_key(self):
        return [self.kernel, f"v{self.slices_per_pass}", self.interpolation, self.storage,
                f"c{self.texel_channels}" + ("r2" if self.texel_rows == 2 else ""),
                self.source, f"u{self.unroll}"]

    @property
    def uses_constant_memory(self):
        """Whether the projection table is read from ``__constant`` memory (its size caps
        the angles of one launch) rather than cached from global memory."""
        return self.constants == "constant"

    @property
    def bytes_per_bin(self):
        """Texel bytes of one detector bin of one projection."""
        return self.texel_channels * self.texel_rows * self.texel_dtype.itemsize

    @property
    def texel_dtype(self):
        return np.dtype(np.float16 if self.storage == "half" else np.float32)

    @property
    def texels_per_row(self):
        """Slices each texel row holds."""
        return self.slices_per_pass // self.texel_rows

    @property
    def constant_floats(self):
        """Floats per angle in the projection table this family reads."""
        return TEXTURE_CONSTANT_FLOATS

    def as_dict(self):
        return asdict(self)

    def with_(self, **changes):
        return replace(self, **changes).validate()


@dataclass(frozen=True)
class TextureParams(KernelParams):
    """The texture-engine family (paper Sect. 5), besides :class:`KernelParams`:

    - ``kernel``: ``standard`` (Alg. 1, one pixel per work-item), ``locality`` (4x4
      squares along a Z-order curve, Sect. 5.5) or ``multiproj`` (4 projections x 4
      pixels per work-item, partial sums reduced in local memory, Sect. 5.6, Alg. 3).
    - ``constants``: ``multiproj`` reads projection constants from ``__constant``
      memory or caches them in local memory (Alg. 5).
    """

    family = "texture"

    def validate(self):
        _check_choice("kernel", self.kernel, TEXTURE_KERNELS)
        self._validate_layout()
        if self.constants == "local" and self.kernel != "multiproj":
            raise ValueError("constants: 'local' caching is a multiproj option (Alg. 5)")
        return self

    # ---- derived quantities, read by the templates and the stages -------------------
    projections_in_flight = MULTIPROJ_PROJECTIONS
    local_constants = LOCAL_CONSTANTS

    @property
    def local_size(self):
        return (TEXTURE_GROUP_SIDE, TEXTURE_GROUP_SIDE)

    @property
    def group_side(self):
        """Side of the pixel square of one work-group: a launch over a tile of the
        slice starts at a multiple of it."""
        return TEXTURE_GROUP_SIDE

    def global_size(self, slice_shape):
        ny, nx = slice_shape
        side = TEXTURE_GROUP_SIDE
        return (-(-nx // side) * side, -(-ny // side) * side)

    @property
    def local_memory_bytes(self):
        if self.kernel != "multiproj":
            return 0
        partial_sums = MULTIPROJ_PROJECTIONS * TEXTURE_GROUP_SIDE ** 2 * 4 * self.slices_per_pass
        cache = LOCAL_CONSTANTS * 4 * TEXTURE_CONSTANT_FLOATS if self.constants == "local" else 0
        return partial_sums + cache

    def key(self):
        """A short name: used in the rendered source's header, caches and tables."""
        parts = self._layout_key()
        if self.kernel == "multiproj":
            parts.append(f"k{self.constants}")
        if self.launch_texel_bytes:
            parts.append(f"l{self.launch_texel_bytes >> 20}M")
        return "-".join(parts)


@dataclass(frozen=True)
class AluParams(KernelParams):
    """The ALU family (paper Sect. 6): each work-group caches, for ``cached_projections``
    projections at a time, the bins its square of pixels needs, in local memory, and
    interpolates with arithmetic. Besides :class:`KernelParams`:

    - ``square`` (n_s): side of the pixel square of a work-group, 32 or 64; 1.5 n_s bins
      are cached per projection (Sect. 6.1).
    - ``items``: work-items per work-group, 128 or 256; each takes
      ``pixels_per_item`` = n_s^2 / items pixels (n_q: 4, 8 or 16).
    - ``cached_projections`` (s_d): projections cached per round.
    - ``items_per_row`` (s_t): work-items caching one projection row (Table 14).
    - ``cache``: ``plain`` (a value per bin), ``pair`` (value and difference to the
      next bin as one 64-bit float2: linear interpolation is one load and one FMA,
      Sect. 6.4) or ``oversample`` (4 linearly interpolated samples per bin, at 0, 1/4,
      1/2 and 3/4, read back nearest: an approximation of linear interpolation at the
      cost of nearest, Sect. 7.2).
    - ``rounding``: how a position in the cache becomes a bin and a weight: ``native``
      conversion, ``float`` (the 2^23 trick of Sect. 6.6) or ``fixed``: positions as
      9.23 fixed-point integers stepped from pixel to pixel, the bin a shift and 1 + w
      the fraction's bits under the exponent of 1.0f, so no conversion per update.
    - ``offset_cache``: ``hm``, one offset per cached projection (the square's first
      pixel, Sect. 6.2), or ``hx``, one per pixel column, x cos included, so a pixel's
      position costs one FMA less per projection (Sect. 6.8).
    - ``cache_storage``: ``float``, or ``half`` values in local memory (vload_half and
      vstore_half, Sect. 6.7), only with half storage: half the bytes per load. With the
      plain cache it holds the texels exactly; with ``pair`` each bin's value and
      difference sit side by side as halves, so that one slice's linear interpolation
      is one 32-bit load and one FMA (the differences rounded to half: the ``half``
      rule judges it, pybp.parallel.verify).
    - ``texture_groups``: hybrid mode (Sect. 7.1): of every 8 work-groups (by linear
      index, so that each compute unit gets the mix), this many interpolate with the
      texture engine over their square and the rest with the ALU path, in one launch,
      so that texture units and ALUs work at once. 0: ALU only.

    The source texels are read whole (nearest) when cached; projection constants come
    from global memory, cached with the bins, so ``constants`` is ``local``.
    """

    kernel: str = _field("alu", "kernel family", KERNELS)
    constants: str = _field("local", "projection table in __constant or local memory",
                            CONSTANT_MODES)
    square: int = _field(64, "n_s: pixels per side of a work-group's square", (32, 64))
    items: int = _field(256, "work-items per work-group", (128, 256))
    cached_projections: int = _field(16, "s_d: projections cached per round (1..64)")
    items_per_row: int = _field(32, "s_t: work-items caching one projection row",
                                (4, 8, 16, 32, 64))
    cache: str = _field("pair", "plain, pair (value and slope) or oversample (Sect. 7.2)",
                        CACHE_MODES)
    rounding: str = _field("native", "position to bin: native, float (2^23) or fixed point",
                           ROUNDINGS)
    offset_cache: str = _field("hm", "hm: offset per projection; hx: per column (Sect. 6.8)",
                               OFFSET_CACHES)
    cache_storage: str = _field("float", "values in local memory: float or half (Sect. 6.7)",
                                STORAGES)
    texture_groups: int = _field(0, f"hybrid: work-groups of every {HYBRID_PERIOD} on the "
                                    f"texture path (Sect. 7.1)")

    family = "alu"
    hybrid_period = HYBRID_PERIOD

    def validate(self):
        _check_choice("kernel", self.kernel, ALU_KERNELS)
        self._validate_layout()
        if self.constants != "local":
            raise ValueError("constants: the ALU kernel caches constants with the bins ('local')")
        if self.texel_rows != 1:
            raise ValueError("texel_rows: the ALU kernel reads one texel row per projection")
        if self.pixels_per_item not in (4, 8, 16) or self.square_rows_in_flight < 1:
            raise ValueError(f"items: {self.items} work-items cannot share a {self.square}x"
                             f"{self.square} square as 4x4 squares in 4, 8 or 16 steps")
        if not 1 <= self.cached_projections <= 64:
            raise ValueError(f"cached_projections: expected 1..64, got {self.cached_projections}")
        if self.cache_storage == "half" and (self.storage != "half"
                                             or self.cache not in ("plain", "pair")):
            raise ValueError("cache_storage: half caching holds half texels (storage='half'), "
                             "as they are (cache='plain') or with their differences "
                             "(cache='pair')")
        if not 0 <= self.texture_groups <= HYBRID_PERIOD:
            raise ValueError(f"texture_groups: expected 0..{HYBRID_PERIOD}, got {self.texture_groups}")
        if self.texture_groups and self.source != "image":
            raise ValueError("texture_groups: the hybrid mode's texture path needs an image source")
        if self.items % self.items_per_row:
            raise ValueError("items_per_row: must divide items")
        if self.cache != "plain" and self.interpolation != "linear":
            raise ValueError(f"cache: '{self.cache}' serves linear interpolation; use 'plain' for nearest")
        if self.rounding == "fixed" and self.exact_linear and self.cache_width >= 128:
            raise ValueError("rounding: fixed-point weights need positions below 128 bins")
        return self

    # ---- derived quantities, read by the templates and the stages -------------------
    @property
    def cache_width(self):
        """Bins cached per projection: 1.5 n_s >= n_s sqrt(2) + the bins interpolation
        and the one-bin margin below need (Sect. 6.1)."""
        return self.square * 3 // 2

    @property
    def samples_per_bin(self):
        """Cached samples per bin: ``OVERSAMPLING`` when oversampling, else 1."""
        return OVERSAMPLING if self.cache == "oversample" else 1

    @property
    def squares_per_row(self):
        """4x4 squares along a row of the work-group's square."""
        return self.square // ZORDER_SIDE

    @property
    def square_rows_in_flight(self):
        """Rows of 4x4 squares that all work-items cover at once (Fig. 13)."""
        return (self.items // ZORDER_SIDE ** 2) // self.squares_per_row

    @property
    def row_step(self):
        """Pixel rows between the pixels of one work-item."""
        return ZORDER_SIDE * self.square_rows_in_flight

    @property
    def pixels_per_item(self):
        """n_q."""
        return self.square // self.row_step if self.square_rows_in_flight else 0

    @property
    def exact_linear(self):
        """Linear interpolation from the cache (not the oversampled approximation)."""
        return self.interpolation == "linear" and self.cache != "oversample"

    @property
    def constant_floats(self):
        return ALU_CONSTANT_FLOATS

    @property
    def local_loads(self):
        """``(bytes per load, loads per update)`` from the cache: what bounds the
        kernel where local memory does (``pybp bench`` sets it beside the measured
        load rate of the device)."""
        value = (2 if self.cache_storage == "half" else 4) * self.slices_per_pass
        if self.exact_linear and self.cache == "pair":
            # One load of value and difference where they sit side by side (one slice,
            # or halves); else a load from each of the two arrays.
            side_by_side = self.slices_per_pass == 1 or self.cache_storage == "half"
            return (2 * value, 1) if side_by_side else (value, 2)
        if self.exact_linear:
            return value, 2  # the bin and the next
        return value, 1  # nearest, or the nearest of the oversampled samples

    @property
    def local_size(self):
        return (self.items, 1)

    @property
    def group_side(self):
        return self.square

    def global_size(self, slice_shape):
        ny, nx = slice_shape
        return (-(-nx // self.square) * self.items, -(-ny // self.square))

    @property
    def local_memory_bytes(self):
        value = (2 if self.cache_storage == "half" else 4) * self.slices_per_pass
        per_bin = {"plain": 1, "pair": 2, "oversample": OVERSAMPLING}[self.cache] * value
        column_offsets = self.square * 4 if self.offset_cache == "hx" else 0
        geometry = 16 + 4  # cos, sin, offset and step; the first cached bin
        return self.cached_projections * (self.cache_width * per_bin + geometry + column_offsets)

    def key(self):
        parts = self._layout_key() + [
            f"s{self.square}", f"i{self.items}", f"d{self.cached_projections}",
            f"t{self.items_per_row}", self.cache, self.rounding]
        if self.offset_cache == "hx":
            parts.append("hx")
        if self.cache_storage == "half":
            parts.append("halfcache")
        if self.texture_groups:
            parts.append(f"hybrid{self.texture_groups}of{HYBRID_PERIOD}")
        if self.launch_texel_bytes:
            parts.append(f"l{self.launch_texel_bytes >> 20}M")
        return "-".join(parts)


def family_of(kernel: str):
    """The parameter-set class of a kernel name."""
    return AluParams if kernel in ALU_KERNELS else TextureParams
