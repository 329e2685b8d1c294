"""The kernel parameter set: the one structure that flows profiler -> template -> runner.

Each family has one frozen dataclass with ``validate()``; work sizes and local-memory
needs are derived here and nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import numpy as np

TEXTURE_KERNELS = ("standard", "locality", "multiproj")
INTERPOLATIONS = ("nearest", "linear")
STORAGES = ("float", "half")
SLICES_PER_PASS = (1, 2, 4)
SOURCES = ("image", "buffer")
CONSTANT_MODES = ("constant", "local")

TILE = 16  # every texture kernel covers 16x16 pixels per work-group (Sect. 5.1, 5.6)
MULTIPROJ_PROJECTIONS = 4  # projections in flight per work-group in `multiproj` (Alg. 3)
LOCAL_CONSTANTS = 256  # projection constants cached per round in local memory (Alg. 5)


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(str, choices))}; got {value!r}")


@dataclass(frozen=True)
class TextureParams:
    """Parameters of the texture-engine family (paper Sect. 5).

    - ``kernel``: ``standard`` (Alg. 1, one pixel per work-item), ``locality`` (4x4
      squares along a Z-order curve, Sect. 5.5) or ``multiproj`` (4 projections x 4
      pixels per work-item, partial sums reduced in local memory, Sect. 5.6, Alg. 3).
    - ``slices_per_pass`` (n_v): sinograms interleaved into one texel (Sect. 5.2).
    - ``texel_channels``: channels of the stored texel; 4 where a device lacks the
      two-channel format, with the spare channels zero.
    - ``texel_rows``: image rows per projection: 1, or 2 to store 4 slices as two
      2-slice texels in adjacent rows where wide texels filter slower (128-bit at a
      quarter rate on NVIDIA); adjacent rows keep both fetches in one cache tile.
    - ``storage``: ``float`` or ``half`` texels (Sect. 5.3); arithmetic stays float.
    - ``source``: ``image`` (the texture engine interpolates) or ``buffer`` (arithmetic
      interpolation from global memory, for devices without usable images).
    - ``constants``: ``multiproj`` reads projection constants from ``__constant``
      memory or caches them in local memory (Alg. 5).
    - ``unroll``: unroll hint for the projection loop (1 = none).
    - ``launch_texel_bytes``: most texel bytes one launch reads (0: no cap). Work-groups
      sweep all projections out of step, so a launch's texels should fit the L2
      cache; more angles are split into launches that accumulate.
    """

    kernel: str = "standard"
    slices_per_pass: int = 1
    interpolation: str = "linear"
    storage: str = "float"
    texel_channels: int = 1
    texel_rows: int = 1
    source: str = "image"
    constants: str = "constant"
    unroll: int = 4
    launch_texel_bytes: int = 0

    family = "texture"

    def validate(self):
        _check_choice("kernel", self.kernel, TEXTURE_KERNELS)
        _check_choice("slices_per_pass", self.slices_per_pass, SLICES_PER_PASS)
        _check_choice("interpolation", self.interpolation, INTERPOLATIONS)
        _check_choice("storage", self.storage, STORAGES)
        _check_choice("source", self.source, SOURCES)
        _check_choice("constants", self.constants, CONSTANT_MODES)
        _check_choice("texel_channels", self.texel_channels, (1, 2, 4))
        _check_choice("texel_rows", self.texel_rows, (1, 2))
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
        if self.constants == "local" and self.kernel != "multiproj":
            raise ValueError("constants: 'local' caching is a multiproj option (Alg. 5)")
        if not 1 <= self.unroll <= 64:
            raise ValueError(f"unroll: expected 1..64, got {self.unroll}")
        if self.launch_texel_bytes < 0:
            raise ValueError(f"launch_texel_bytes: expected >= 0, got {self.launch_texel_bytes}")
        return self

    # ---- derived quantities -------------------------------------------------------
    @property
    def local_size(self):
        return (TILE, TILE)

    def global_size(self, slice_shape):
        ny, nx = slice_shape
        return (-(-nx // TILE) * TILE, -(-ny // TILE) * TILE)

    @property
    def local_memory_bytes(self):
        if self.kernel != "multiproj":
            return 0
        partial_sums = MULTIPROJ_PROJECTIONS * TILE * TILE * 4 * self.slices_per_pass
        cache = LOCAL_CONSTANTS * 16 if self.constants == "local" else 0
        return partial_sums + cache

    @property
    def bytes_per_bin(self):
        """Texel bytes of one detector bin of one projection."""
        return self.texel_channels * self.texel_rows * self.texel_dtype.itemsize

    @property
    def texel_dtype(self):
        return np.dtype(np.float16 if self.storage == "half" else np.float32)

    def key(self):
        """A short name: used in the rendered source's header, caches and tables."""
        parts = [self.kernel, f"v{self.slices_per_pass}", self.interpolation, self.storage,
                 f"c{self.texel_channels}" + ("r2" if self.texel_rows == 2 else ""),
                 self.source, f"u{self.unroll}"]
        if self.kernel == "multiproj":
            parts.append(f"k{self.constants}")
        if self.launch_texel_bytes:
            parts.append(f"l{self.launch_texel_bytes >> 20}M")
        return "-".join(parts)

    def as_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, values):
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown texture parameters: {', '.join(sorted(unknown))}")
        return cls(**values).validate()

    def with_(self, **changes):
        return replace(self, **changes).validate()
